package inject

// KnownAnnotations is knownAnnotations, for the external tests.
var KnownAnnotations = knownAnnotations

package testbed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// EnvVarBinary names the environment variable that, when set, selects the one
// Envoy binary [FindBinaries] returns.
const EnvVarBinary = "ENVOY_BIN"

// versionTimeout bounds one `envoy --version` run.
const versionTimeout = 30 * time.Second

// VersionsFile, relative to the module root, pins the Envoy releases under test: one line each, the version and
// its scope (ScopeSuite or ScopeCore), newest first. scripts/install-envoy.sh installs what it names.
const VersionsFile = "test/envoy-versions.txt"

// The scopes of VersionsFile: which real-Envoy tests run on a release.
const (
	// ScopeSuite releases (the oldest and the newest line) run every real-Envoy test.
	ScopeSuite = "suite"
	// ScopeCore releases (the lines between) run the count and drain tests.
	ScopeCore = "core"
)

// Binary is one Envoy executable under test.
type Binary struct {
	// Path is the path of the executable as found (symlinks are not resolved).
	Path string
	// Version is the release version reported by `envoy --version`, like
	// "1.40.0" (a suffix such as "-dev" is kept).
	Version string
	// Scope is the release's scope in VersionsFile (ScopeSuite for $ENVOY_BIN).
	Scope string
}

// String returns "envoy <Version> (<Path>)".
func (b Binary) String() string { return fmt.Sprintf("envoy %s (%s)", b.Version, b.Path) }

// Pin is one line of VersionsFile.
type Pin struct {
	Version string
	Scope   string
}

// Pinned reads VersionsFile from the module root.
func Pinned() ([]Pin, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(root, VersionsFile))
	if err != nil {
		return nil, err
	}
	return parsePins(string(b))
}

// parsePins parses VersionsFile's text: "#" comments, blank lines, and "VERSION SCOPE [why...]" lines.
func parsePins(text string) ([]Pin, error) {
	var pins []Pin
	for i, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) < 2 || !versionOnlyRE.MatchString(f[0]) || (f[1] != ScopeSuite && f[1] != ScopeCore) {
			return nil, fmt.Errorf("%s:%d: want \"VERSION suite|core [why]\", have %q", VersionsFile, i+1, line)
		}
		pins = append(pins, Pin{Version: f[0], Scope: f[1]})
	}
	if len(pins) == 0 {
		return nil, fmt.Errorf("%s pins no Envoy version", VersionsFile)
	}
	return pins, nil
}

var versionOnlyRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// FindBinaries returns the Envoy binaries to use: the one named by $ENVOY_BIN
// if that is set, else <moduleRoot>/.tools/bin/envoy-<version> for every
// version VersionsFile pins (as installed by scripts/install-envoy.sh), sorted
// newest first. moduleRoot is found by walking up from the working directory to
// the first directory that holds a go.mod. The version of each binary is read
// from `envoy --version` and must be the pinned one. It returns an error if a
// pinned version is not installed or a binary cannot report its version.
func FindBinaries() ([]Binary, error) {
	if p := os.Getenv(EnvVarBinary); p != "" {
		b, err := binaryAt(p)
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", EnvVarBinary, err)
		}
		b.Scope = ScopeSuite
		return []Binary{b}, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	pins, err := Pinned()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, ".tools", "bin")
	var bins []Binary
	var missing []string
	for _, pin := range pins {
		p := filepath.Join(dir, "envoy-"+pin.Version)
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, pin.Version)
			continue
		}
		b, err := binaryAt(p)
		if err != nil {
			return nil, err
		}
		if b.Version != pin.Version {
			return nil, fmt.Errorf("%s says it is Envoy %s, %s pins %s there", p, b.Version, VersionsFile, pin.Version)
		}
		b.Scope = pin.Scope
		bins = append(bins, b)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("no Envoy %s in %s (pinned in %s; run scripts/install-envoy.sh, or set $%s)",
			strings.Join(missing, ", "), dir, VersionsFile, EnvVarBinary)
	}
	slices.SortStableFunc(bins, func(a, b Binary) int { return compareVersions(b.Version, a.Version) })
	return bins, nil
}

// binaryAt runs `path --version` and returns the Binary.
func binaryAt(path string) (Binary, error) {
	ctx, cancel := context.WithTimeout(context.Background(), versionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Binary{}, fmt.Errorf("%s --version: %w (output %q)", path, err, strings.TrimSpace(string(out)))
	}
	v, err := parseVersion(string(out))
	if err != nil {
		return Binary{}, fmt.Errorf("%s --version: %w", path, err)
	}
	return Binary{Path: path, Version: v}, nil
}

// versionRE matches `envoy --version` output such as
// "envoy  version: 9e55809.../1.40.0/Clean/RELEASE/BoringSSL".
var versionRE = regexp.MustCompile(`version: [0-9a-f]+/([0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.]+)?)/`)

// parseVersion extracts the release version from `envoy --version` output.
func parseVersion(out string) (string, error) {
	m := versionRE.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("no version in %q", strings.TrimSpace(out))
	}
	return m[1], nil
}

// compareVersions compares dotted numeric versions ("1.40.0" > "1.36.2"); a
// pre-release suffix ("1.41.0-dev") sorts before its release.
func compareVersions(a, b string) int {
	an, as, _ := strings.Cut(a, "-")
	bn, bs, _ := strings.Cut(b, "-")
	ap, bp := strings.Split(an, "."), strings.Split(bn, ".")
	for i := range max(len(ap), len(bp)) {
		if c := cmp.Compare(versionPart(ap, i), versionPart(bp, i)); c != 0 {
			return c
		}
	}
	switch {
	case as == bs:
		return 0
	case as == "":
		return 1
	case bs == "":
		return -1
	}
	return strings.Compare(as, bs)
}

func versionPart(parts []string, i int) int {
	if i >= len(parts) {
		return 0
	}
	n, _ := strconv.Atoi(parts[i])
	return n
}

// moduleRoot walks up from the working directory to the directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod in the working directory or any parent")
		}
		dir = parent
	}
}

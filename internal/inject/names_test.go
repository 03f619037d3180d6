package inject_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// repoRoot is the module root, from this package's directory.
const repoRoot = "../.."

// documents are the files a user reads or applies that name the shutdown-manager.io/ keys without being able
// to import them: the READMEs, SECURITY.md, docs/, the chart and deploy/.
func documents(t *testing.T) map[string]string {
	t.Helper()
	docs := map[string]string{}
	read := func(path string) {
		b, err := os.ReadFile(filepath.Join(repoRoot, path))
		if err != nil {
			t.Fatal(err)
		}
		docs[path] = string(b)
	}
	read("README.md")
	read("SECURITY.md")
	for _, dir := range []string{"charts", "deploy", "docs"} {
		err := fs.WalkDir(os.DirFS(repoRoot), dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if ext := filepath.Ext(path); !d.IsDir() && (ext == ".yaml" || ext == ".md" || ext == ".tpl" || ext == ".json") {
				read(path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return docs
}

var (
	keyRE = regexp.MustCompile(`shutdown-manager\.io/([a-z0-9-]+)`)
	// The value after the inject key, as a label (key=value), YAML (key: value) or JSON ("key":"value").
	injectValueRE = regexp.MustCompile(regexp.QuoteMeta(inject.LabelInject) + `(?:=|"?:[ \t]*)"?([A-Za-z]+)`)
)

// TestDocumentedNames: every shutdown-manager.io/ key the READMEs, docs/, the chart and deploy/ name is one the Go code
// declares (an annotation inject knows, the opt-in label, the Events' reporting controller), and every value
// they give the opt-in key is one of its declared values: a renamed key or value fails here, not in a cluster.
func TestDocumentedNames(t *testing.T) {
	known := append(slices.Clone(inject.KnownAnnotations), inject.LabelInject, events.Controller)
	values := []string{inject.InjectTrue, inject.InjectFalse, inject.InjectEnabled, inject.InjectDisabled}
	for path, text := range documents(t) {
		for _, m := range keyRE.FindAllString(text, -1) {
			if !slices.Contains(known, m) {
				t.Errorf("%s names %s, which the Go code does not declare (known: %s)", path, m, strings.Join(known, ", "))
			}
		}
		for _, m := range injectValueRE.FindAllStringSubmatch(text, -1) {
			if !slices.Contains(values, m[1]) {
				t.Errorf("%s gives %s the value %q; the declared values are %q", path, inject.LabelInject, m[1], values)
			}
		}
	}
}

// annotationPage holds the table of annotations (it was the README's).
const annotationPage = "docs/reference.md"

// TestReadmeAnnotationTable: the table of annotations in docs/reference.md has a row for each annotation inject
// knows, and no other.
func TestReadmeAnnotationTable(t *testing.T) {
	readme := documents(t)[annotationPage]
	const header = "| annotation `" + inject.Prefix + "…` |"
	start := strings.Index(readme, header)
	if start < 0 {
		t.Fatalf("%s has no table whose header starts with %q", annotationPage, header)
	}
	var got []string
	for i, line := range strings.Split(readme[start:], "\n") {
		if i < 2 {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		first := strings.Split(line, "|")[1]
		for _, name := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(first, -1) {
			got = append(got, inject.Prefix+name[1])
		}
	}
	want := slices.Sorted(slices.Values(inject.KnownAnnotations))
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s's annotation table names %q\nwant (inject's known annotations) %q", annotationPage, got, want)
	}
}

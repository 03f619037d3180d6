package testbed

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestPinsNamedElsewhere: VersionsFile is the one list of the Envoy releases under test; the places that cannot
// read it name only what it pins. The Envoy image of deploy/ (and of the README's and docs/ pages' commands for it)
// is the newest release, the one the demo, the bench and the e2e image run; the "Envoy versions" section of
// docs/compatibility.md names every pinned release, in the file's order, and no other.
// compatibilityPage holds the "Envoy versions" section.
const compatibilityPage = "docs/compatibility.md"

func TestPinsNamedElsewhere(t *testing.T) {
	pins, err := Pinned()
	if err != nil {
		t.Fatal(err)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// Every Envoy image reference in deploy/, the README and docs/ is the newest pinned release.
	imageRE := regexp.MustCompile(`envoyproxy/envoy:v([0-9][0-9.]*[0-9])`)
	newest := pins[0].Version
	files := []string{"README.md", "SECURITY.md"}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("docs/*.md: %v (%d pages)", err, len(pages))
	}
	for _, p := range pages {
		files = append(files, filepath.Join("docs", filepath.Base(p)))
	}
	err = fs.WalkDir(os.DirFS(root), "deploy", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".yaml") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range files {
		for _, m := range imageRE.FindAllStringSubmatch(read(f), -1) {
			found++
			if m[1] != newest {
				t.Errorf("%s names %s; %s pins %s as the newest release", f, m[0], VersionsFile, newest)
			}
		}
	}
	if !strings.Contains(read("deploy/plain/envoy.yaml"), "envoyproxy/envoy:v"+newest) {
		t.Errorf("deploy/plain/envoy.yaml does not run envoyproxy/envoy:v%s, the newest release %s pins (%d image references checked)", newest, VersionsFile, found)
	}

	// The compatibility page's section lists the pins in bold.
	readme := read(compatibilityPage)
	start := strings.Index(readme, "\n## Envoy versions\n")
	if start < 0 {
		t.Fatal(compatibilityPage + ` has no "## Envoy versions" section`)
	}
	section := readme[start+1:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	var named []string
	for _, m := range regexp.MustCompile(`\*\*([0-9]+\.[0-9]+\.[0-9]+)\*\*`).FindAllStringSubmatch(section, -1) {
		named = append(named, m[1])
	}
	var want []string
	for _, p := range pins {
		want = append(want, p.Version)
	}
	if !slices.Equal(named, want) {
		t.Errorf("%s's Envoy versions section names %q; %s pins %q", compatibilityPage, named, VersionsFile, want)
	}
}

package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// userPages are the pages a user reads: the README, SECURITY.md and every page of docs/, as paths from the
// repository's root.
func userPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md", "SECURITY.md"}
	docs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("docs/*.md: %v (%d pages)", err, len(docs))
	}
	for _, d := range docs {
		pages = append(pages, filepath.ToSlash(strings.TrimPrefix(d, filepath.Join("..", "..")+string(filepath.Separator))))
	}
	return pages
}

// deployFiles are the lines of every YAML file a test applies, renders or runs: under deploy/ (applied to real
// API servers and kubelets), docs/examples/ (the HAProxy and Loki configurations the e2e and TestObservabilityPage
// read, the cloud load balancers' examples TestCloudExamples checks) and test/chart/testdata/values/ (the value
// sets test/chart renders).
func deployFiles(t *testing.T) [][]string {
	t.Helper()
	var files [][]string
	for _, dir := range []string{"deploy", "docs/examples", "test/chart/testdata/values"} {
		err := filepath.WalkDir(filepath.Join("..", "..", dir), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".yaml") {
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				files = append(files, strings.Split(string(data), "\n"))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// pagesButMigration are userPages without the migration pages, whose commands and blocks TestMigrationPages
// checks against the peers' files.
func pagesButMigration(t *testing.T) []string {
	t.Helper()
	return slices.DeleteFunc(userPages(t), func(page string) bool {
		return slices.ContainsFunc(migrationPages, func(p migrationPage) bool { return p.page == page })
	})
}

// TestReadmeYAMLIsFromDeploy: every ```yaml block of the README, SECURITY.md and the docs/ pages (but the
// migration pages) is a run of consecutive lines of a tested file (deployFiles: deploy/, docs/examples/, the
// chart's test values; shifted left as a whole: an excerpt from deep inside a manifest may start at the margin),
// so no page can drift from manifests that are tested.
func TestReadmeYAMLIsFromDeploy(t *testing.T) {
	files := deployFiles(t)
	checked := 0
	for _, page := range pagesButMigration(t) {
		for _, b := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(readRepo(t, page), -1) {
			checked++
			if !isExcerpt(b[1], files) {
				t.Errorf("%s: yaml block is not a run of lines of any file under deploy/, docs/examples/ or test/chart/testdata/values/:\n%s", page, b[1])
			}
		}
	}
	if checked == 0 {
		t.Fatal("no page has a yaml block: this test checks nothing")
	}
}

// TestMeasurementRecord: docs/envoy-drain-behaviour.md says at its top that it is a measurement record, and
// points nowhere outside the repository (no URL, no path of the machine it was measured on); its relative links
// resolve.
func TestMeasurementRecord(t *testing.T) {
	const page = "docs/envoy-drain-behaviour.md"
	text := readRepo(t, page)
	if !strings.Contains(strings.SplitN(text, "\n## ", 2)[0], "**Measurement record.**") {
		t.Errorf("%s does not open with its label, **Measurement record.**", page)
	}
	if m := regexp.MustCompile(`https?://|/tmp/|~/`).FindString(text); m != "" {
		t.Errorf("%s points outside the repository (%q)", page, m)
	}
}

// TestLinks: every relative link of the README, SECURITY.md and docs/ names a file or directory of the
// repository, and a #fragment a heading of the page it names.
func TestLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range userPages(t) {
		text := readRepo(t, page)
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), file)))
				if _, err := os.Stat(filepath.Join("..", "..", path)); err != nil {
					t.Errorf("%s: link %s: %s does not exist", page, target, path)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !slices.Contains(anchors(readRepo(t, path)), frag) {
				t.Errorf("%s: link %s: %s has no heading #%s", page, target, path, frag)
			}
		}
	}
}

// anchors are the fragments GitHub gives a page's headings: lower case, punctuation but - and _ dropped,
// spaces as -.
func anchors(page string) []string {
	var out []string
	fence := false
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(l, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

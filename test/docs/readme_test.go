package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
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

// deployFiles are the lines of every file under deploy/.
func deployFiles(t *testing.T) [][]string {
	t.Helper()
	var files [][]string
	err := filepath.WalkDir(filepath.Join("..", "..", "deploy"), func(path string, d os.DirEntry, err error) error {
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
	return files
}

// TestReadmeYAMLIsFromDeploy: every ```yaml block of the README, SECURITY.md and the docs/ pages (but the
// migration pages, whose blocks TestMigrationPages checks against the peers' files) is a run of consecutive lines
// of a file under deploy/ (shifted left as a whole: an excerpt from deep inside a manifest may start at the
// margin), so no page can drift from manifests that are tested.
func TestReadmeYAMLIsFromDeploy(t *testing.T) {
	files := deployFiles(t)
	migration := []string{}
	for _, p := range migrationPages {
		migration = append(migration, p.page)
	}
	checked := 0
	for _, page := range userPages(t) {
		if slices.Contains(migration, page) {
			continue
		}
		for _, b := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(readRepo(t, page), -1) {
			checked++
			if !isExcerpt(b[1], files) {
				t.Errorf("%s: yaml block is not a run of lines of any file under deploy/:\n%s", page, b[1])
			}
		}
	}
	if checked == 0 {
		t.Fatal("no page has a yaml block: this test checks nothing")
	}
}

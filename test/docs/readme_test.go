package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeYAMLIsFromDeploy: every ```yaml block of the README is a run of consecutive lines of a file
// under deploy/ (shifted left as a whole: an excerpt from deep inside a manifest may start at the margin),
// so the README cannot drift from manifests that are tested.
func TestReadmeYAMLIsFromDeploy(t *testing.T) {
	readme := readRepo(t, "README.md")
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
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("the README has no yaml block: this test checks nothing")
	}
	for _, b := range blocks {
		if !isExcerpt(b[1], files) {
			t.Errorf("README yaml block is not a run of lines of any file under deploy/:\n%s", b[1])
		}
	}
}

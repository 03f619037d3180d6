package docs

// Checks of the release's documents (issue 21 item 6): CHANGELOG.md's form, deprecations that name the release
// removing them, and docs/release.md's commands being the ones test/release runs.

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
)

// changelogVersions are the released versions CHANGELOG.md has sections for, newest first, after checking that
// every section heading is `## [Unreleased]` (first, at most once) or `## [X.Y.Z] - YYYY-MM-DD`.
func changelogVersions(t *testing.T) []string {
	t.Helper()
	heading := regexp.MustCompile(`^## \[(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)\] - \d{4}-\d{2}-\d{2}$`)
	var versions []string
	for i, line := range strings.Split(readRepo(t, "CHANGELOG.md"), "\n") {
		if !strings.HasPrefix(line, "## ") {
			continue
		}
		if line == "## [Unreleased]" {
			if i > 0 && len(versions) > 0 {
				t.Errorf("CHANGELOG.md:%d: [Unreleased] comes after a release: it is the first section", i+1)
			}
			continue
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("CHANGELOG.md:%d: %q is neither ## [Unreleased] nor ## [X.Y.Z] - YYYY-MM-DD", i+1, line)
			continue
		}
		if n := len(versions); n > 0 && !semverLess(m[1], versions[n-1]) {
			t.Errorf("CHANGELOG.md:%d: %s follows %s: newest first", i+1, m[1], versions[n-1])
		}
		versions = append(versions, m[1])
	}
	return versions
}

// semverLess compares MAJOR.MINOR.PATCH; a pre-release sorts before its release.
func semverLess(a, b string) bool {
	core := func(v string) ([3]int, bool) {
		v = strings.TrimPrefix(v, "v")
		pre := strings.Contains(v, "-")
		v, _, _ = strings.Cut(v, "-")
		var n [3]int
		for i, p := range strings.SplitN(v, ".", 3) {
			n[i], _ = strconv.Atoi(p)
		}
		return n, pre
	}
	x, xpre := core(a)
	y, ypre := core(b)
	for i := range x {
		if x[i] != y[i] {
			return x[i] < y[i]
		}
	}
	return xpre && !ypre
}

func TestSemverLess(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"0.1.0", "0.2.0", true}, {"0.2.0", "0.1.0", false}, {"0.10.0", "0.9.0", false}, {"v0.2.0-rc.1", "v0.2.0", true},
		{"0.2.0", "0.2.0", false}, {"1.0.0", "0.99.99", false},
	} {
		if got := semverLess(c.a, c.b); got != c.want {
			t.Errorf("semverLess(%s, %s) = %v", c.a, c.b, got)
		}
	}
}

func TestChangelog(t *testing.T) {
	cl := readRepo(t, "CHANGELOG.md")
	if !strings.HasPrefix(cl, "# Changelog\n") {
		t.Error("CHANGELOG.md does not start with # Changelog")
	}
	changelogVersions(t)
}

// TestDeprecationsNameARelease: the deprecated metric says which release removes it, everywhere it is
// documented, and no page or help text says "the next release"; once the CHANGELOG has that release, the alias
// must be gone (and this test with its constant).
func TestDeprecationsNameARelease(t *testing.T) {
	removedIn := drain.DeprecatedInFlightRemovedIn
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(removedIn) {
		t.Fatalf("drain.DeprecatedInFlightRemovedIn = %q, not a release vX.Y.Z", removedIn)
	}
	for _, v := range changelogVersions(t) {
		if !semverLess(v, removedIn) {
			t.Errorf("CHANGELOG.md has release %s, but shutdown_manager_open_connections, removed in %s, is still exported", v, removedIn)
		}
	}
	pages := []string{"README.md", "CHANGELOG.md", "charts/shutdown-manager/README.md"}
	docs, _ := filepath.Glob("../../docs/*.md")
	for _, d := range docs {
		pages = append(pages, strings.TrimPrefix(d, "../../"))
	}
	mentions := 0
	for _, p := range pages {
		for i, line := range strings.Split(readRepo(t, p), "\n") {
			if strings.Contains(line, "shutdown_manager_open_connections") && strings.Contains(strings.ToLower(line), "remove") {
				mentions++
				if !strings.Contains(line, removedIn) {
					t.Errorf("%s:%d speaks of removing shutdown_manager_open_connections without naming %s: %s", p, i+1, removedIn, strings.TrimSpace(line))
				}
			}
		}
	}
	if mentions == 0 {
		t.Error("no page says when shutdown_manager_open_connections is removed")
	}
	// No "next release" left in the code's texts or the docs: a release is named.
	roots := []string{"internal", "cmd", "charts", "docs"}
	for _, root := range roots {
		err := filepath.WalkDir(filepath.Join("..", "..", root), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(path, "_test.go") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if i := strings.Index(strings.ToLower(string(data)), "next release"); i >= 0 {
				t.Errorf("%s says %q: name the release", strings.TrimPrefix(path, "../../"), "next release")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(strings.ToLower(readRepo(t, "README.md")), "next release") {
		t.Error(`README.md says "next release": name the release`)
	}
}

// TestReleasePageCommands: the commands docs/release.md gives a team are the ones test/release runs (with a
// registry of its own and a test version in place of registry.example.com and v0.1.0), and the files it lists are
// the ones scripts/release.sh writes.
func TestReleasePageCommands(t *testing.T) {
	page := readRepo(t, "docs/release.md")
	test := readRepo(t, "test/release/release_test.go")
	script := readRepo(t, "scripts/release.sh")
	for _, c := range []struct{ doc, tested string }{
		{"make image-push IMAGE=registry.example.com/platform/shutdown-manager:v0.1.0 LAYOUT=dist/image-oci", `"make", "--no-print-directory", "image-push", "IMAGE="+ref, "LAYOUT="`}, // under make test, make is a sub-make: no directory lines in the output the test reads
		{"helm push dist/shutdown-manager-0.1.0.tgz oci://registry.example.com/platform/charts", `helm, "push", pkg, "oci://"+host+"/platform/charts"`},
		{"sha256sum -c SHA256SUMS", ""},
		{"make release", ""},
	} {
		if !strings.Contains(page, c.doc) {
			t.Errorf("docs/release.md lacks the command %q", c.doc)
		}
		if c.tested != "" && !strings.Contains(test, c.tested) {
			t.Errorf("test/release no longer runs %q (docs/release.md's %q)", c.tested, c.doc)
		}
	}
	if !strings.Contains(script, "sha256sum --quiet -c SHA256SUMS") {
		t.Error("scripts/release.sh no longer checks SHA256SUMS with sha256sum -c")
	}
	for _, f := range []string{
		"shutdown-manager-linux-amd64", "shutdown-manager-linux-arm64", "image-oci/", "image-linux-amd64.tar",
		"image-linux-arm64.tar", "shutdown-manager-0.1.0.tgz", "shutdown-manager-v0.1.0.spdx.json", "SHA256SUMS",
	} {
		if !strings.Contains(page, "`"+f+"`") {
			t.Errorf("docs/release.md's table does not list %s", f)
		}
	}
}

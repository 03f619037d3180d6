// Package docs checks that docs/ARCHITECTURE.md matches the code.
package docs

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/envoy-shutdown-manager/shutdown-manager/"

// row is one line of the page's package table.
type row struct {
	layer   int
	imports []string
}

// packageTable reads the table "| package | layer | imports (internal) |" of docs/ARCHITECTURE.md.
func packageTable(t *testing.T, page string) map[string]row {
	t.Helper()
	rows := map[string]row{}
	in := false
	sc := bufio.NewScanner(strings.NewReader(page))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "| package | layer |"):
			in = true
			continue
		case !in:
			continue
		case !strings.HasPrefix(line, "|"):
			return rows
		case strings.HasPrefix(line, "|---"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("table row %q: want 3 cells", line)
		}
		layer, err := strconv.Atoi(strings.TrimSpace(cells[1]))
		if err != nil {
			t.Fatalf("table row %q: layer: %v", line, err)
		}
		imports := strings.Fields(cells[2])
		slices.Sort(imports)
		rows[strings.TrimSpace(cells[0])] = row{layer, imports}
	}
	return rows
}

// short names a package of this module as the page does: internal/x as x, others by their path.
func short(importPath string) string {
	p := strings.TrimPrefix(importPath, module)
	return strings.TrimPrefix(p, "internal/")
}

// TestArchitecturePage: the page's package table is the two binaries' import graph — every package they
// are built from, with exactly its imports of this module — and every import points to a lower layer.
func TestArchitecturePage(t *testing.T) {
	data, err := os.ReadFile("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := packageTable(t, string(data))
	if len(rows) == 0 {
		t.Fatal("docs/ARCHITECTURE.md has no package table")
	}
	out, err := exec.Command("go", "list", "-deps", "-json", "../../cmd/shutdown-manager", "../../cmd/shutdown-manager-pod").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := map[string]bool{}
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(p.ImportPath, module) {
			continue
		}
		name := short(p.ImportPath)
		seen[name] = true
		var imports []string
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module) {
				imports = append(imports, short(imp))
			}
		}
		slices.Sort(imports)
		r, ok := rows[name]
		if !ok {
			t.Errorf("package %s is in the binary but not in the table", name)
			continue
		}
		if !slices.Equal(r.imports, imports) {
			t.Errorf("package %s: the table says it imports %v, it imports %v", name, r.imports, imports)
		}
		for _, imp := range imports {
			if below, ok := rows[imp]; ok && below.layer >= r.layer {
				t.Errorf("package %s (layer %d) imports %s (layer %d): an import must point down", name, r.layer, imp, below.layer)
			}
		}
	}
	for name := range rows {
		if !seen[name] {
			t.Errorf("the table names %s, which the binary is not built from", name)
		}
	}
}

// TestArchitecturePaths: every file the page names exists (a bare name: in some internal package).
func TestArchitecturePaths(t *testing.T) {
	data, err := os.ReadFile("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	files := regexp.MustCompile("[a-z0-9_/-]+\\.go\\b").FindAllString(string(data), -1)
	if len(files) == 0 {
		t.Fatal("the page names no file")
	}
	for _, f := range files {
		// A path is from the repository's root or internal/; a bare name is a file of some internal package.
		candidates := []string{filepath.Join("../..", f), filepath.Join("../../internal", f)}
		if !strings.Contains(f, "/") {
			candidates, _ = filepath.Glob(filepath.Join("../../internal/*", f))
		}
		found := false
		for _, c := range candidates {
			if _, err := os.Stat(c); err == nil {
				found = true
			}
		}
		if !found {
			t.Errorf("docs/ARCHITECTURE.md names %s, which does not exist", f)
		}
	}
}

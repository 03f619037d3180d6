package kubecli

import (
	"context"
	"flag"
	"fmt"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// referencePage holds the generated reference: every flag of every command and every annotation.
const referencePage = "../../docs/reference.md"

// flagSets are the flag sets the commands parse, in the command table's order, as each prints its help.
func flagSets(t *testing.T) []*flag.FlagSet {
	t.Helper()
	var sets []*flag.FlagSet
	cli.HelpFlags = func(fs *flag.FlagSet) { sets = append(sets, fs) }
	defer func() { cli.HelpFlags = nil }()
	help := func(name string, run func(context.Context, []string, io.Reader, io.Writer, io.Writer) error) {
		n := len(sets)
		if err := run(context.Background(), []string{"--help"}, strings.NewReader(""), io.Discard, io.Discard); err != flag.ErrHelp {
			t.Fatalf("%s --help: %v, want flag.ErrHelp", name, err)
		}
		if len(sets) != n+1 || sets[n].Name() != name {
			t.Fatalf("%s --help printed the help of %d flag sets, want its own", name, len(sets)-n)
		}
	}
	for _, c := range Commands() {
		if c.Name == "kubectl" { // the plugin: its commands' flag sets, each under its own name
			for _, k := range kubectlCommands() {
				help(c.Name+" "+k.Name, k.Run)
			}
			continue
		}
		help(c.Name, c.Run)
	}
	return sets
}

func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

// flagsReference is the Markdown of every command's flags: name, type, default, and the help's text.
func flagsReference(sets []*flag.FlagSet) string {
	var b strings.Builder
	for _, fs := range sets {
		fmt.Fprintf(&b, "\n### `%s`\n\n", fs.Name())
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n == 0 {
			b.WriteString("No flags.\n")
			continue
		}
		b.WriteString("| flag | type | default | meaning |\n|---|---|---|---|\n")
		fs.VisitAll(func(f *flag.Flag) {
			kind, usage := flag.UnquoteUsage(f)
			if kind == "" {
				kind = "bool"
			}
			def := ""
			if f.DefValue != "" && f.DefValue != "[]" {
				def = "`" + f.DefValue + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", cli.Dashed(f.Name), kind, def, cell(usage))
		})
	}
	return b.String()
}

// annotationConsts reads internal/inject/config.go: the line comment of each Annotation constant, by the
// annotation's key. The annotations inject accepts, in its order, are inject.Annotations() (its own, then one per
// row of inject.DrainSettings, which have no constant: their flags' help says what they take).
func annotationConsts(t *testing.T) (known []string, comment map[string]string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../inject/config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	comment = map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range g.Specs {
			vs, ok := s.(*ast.ValueSpec)
			if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 {
				continue
			}
			name := vs.Names[0].Name
			switch v := vs.Values[0].(type) {
			case *ast.BinaryExpr: // Prefix + "mode"
				if lit, ok := v.Y.(*ast.BasicLit); ok && strings.HasPrefix(name, "Annotation") {
					key, _ := strconv.Unquote(lit.Value)
					if vs.Comment != nil {
						comment[key] = strings.TrimSpace(vs.Comment.Text())
					} else if vs.Doc != nil {
						comment[key] = strings.TrimSpace(strings.TrimPrefix(vs.Doc.Text(), name+" "))
					}
				}
			}
		}
	}
	for _, a := range inject.Annotations() {
		known = append(known, strings.TrimPrefix(a, inject.Prefix))
	}
	return known, comment
}

// annotationsReference is the Markdown table of the annotations inject accepts: the flag of inject of the same
// name, and what it takes (the constant's comment, else that flag's help, with drain's help where inject passes
// the value to the drain).
func annotationsReference(t *testing.T, sets []*flag.FlagSet) string {
	known, comment := annotationConsts(t)
	var injectFS, drainFS *flag.FlagSet
	for _, fs := range sets {
		switch fs.Name() {
		case "inject":
			injectFS = fs
		case "drain":
			drainFS = fs
		}
	}
	var b strings.Builder
	b.WriteString("\n| annotation `shutdown-manager.io/…` | flag of `inject` | takes |\n|---|---|---|\n")
	for _, name := range known {
		flagCell, takes := "", comment[name]
		if f := injectFS.Lookup(name); f != nil {
			flagCell = "`" + cli.Dashed(name) + "`"
			if takes == "" {
				_, takes = flag.UnquoteUsage(f)
				if d := drainFS.Lookup(name); d != nil && strings.HasPrefix(takes, "passed to the drain") {
					_, du := flag.UnquoteUsage(d)
					takes += ": " + du
				}
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name, flagCell, cell(takes))
	}
	return b.String()
}

// replaceBetween replaces what lies between the line begin and the line end of page.
func replaceBetween(t *testing.T, page, begin, end, with string) string {
	t.Helper()
	i, j := strings.Index(page, begin+"\n"), strings.Index(page, "\n"+end)
	if i < 0 || j < i {
		t.Fatalf("%s has no lines %q ... %q", referencePage, begin, end)
	}
	return page[:i+len(begin)+1] + strings.TrimPrefix(with, "\n") + page[j:]
}

// TestReference: docs/reference.md's flag tables and annotation table are the ones generated from the flag
// sets the commands parse and from internal/inject's annotation constants; a flag or annotation added, removed
// or reworded without the page fails here. `go test ./internal/kubecli -run TestReference -update` rewrites them.
func TestReference(t *testing.T) {
	sets := flagSets(t)
	data, err := os.ReadFile(referencePage)
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	want := replaceBetween(t, page, "<!-- BEGIN generated flags: go test ./internal/kubecli -run TestReference -update -->", "<!-- END generated flags -->", flagsReference(sets))
	want = replaceBetween(t, want, "<!-- BEGIN generated annotations: go test ./internal/kubecli -run TestReference -update -->", "<!-- END generated annotations -->", annotationsReference(t, sets))
	if want == page {
		return
	}
	if *update {
		if err := os.WriteFile(referencePage, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is not what the code generates: run go test ./internal/kubecli -run TestReference -update and review the diff", filepath.Base(referencePage))
}

// TestReferenceExplained: every flag the hand-written tables of docs/reference.md explain (the drain's flags and
// the API's) is a flag of serve, drain, run or status, with the default one of them has.
func TestReferenceExplained(t *testing.T) {
	sets := flagSets(t)
	data, err := os.ReadFile(referencePage)
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	i, j := strings.Index(page, "\n## Drain flags explained"), strings.Index(page, "\n## Settings per pod")
	if i < 0 || j < i {
		t.Fatalf("%s: no section Drain flags explained before Settings per pod", referencePage)
	}
	row := regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| ([^|]*) \\|")
	rows := row.FindAllStringSubmatch(page[i:j], -1)
	if len(rows) < 10 {
		t.Fatalf("%d rows explained: this test checks too little", len(rows))
	}
	for _, r := range rows {
		name, def := r[1], strings.TrimSpace(r[2])
		var defaults []string
		for _, fs := range sets {
			switch fs.Name() {
			case "serve", "drain", "run", "status":
				if f := fs.Lookup(name); f != nil {
					defaults = append(defaults, f.DefValue)
				}
			}
		}
		if len(defaults) == 0 {
			t.Errorf("%s explains --%s, which serve, drain, run and status do not have", referencePage, name)
			continue
		}
		m := regexp.MustCompile("^`([^`]*)`").FindStringSubmatch(def)
		if m == nil {
			continue // none, or words
		}
		ok := false
		for _, d := range defaults {
			a, errA := time.ParseDuration(m[1])
			b, errB := time.ParseDuration(d)
			ok = ok || d == m[1] || (m[1] == "0" && d == "0s") || (errA == nil && errB == nil && a == b)
		}
		if !ok {
			t.Errorf("%s gives --%s the default %s; the commands' defaults are %q", referencePage, name, m[1], defaults)
		}
	}
}

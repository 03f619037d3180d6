package docs

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated log reference of docs/observability.md")

// logPackages log what a drain and the webhook do; their log lines have constant messages (STYLE.md 12).
var logPackages = []string{"internal/drain", "internal/manager", "internal/server", "internal/events", "internal/supervisor", "internal/webhook"}

// logRows are one Markdown row per log line the packages write: level, message, the keys of its attributes,
// and the package. Found in the source: a call of a method Debug, Info, Warn or Error whose first argument
// is a string literal; its keys are the string literals in key position and the keys of slog.X("key", …).
func logRows(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	var rows []string
	for _, dir := range logPackages {
		files, err := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				// log.Info("msg", …); log.Log(ctx, level, "msg", …); level("msg", …), where level is one of a
				// logger's methods chosen by the outcome.
				level, args := "", call.Args
				switch fun := call.Fun.(type) {
				case *ast.SelectorExpr:
					switch name := fun.Sel.Name; {
					case slices.Contains([]string{"Debug", "Info", "Warn", "Error"}, name):
						level = strings.ToUpper(name)
					case name == "Log" && len(args) > 2:
						level, args = "varies", args[2:]
					}
				case *ast.Ident:
					if fun.Name == "level" {
						level = "varies"
					}
				}
				if level == "" {
					return true
				}
				msg, ok := stringLit(args[0])
				if !ok {
					return true
				}
				var keys []string
				var attrs []ast.Expr
				for _, a := range args[1:] {
					if c, ok := a.(*ast.CallExpr); ok && fmt.Sprint(c.Fun) == "append" && len(c.Args) > 1 {
						attrs = append(attrs, c.Args[1:]...) // append(by.Attrs(), "key", value)...
						continue
					}
					attrs = append(attrs, a)
				}
				for i := 0; i < len(attrs); i++ {
					a := attrs[i]
					if c, ok := a.(*ast.CallExpr); ok {
						if s, ok := c.Fun.(*ast.SelectorExpr); ok && fmt.Sprint(s.X) == "slog" && len(c.Args) > 0 {
							if k, ok := stringLit(c.Args[0]); ok {
								keys = append(keys, "`"+k+"`")
							}
						}
						continue
					}
					if k, ok := stringLit(a); ok {
						keys = append(keys, "`"+k+"`")
						i++ // its value
					}
				}
				row := fmt.Sprintf("| %s | `%s` | %s | %s |", level, msg, strings.Join(keys, ", "), strings.TrimPrefix(dir, "internal/"))
				if !seen[row] {
					seen[row] = true
					rows = append(rows, row)
				}
				return true
			})
		}
	}
	slices.SortFunc(rows, func(a, b string) int {
		pa, pb := strings.Split(a, " | "), strings.Split(b, " | ")
		if c := strings.Compare(pa[len(pa)-1]+pa[1]+pa[0], pb[len(pb)-1]+pb[1]+pb[0]); c != 0 {
			return c
		}
		return strings.Compare(a, b) // one message with other attributes: a total order, whatever the source's
	})
	return rows
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return strings.ReplaceAll(s, "|", `\|`), err == nil
}

// TestLogReference: the log reference of docs/observability.md lists every log line the drain side and the
// webhook write, with their attributes' keys, as the source has them; a message or key changed without the
// page fails here. `go test ./test/docs -run TestLogReference -update` rewrites it.
func TestLogReference(t *testing.T) {
	const page = "docs/observability.md"
	const begin, end = "<!-- BEGIN generated logs: go test ./test/docs -run TestLogReference -update -->", "<!-- END generated logs -->"
	text := readRepo(t, page)
	i, j := strings.Index(text, begin+"\n"), strings.Index(text, "\n"+end)
	if i < 0 || j < i {
		t.Fatalf("%s has no lines %q ... %q", page, begin, end)
	}
	rows := logRows(t)
	if len(rows) < 20 {
		t.Fatalf("%d log lines found: this test checks too little", len(rows))
	}
	table := "| level | message | keys | package |\n|---|---|---|---|\n" + strings.Join(rows, "\n") + "\n"
	want := text[:i+len(begin)+1] + table + text[j:]
	if want == text {
		return
	}
	if *update {
		if err := os.WriteFile(filepath.Join("..", "..", page), []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the log reference of %s is not what the code logs: run go test ./test/docs -run TestLogReference -update and review the diff", page)
}

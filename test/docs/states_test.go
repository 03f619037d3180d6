package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/server"
)

// statesPage holds the generated tables of the drain's phases, outcomes and causes.
const statesPage = "docs/reference.md"

// constant is one constant of a string type of internal/drain: its value and the comment that says what it means.
type constant struct{ name, value, meaning string }

// drainConstants are the constants of internal/drain whose type is typeName, by value, read from the source
// with their comments (the one after the constant on its line, or the one above it).
func drainConstants(t *testing.T, typeName string) map[string]constant {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "internal", "drain", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]constant{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typeName || len(vs.Names) != 1 || len(vs.Values) != 1 {
					continue
				}
				value, ok := stringLit(vs.Values[0])
				if !ok {
					t.Fatalf("%s: constant %s of type %s is not a string literal", path, vs.Names[0].Name, typeName)
				}
				var meaning []string
				for _, c := range []*ast.CommentGroup{vs.Doc, vs.Comment} {
					if text := strings.Join(strings.Fields(c.Text()), " "); text != "" {
						meaning = append(meaning, text)
					}
				}
				out[value] = constant{name: vs.Names[0].Name, value: value, meaning: strings.Join(meaning, " ")}
			}
		}
	}
	return out
}

// enumeration is the table of one of drain.Phases, drain.Outcomes, drain.Causes: a row per value, in the
// enumeration's order, with the meaning its constant's comment gives. A value without a constant, or whose
// constant has no comment, and a constant of the type the enumeration leaves out, fail t.
func enumeration[T ~string](t *testing.T, list string, values []T, extra func(T) string, header string) string {
	t.Helper()
	var typ T
	typeName := reflect.TypeOf(typ).Name()
	consts := drainConstants(t, typeName)
	if len(values) == 0 || len(consts) == 0 {
		t.Fatalf("drain.%s or its constants of type %s are empty: this test checks nothing", list, typeName)
	}
	var b strings.Builder
	b.WriteString(header + "\n")
	listed := map[string]bool{}
	for _, v := range values {
		c, ok := consts[string(v)]
		switch {
		case !ok:
			t.Errorf("drain.%s has %q, which no constant of type %s is", list, v, typeName)
		case c.meaning == "":
			t.Errorf("drain.%s (%q) has no comment saying what it means: write one after it, it is the reference's", c.name, v)
		}
		if listed[string(v)] {
			t.Errorf("drain.%s has %q twice", list, v)
		}
		listed[string(v)] = true
		row := fmt.Sprintf("| `%s` | %s |", v, strings.ReplaceAll(c.meaning, "|", `\|`))
		if extra != nil {
			row = fmt.Sprintf("| `%s` | %s | %s |", v, extra(v), strings.ReplaceAll(c.meaning, "|", `\|`))
		}
		b.WriteString(row + "\n")
	}
	for value, c := range consts {
		if !listed[value] {
			t.Errorf("drain.%s (%q) is not in drain.%s: the metrics, /status and the reference would not know it", c.name, value, list)
		}
	}
	return b.String()
}

// statesReference is the generated text of the reference's section on the drain's states, outcomes and causes.
func statesReference(t *testing.T) string {
	t.Helper()
	success := func(o drain.Outcome) string {
		if (drain.Result{Outcome: o}).OK() {
			return "yes"
		}
		return "no"
	}
	var b strings.Builder
	b.WriteString("`state` of `/status`, and the `phase` label of `shutdown_manager_drain_phase` and `shutdown_manager_drain_phase_ends_total`,\n" +
		"in the order a drain goes through them:\n\n")
	b.WriteString(enumeration(t, "Phases", drain.Phases, nil, "| state | meaning |\n|---|---|"))
	b.WriteString("\n`outcome` of `/status`, the first word of `/shutdown`'s answer and its `" + server.OutcomeHeader + "` header, `outcome` of the\n" +
		"`drain finished` log line, and the `outcome` label of `shutdown_manager_drains_total`. A success ends `drain` with\n" +
		"exit 0 and answers `/shutdown` with 200; any other outcome is a non-zero exit and a 503:\n\n")
	b.WriteString(enumeration(t, "Outcomes", drain.Outcomes, success, "| outcome | success | meaning |\n|---|---|---|"))
	b.WriteString("\n`cause` of each of `/status`'s `phases` (why that phase ended; its `reason` says it in words), of the\n" +
		"`drain phase ended` log line, and the `cause` label of `shutdown_manager_drain_phase_ends_total`:\n\n")
	b.WriteString(enumeration(t, "Causes", drain.Causes, nil, "| cause | meaning |\n|---|---|"))
	return b.String()
}

// TestDrainStates: the reference's tables of the drain's states (phases), outcomes and causes are generated from
// drain.Phases, drain.Outcomes and drain.Causes and the comments on their constants; a value added, removed,
// renamed or re-described without the page fails here, and so does a constant without a comment.
// `go test ./test/docs -run TestDrainStates -update` rewrites them.
func TestDrainStates(t *testing.T) {
	const begin, end = "<!-- BEGIN generated drain states: go test ./test/docs -run TestDrainStates -update -->", "<!-- END generated drain states -->"
	text := readRepo(t, statesPage)
	i, j := strings.Index(text, begin+"\n"), strings.Index(text, "\n"+end)
	if i < 0 || j < i {
		t.Fatalf("%s has no lines %q ... %q", statesPage, begin, end)
	}
	want := text[:i+len(begin)+1] + statesReference(t) + text[j:]
	if t.Failed() || want == text {
		return
	}
	if *update {
		if err := os.WriteFile(filepath.Join("..", "..", statesPage), []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the drain states of %s are not the code's: run go test ./test/docs -run TestDrainStates -update and review the diff", statesPage)
}

// TestStatusFields: the reference's row of GET /status names every field /status encodes.
func TestStatusFields(t *testing.T) {
	row := ""
	for _, l := range strings.Split(readRepo(t, statesPage), "\n") {
		if strings.HasPrefix(l, "| `GET /status` |") {
			row = l
		}
	}
	if row == "" {
		t.Fatalf("%s has no row | `GET /status` |", statesPage)
	}
	typ := reflect.TypeOf(drain.Status{})
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" && !strings.Contains(row, "`"+name+"`") {
			t.Errorf("the /status row of %s does not name its field %s (drain.Status.%s)", statesPage, name, typ.Field(i).Name)
		}
	}
}

// enumerations are the values of each of the drain's enumerations, by name.
func enumerations() map[string][]string {
	out := map[string][]string{}
	for _, p := range drain.Phases {
		out["phases"] = append(out["phases"], string(p))
	}
	for _, o := range drain.Outcomes {
		out["outcomes"] = append(out["outcomes"], string(o))
	}
	for _, c := range drain.Causes {
		out["causes"] = append(out["causes"], string(c))
	}
	return out
}

// TestNoPartialLists: a list of three or more of the drain's phases, outcomes or causes written anywhere a
// user reads (the pages, the chart's dashboard, the metrics' help) names all of them, in the code's order: a
// value added to the code cannot be missing from a list written by hand. Lists are backquoted words or plain
// words, separated by commas, "or" and "and".
func TestNoPartialLists(t *testing.T) {
	files := userPages(t)
	dashboards, err := filepath.Glob(filepath.Join("..", "..", "charts", "*", "dashboards", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dashboards {
		files = append(files, filepath.ToSlash(strings.TrimPrefix(d, filepath.Join("..", "..")+string(filepath.Separator))))
	}
	files = append(files, "internal/drain/metrics.go")
	lists := []*regexp.Regexp{
		regexp.MustCompile("`[a-z_]+`(?:,?\\s+(?:or|and)\\s+`[a-z_]+`|,\\s+`[a-z_]+`)+"),
		regexp.MustCompile(`\b[a-z_]+(?:,?\s+(?:or|and)\s+[a-z_]+\b|,\s+[a-z_]+\b)+`),
	}
	word := regexp.MustCompile(`[a-z_]+`)
	enums := enumerations()
	checked := 0
	for _, file := range files {
		text := readRepo(t, file)
		for _, re := range lists {
			for _, m := range re.FindAllString(text, -1) {
				var items []string
				for _, w := range word.FindAllString(m, -1) {
					if w != "or" && w != "and" {
						items = append(items, w)
					}
				}
				if len(items) < 3 {
					continue
				}
				for name, values := range enums {
					if slices.ContainsFunc(items, func(s string) bool { return !slices.Contains(values, s) }) {
						continue
					}
					checked++
					if !slices.Equal(items, values) {
						t.Errorf("%s lists %d of the drain's %s (%s): list all of them (%s), or link to the generated tables of %s",
							file, len(items), name, strings.Join(items, ", "), strings.Join(values, ", "), statesPage)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no list of phases, outcomes or causes found anywhere: this test checks nothing")
	}
}

// TestEventsTable: the Events table of docs/observability.md gives, for each of drain.Outcomes, the Event that
// events.Finished records for it (its reason and type, read from the source), and names no other outcome.
func TestEventsTable(t *testing.T) {
	table := section(t, readRepo(t, "docs/observability.md"), "## Events")
	path := filepath.Join("..", "..", "internal", "events", "events.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{} // ReasonDrained: "Drained", TypeNormal: "Normal"
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Names) == len(vs.Values) {
			for i, id := range vs.Names {
				if s, ok := stringLit(vs.Values[i]); ok {
					consts[id.Name] = s
				}
			}
		}
		return true
	})
	// The Event of each outcome: the first Event{Type: …, Reason: …} in its case of Finished's switch, or the one
	// after the switch for the outcomes no case names.
	eventOf := func(stmts []ast.Stmt) (typ, reason string) {
		for _, s := range stmts {
			ast.Inspect(s, func(n ast.Node) bool {
				lit, ok := n.(*ast.CompositeLit)
				if !ok || reason != "" || fmt.Sprint(lit.Type) != "Event" {
					return true
				}
				for _, e := range lit.Elts {
					kv, ok := e.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					switch fmt.Sprint(kv.Key) {
					case "Type":
						typ = consts[fmt.Sprint(kv.Value)]
					case "Reason":
						reason = consts[fmt.Sprint(kv.Value)]
					}
				}
				return reason == ""
			})
			if reason != "" {
				return typ, reason
			}
		}
		return "", ""
	}
	want := map[string][2]string{} // outcome: type, reason
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "Finished" {
			continue
		}
		for k, s := range fn.Body.List {
			sw, ok := s.(*ast.SwitchStmt)
			if !ok {
				continue
			}
			named := map[string]bool{}
			for _, c := range sw.Body.List {
				cc := c.(*ast.CaseClause)
				typ, reason := eventOf(cc.Body)
				for _, e := range cc.List {
					sel, ok := e.(*ast.SelectorExpr)
					if !ok || fmt.Sprint(sel.X) != "drain" {
						t.Fatalf("events.Finished: case %v is not a drain.Outcome constant", e)
					}
					named[sel.Sel.Name] = true
					for _, o := range drain.Outcomes {
						if c, ok := drainConstants(t, "Outcome")[string(o)]; ok && c.name == sel.Sel.Name {
							want[string(o)] = [2]string{typ, reason}
						}
					}
				}
			}
			typ, reason := eventOf(fn.Body.List[k+1:])
			for _, o := range drain.Outcomes {
				if _, ok := want[string(o)]; !ok {
					want[string(o)] = [2]string{typ, reason}
				}
			}
		}
	}
	if len(want) != len(drain.Outcomes) {
		t.Fatalf("events.Finished: found the Events of %v, want one for each of %v", want, drain.Outcomes)
	}
	rows := map[string][]string{} // reason: the cells of its row
	for _, l := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		if len(cells) >= 4 && strings.HasPrefix(cells[0], "`") {
			rows[strings.Trim(cells[0], "`")] = cells
		}
	}
	documented := map[string]bool{}
	for reason, cells := range rows {
		for _, o := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(cells[2], -1) {
			documented[o[1]] = true
			w, ok := want[o[1]]
			switch {
			case !ok:
				t.Errorf("the Events table gives %s for outcome %s, which is not one of drain.Outcomes", reason, o[1])
			case w[1] != reason || w[0] != cells[1]:
				t.Errorf("the Events table gives %s %s for outcome %s; events.Finished records %s %s", cells[1], reason, o[1], w[0], w[1])
			}
		}
	}
	for _, o := range drain.Outcomes {
		if !documented[string(o)] {
			t.Errorf("the Events table of docs/observability.md has no row for outcome %s (events.Finished records %s %s)", o, want[string(o)][0], want[string(o)][1])
		}
	}
	if _, ok := rows[events.ReasonDrainStarted]; !ok {
		t.Errorf("the Events table has no row %s", events.ReasonDrainStarted)
	}
}

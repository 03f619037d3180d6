package chart

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	valuesFile = chartDir + "/values.yaml"
	schemaFile = chartDir + "/values.schema.json"
	readmeFile = chartDir + "/README.md"
	// The README's values table sits between these two lines; TestReadmeValues -update rewrites what is between.
	tableBegin = "<!-- values table: generated from values.yaml by `go test ./test/chart -run TestReadmeValues -update` -->"
	tableEnd   = "<!-- end of values table -->"
)

// documentedValue is a key of values.yaml with a "# --" comment: a row of the README's table.
type documentedValue struct {
	path        string // dotted: webhook.failurePolicy
	description string
}

var (
	keyLine     = regexp.MustCompile(`^(\s*)([A-Za-z0-9_.-]+):(\s|$)`)
	docStart    = regexp.MustCompile(`^\s*# -- (.*)$`)
	commentLine = regexp.MustCompile(`^\s*#\s?(.*)$`)
)

// documentedValues reads the "# --" comments of values.yaml: a comment block that starts with "# -- " documents
// the key on the line right after it; the key's path comes from the indentation of the keys above it.
func documentedValues(values string) ([]documentedValue, error) {
	type level struct {
		indent int
		key    string
	}
	var (
		stack   []level
		pending []string // the comment block being read, if it started with "# --"
		rows    []documentedValue
	)
	for i, line := range strings.Split(values, "\n") {
		if m := docStart.FindStringSubmatch(line); m != nil {
			pending = []string{m[1]}
			continue
		}
		if m := commentLine.FindStringSubmatch(line); m != nil {
			if pending != nil {
				pending = append(pending, m[1])
			}
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "- ") || pending == nil {
				pending = nil
				continue
			}
			return nil, fmt.Errorf("values.yaml line %d: a \"# --\" comment followed by %q, not by a key", i+1, line)
		}
		indent := len(m[1])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, level{indent, m[2]})
		if pending != nil {
			var keys []string
			for _, l := range stack {
				keys = append(keys, l.key)
			}
			rows = append(rows, documentedValue{path: strings.Join(keys, "."), description: strings.Join(pending, " ")})
			pending = nil
		}
	}
	return rows, nil
}

// lookupPath returns the value at a dotted path of the decoded values.
func lookupPath(values map[string]any, path string) (any, bool) {
	var v any = values
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// leaves returns the dotted paths of every value of v that is not a non-empty map.
func leaves(prefix string, v any) []string {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return []string{prefix}
	}
	var paths []string
	for k, sub := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		paths = append(paths, leaves(p, sub)...)
	}
	slices.Sort(paths)
	return paths
}

// valuesTable renders the README's table of values.
func valuesTable(rows []documentedValue, values map[string]any) (string, error) {
	var b strings.Builder
	b.WriteString("| Key | Default | Description |\n|---|---|---|\n")
	for _, r := range rows {
		v, ok := lookupPath(values, r.path)
		if !ok {
			return "", fmt.Errorf("documented key %s is not in values.yaml's decoded values", r.path)
		}
		def, err := json.Marshal(v)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", r.path, strings.ReplaceAll(string(def), "|", `\|`), strings.ReplaceAll(r.description, "|", `\|`))
	}
	return b.String(), nil
}

// TestReadmeValues: the chart README's values table is the one generated from values.yaml's "# --" comments and
// defaults (-update rewrites it), and every value of values.yaml is documented, by its own row or its parent's.
func TestReadmeValues(t *testing.T) {
	raw, err := os.ReadFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := documentedValues(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	table, err := valuesTable(rows, values)
	if err != nil {
		t.Fatal(err)
	}

	for _, leaf := range leaves("", values) {
		documented := slices.ContainsFunc(rows, func(r documentedValue) bool {
			return leaf == r.path || strings.HasPrefix(leaf, r.path+".")
		})
		if !documented {
			t.Errorf("value %s has no \"# --\" comment in values.yaml (nor has any key above it)", leaf)
		}
	}

	readme, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	begin := strings.Index(string(readme), tableBegin+"\n")
	end := strings.Index(string(readme), tableEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s has no values table between the lines %q and %q", readmeFile, tableBegin, tableEnd)
	}
	begin += len(tableBegin) + 1
	if got := string(readme[begin:end]); got != table {
		if *update {
			out := string(readme[:begin]) + table + string(readme[end:])
			if err := os.WriteFile(readmeFile, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("the values table of %s is not values.yaml's (go test ./test/chart -run TestReadmeValues -update rewrites it):\n%s",
			readmeFile, lineDiff(table, got))
	}
}

// TestSchemaCoversValues: every value of values.yaml has its property in values.schema.json (whose objects refuse
// unknown properties), so a value added without a schema entry is caught here rather than by a user's typo check.
func TestSchemaCoversValues(t *testing.T) {
	raw, err := os.ReadFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	rawSchema, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(rawSchema, &schema); err != nil {
		t.Fatalf("decoding %s: %v", schemaFile, err)
	}
	if strings.Contains(string(rawSchema), `"$ref": "http`) || strings.Contains(string(rawSchema), `"$ref":"http`) {
		t.Errorf("%s has a remote $ref; it must be self-contained", schemaFile)
	}
	for _, leaf := range leaves("", values) {
		node := schema
		for _, k := range strings.Split(leaf, ".") {
			node = resolveRef(schema, node)
			props, ok := node["properties"].(map[string]any)
			if !ok {
				break // a free-form object (resources, matchLabels): what is below is not the chart's to check
			}
			next, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("value %s has no property %q in %s", leaf, k, schemaFile)
				break
			}
			node = next
		}
	}
}

// resolveRef follows a local "$ref": "#/definitions/<name>" of node.
func resolveRef(schema, node map[string]any) map[string]any {
	ref, ok := node["$ref"].(string)
	if !ok {
		return node
	}
	defs, _ := schema["definitions"].(map[string]any)
	def, _ := defs[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
	return def
}

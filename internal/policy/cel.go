package policy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// celString is a CEL string literal holding s. Go's quoting is CEL's for everything strconv.Quote writes
// (\", \\, \n, \t, \xHH, \uHHHH, \UHHHHHHHH and the other one-letter escapes).
func celString(s string) string { return strconv.Quote(s) }

// renderer writes Go API values as CEL expressions: structs as Object initializers (named by their path
// in the pod, as the API server's CEL types are: Object.spec.initContainers.securityContext), maps as map
// literals, lists as list literals. A string listed in dynamic is replaced by its CEL expression: that is
// how the values that depend on the pod (the drain timeout, the grace period) get into the objects.
type renderer struct {
	dynamic map[string]string
}

// value renders v (an API type, or a list of strings), whose CEL type name is typ: the path of the field
// that holds it, for structs (Object.spec.volumes), and its fields' names appended for theirs.
func (r renderer) value(typ string, v any) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encoding %s: %w", typ, err)
	}
	var j any
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	if err := dec.Decode(&j); err != nil {
		return "", fmt.Errorf("decoding %s: %w", typ, err)
	}
	return r.render(typ, reflect.TypeOf(v), j)
}

var marshaler = reflect.TypeFor[json.Marshaler]()

func (r renderer) render(typ string, t reflect.Type, j any) (string, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// A type with its own JSON form (resource.Quantity, intstr.IntOrString) is a string or a number in
	// the pod's schema, not an object.
	custom := t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler)
	switch j := j.(type) {
	case nil:
		return "null", nil
	case bool:
		return strconv.FormatBool(j), nil
	case json.Number:
		return j.String(), nil
	case string:
		if e, ok := r.dynamic[j]; ok {
			return e, nil
		}
		return celString(j), nil
	case []any:
		if custom || t.Kind() != reflect.Slice {
			return "", fmt.Errorf("%s: a list for Go type %s", typ, t)
		}
		parts := make([]string, len(j))
		for i, e := range j {
			s, err := r.render(typ, t.Elem(), e)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return "[" + strings.Join(parts, ", ") + "]", nil
	case map[string]any:
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range j {
				if !yield(k) {
					return
				}
			}
		})
		var parts []string
		switch {
		case custom:
			return "", fmt.Errorf("%s: an object for Go type %s", typ, t)
		case t.Kind() == reflect.Map:
			for _, k := range keys {
				s, err := r.render(typ, t.Elem(), j[k])
				if err != nil {
					return "", err
				}
				parts = append(parts, celString(k)+": "+s)
			}
			return "{" + strings.Join(parts, ", ") + "}", nil
		case t.Kind() == reflect.Struct:
			for _, k := range keys {
				ft, ok := jsonField(t, k)
				if !ok {
					return "", fmt.Errorf("%s: no field %q in Go type %s", typ, k, t)
				}
				s, err := r.render(typ+"."+k, ft, j[k])
				if err != nil {
					return "", err
				}
				parts = append(parts, k+": "+s)
			}
			return typ + "{" + strings.Join(parts, ", ") + "}", nil
		}
		return "", fmt.Errorf("%s: an object for Go type %s", typ, t)
	}
	return "", fmt.Errorf("%s: unexpected JSON value %T", typ, j)
}

// jsonField finds the type of the field of struct t that JSON encodes under name, looking into inlined
// (embedded) structs as encoding/json does.
func jsonField(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if f.Anonymous && tag == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if got, ok := jsonField(ft, name); ok {
					return got, true
				}
			}
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if tag == name {
			return f.Type, true
		}
	}
	return nil, false
}

// patch is one JSONPatch operation as CEL.
func patch(op, path, value string) string {
	return fmt.Sprintf("JSONPatch{op: %s, path: %s, value: %s}", celString(op), path, value)
}

// list is a CEL list literal of ops.
func list(ops ...string) string {
	if len(ops) == 0 {
		return "[]"
	}
	return "[\n  " + strings.Join(ops, ",\n  ") + "\n]"
}

// when is ops if cond holds, else no op.
func when(cond string, ops ...string) string {
	return "(" + cond + " ? " + list(ops...) + " : [])"
}

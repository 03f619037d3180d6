// Package yamljson reads YAML into Go values by their JSON field tags, as sigs.k8s.io/yaml's Unmarshal does:
// the YAML becomes JSON, which encoding/json decodes. It exists so that the pod side (Envoy's bootstrap, a
// kubeconfig for Events) reads YAML without any sigs.k8s.io/ or k8s.io/ module: the pod binary links none
// (test/docs checks it). It decodes with go.yaml.in/yaml/v2, the parser sigs.k8s.io/yaml uses, and converts as
// it does: map keys become strings, and a number or a boolean meant for a string field becomes that string.
// FuzzUnmarshal holds it to sigs.k8s.io/yaml on the two documents the product reads.
package yamljson

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v2"
)

// Unmarshal decodes the YAML (or JSON) document data into v, a pointer, by v's JSON field tags.
func Unmarshal(data []byte, v any) error {
	b, err := ToJSON(data, reflect.TypeOf(v))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("error unmarshaling JSON: %w", err)
	}
	return nil
}

// ToJSON converts the YAML document data to JSON for a value of type target (nil: any): a scalar meant for
// a string field is written as a string.
func ToJSON(data []byte, target reflect.Type) ([]byte, error) {
	var obj any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("error converting YAML to JSON: %w", err)
	}
	j, err := jsonable(obj, target)
	if err != nil {
		return nil, fmt.Errorf("error converting YAML to JSON: %w", err)
	}
	return json.Marshal(j)
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// concrete is t without its pointers, or nil when t decodes itself (a json or text Unmarshaler) or is nil:
// the type whose kind decides how a YAML value is converted.
func concrete(t reflect.Type) reflect.Type {
	for t != nil {
		if t.Implements(jsonUnmarshaler) || t.Implements(textUnmarshaler) ||
			reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
			return nil
		}
		if t.Kind() != reflect.Pointer {
			return t
		}
		t = t.Elem()
	}
	return nil
}

// ErrKeyCollision reports a mapping with two keys that become one JSON key: different YAML scalars with the same
// text (`0` and `! 0`, the integer and the string; `true` and `"true"`). sigs.k8s.io/yaml keeps whichever its
// map iteration visits last, a different one from run to run; Unmarshal refuses the document instead.
var ErrKeyCollision = errors.New("two keys of a mapping become the same JSON key")

// jsonable converts a value decoded by yaml.v2 into one encoding/json can marshal, for a target of type t.
func jsonable(obj any, t reflect.Type) (any, error) {
	t = concrete(t)
	switch o := obj.(type) {
	case map[any]any:
		m := make(map[string]any, len(o))
		for k, v := range o {
			key, err := keyString(k)
			if err != nil {
				return nil, fmt.Errorf("%w (value %#v)", err, v)
			}
			if _, dup := m[key]; dup {
				return nil, fmt.Errorf("%w: %q", ErrKeyCollision, key)
			}
			var vt reflect.Type
			switch {
			case t == nil:
			case t.Kind() == reflect.Struct:
				vt = fieldType(t, key)
			case t.Kind() == reflect.Map:
				vt = t.Elem()
			}
			if m[key], err = jsonable(v, vt); err != nil {
				return nil, err
			}
		}
		return m, nil
	case []any:
		var et reflect.Type
		if t != nil && t.Kind() == reflect.Slice {
			et = t.Elem()
		}
		s := make([]any, len(o))
		for i, v := range o {
			var err error
			if s[i], err = jsonable(v, et); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
	if t != nil && t.Kind() == reflect.String {
		switch v := obj.(type) {
		case int:
			return strconv.Itoa(v), nil
		case int64:
			return strconv.FormatInt(v, 10), nil
		case uint64:
			return strconv.FormatUint(v, 10), nil
		case float64:
			return strconv.FormatFloat(v, 'g', -1, 32), nil
		case bool:
			return strconv.FormatBool(v), nil
		}
	}
	return obj, nil
}

// keyString is a YAML map key as a JSON object's key: yaml.v2 gives a string, an integer, a float or a bool.
func keyString(k any) (string, error) {
	switch k := k.(type) {
	case string:
		return k, nil
	case int:
		return strconv.Itoa(k), nil
	case int64:
		return strconv.FormatInt(k, 10), nil
	case float64:
		switch s := strconv.FormatFloat(k, 'g', -1, 32); s {
		case "+Inf":
			return ".inf", nil
		case "-Inf":
			return "-.inf", nil
		case "NaN":
			return ".nan", nil
		default:
			return s, nil
		}
	case bool:
		return strconv.FormatBool(k), nil
	}
	return "", fmt.Errorf("unsupported map key of type: %T, key: %#v", k, k)
}

// fieldType is the type of the field of struct t that encoding/json fills from the object key key: the
// field named so exactly, else case-insensitively (promoted fields of embedded structs included); nil if none.
func fieldType(t reflect.Type, key string) reflect.Type {
	var fold reflect.Type
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous && f.Tag.Get("json") == "" && concrete(f.Type) != nil && concrete(f.Type).Kind() == reflect.Struct {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f.Type
		}
		if fold == nil && strings.EqualFold(name, key) {
			fold = f.Type
		}
	}
	return fold
}

// JSONToYAML writes the JSON document j as YAML, as sigs.k8s.io/yaml's JSONToYAML does: decoded by the YAML
// parser (JSON is YAML, and its numbers keep their kind), then encoded with the keys of each map sorted.
func JSONToYAML(j []byte) ([]byte, error) {
	var obj any
	if err := yaml.Unmarshal(j, &obj); err != nil {
		return nil, err
	}
	return yaml.Marshal(obj)
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// inject -o json writes the objects -o yaml writes: one as itself, several as a v1 List.
func TestInjectOutputJSON(t *testing.T) {
	for _, tt := range []struct{ file string }{{"hook.in.yaml"}, {"multi-document.in.yaml"}} {
		in := filepath.Join("..", "inject", "testdata", tt.file)
		var y, j bytes.Buffer
		if code := Run(context.Background(), []string{"inject", "-f", in}, nil, &y, &bytes.Buffer{}); code != ExitOK {
			t.Fatalf("%s: inject: exit %d", tt.file, code)
		}
		if code := Run(context.Background(), []string{"inject", "--filename", in, "--output", "json"}, nil, &j, &bytes.Buffer{}); code != ExitOK {
			t.Fatalf("%s: inject -o json: exit %d", tt.file, code)
		}
		var wantDocs []any
		for _, doc := range bytes.Split(y.Bytes(), []byte("\n---")) {
			var v any
			if err := yaml.Unmarshal(doc, &v); err != nil {
				t.Fatal(err)
			}
			if v != nil {
				wantDocs = append(wantDocs, v)
			}
		}
		var got map[string]any
		if err := json.Unmarshal(j.Bytes(), &got); err != nil {
			t.Fatalf("%s: -o json is not JSON: %v\n%s", tt.file, err, j.String())
		}
		var want any = wantDocs[0]
		if len(wantDocs) > 1 {
			want = map[string]any{"apiVersion": "v1", "kind": "List", "items": wantDocs}
		}
		if !reflect.DeepEqual(any(got), want) {
			t.Errorf("%s: -o json\n%s\nis not -o yaml's objects\n%s", tt.file, j.String(), y.String())
		}
	}
}

func TestVersionOutput(t *testing.T) {
	for _, format := range []string{"json", "yaml"} {
		var out bytes.Buffer
		if code := Run(context.Background(), []string{"version", "-o", format}, nil, &out, &bytes.Buffer{}); code != ExitOK {
			t.Fatalf("version -o %s: exit %d", format, code)
		}
		var v struct{ Version, GoVersion string }
		if err := yaml.Unmarshal(out.Bytes(), &v); err != nil || v.Version != Version || v.GoVersion == "" {
			t.Errorf("version -o %s = %q (%v), want the version and Go's", format, out.String(), err)
		}
	}
}

package kubecli

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
		in := filepath.Join("..", "manifest", "testdata", tt.file)
		var y, j bytes.Buffer
		if code := Run(context.Background(), []string{"inject", "--image=" + deployImage, "-f", in}, nil, &y, &bytes.Buffer{}); code != ExitOK {
			t.Fatalf("%s: inject: exit %d", tt.file, code)
		}
		if code := Run(context.Background(), []string{"inject", "--image=" + deployImage, "--filename", in, "--output", "json"}, nil, &j, &bytes.Buffer{}); code != ExitOK {
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

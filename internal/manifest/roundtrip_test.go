package manifest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
)

// normalForm is a document as Manifests writes one it changed: its object re-encoded by sigs.k8s.io/yaml (what
// `kubectl get -o yaml` writes: keys in alphabetical order, a sequence's items at its key's indentation, no
// comments, quotes only where YAML needs them, numbers in decimal), or in JSON with keys in alphabetical order,
// indented as the document's second line, when it came in JSON (see encodeLike).
func normalForm(t testing.TB, body []byte) []byte {
	t.Helper()
	js, err := yaml.YAMLToJSON(body)
	if err != nil {
		t.Fatal(err)
	}
	out, err := encodeLike(body, js)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// assertGivenBack: back, the output of uninject over inject's output, is in, the input: the same objects field
// for field (YAML-equal), the same documents with the same separator lines in the same order, and each document
// byte for byte, or, for a document inject changed, byte for byte its normal form (normalForm), which is the
// input itself when the input was written that way. It reports whether every document came back byte for byte.
func assertGivenBack(t testing.TB, in, back []byte) bool {
	t.Helper()
	if g, w := decodeUnstructured(t, back), decodeUnstructured(t, in); len(g) != len(w) || !bytes.Equal(mustYAML(t, g), mustYAML(t, w)) {
		t.Errorf("uninject after inject gives other objects:\ninput:\n%s\nback:\n%s", in, back)
		return false
	}
	ind, bd := splitDocuments(in), splitDocuments(back)
	if len(ind) != len(bd) {
		t.Errorf("uninject after inject gives %d documents, the input has %d", len(bd), len(ind))
		return false
	}
	same := true
	for i := range ind {
		if !bytes.Equal(ind[i].separator, bd[i].separator) {
			t.Errorf("document %d: separator %q, the input's is %q", i+1, bd[i].separator, ind[i].separator)
		}
		if bytes.Equal(ind[i].body, bd[i].body) {
			continue
		}
		same = false
		if want := normalForm(t, ind[i].body); !bytes.Equal(bd[i].body, want) {
			t.Errorf("document %d is neither as it came nor in its normal form: first difference %s", i+1, firstDiff(want, bd[i].body))
		}
	}
	return same
}

func mustYAML(t testing.TB, v any) []byte {
	t.Helper()
	out, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// firstDiff names the first line where got differs from want.
func firstDiff(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := range max(len(w), len(g)) {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return fmt.Sprintf("line %d: want %q, got %q", i+1, a, b)
		}
	}
	return "none"
}

// TestUninjectNormalForm: what uninject∘inject keeps of a document's text and what it does not, each difference
// docs/install.md names ("What uninject gives back"): comments dropped, keys in alphabetical order, a sequence's
// items at its key's indentation, flow style written as block style, quotes dropped where YAML needs none, the
// octal 0644 written 420, anchors written out; a JSON document stays JSON, keys in alphabetical order, indented as
// its second line. The document after it, which inject does not change, comes back byte for byte.
func TestUninjectNormalForm(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{name: "yaml", in: `# the edge proxy
kind: Deployment
apiVersion: apps/v1
metadata: {name: edge, labels: &labels {app: 'edge'}}
spec:
  selector:
    matchLabels: *labels
  template:
    metadata:
      labels:
        app: "edge"
    spec:
      containers:
        - name: envoy   # the proxy
          image: envoyproxy/envoy:v1.36.2
          args: ["-c", "/etc/envoy/envoy.yaml"]
          env:
            - {name: LABELS, value: x}
      volumes:
        - name: config
          configMap:
            name: envoy
            defaultMode: 0644
---   # not a workload
kind: ConfigMap
apiVersion: v1
metadata: {name: envoy}  # kept as it is
`, want: `apiVersion: apps/v1
kind: Deployment
metadata:
  labels:
    app: edge
  name: edge
spec:
  selector:
    matchLabels:
      app: edge
  template:
    metadata:
      labels:
        app: edge
    spec:
      containers:
      - args:
        - -c
        - /etc/envoy/envoy.yaml
        env:
        - name: LABELS
          value: x
        image: envoyproxy/envoy:v1.36.2
        name: envoy
      volumes:
      - configMap:
          defaultMode: 420
          name: envoy
        name: config
---   # not a workload
kind: ConfigMap
apiVersion: v1
metadata: {name: envoy}  # kept as it is
`},
		{name: "json", in: `{
    "kind": "Deployment", "apiVersion": "apps/v1", "metadata": {"name": "edge"},
    "spec": {"selector": {"matchLabels": {"app": "edge"}},
             "template": {"metadata": {"labels": {"app": "edge"}}, "spec": {"containers": [{"name": "envoy", "image": "envoyproxy/envoy:v1.36.2"}]}}}
}
`, want: `{
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": "edge"
    },
    "spec": {
        "selector": {
            "matchLabels": {
                "app": "edge"
            }
        },
        "template": {
            "metadata": {
                "labels": {
                    "app": "edge"
                }
            },
            "spec": {
                "containers": [
                    {
                        "image": "envoyproxy/envoy:v1.36.2",
                        "name": "envoy"
                    }
                ]
            }
        }
    }
}
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Manifests([]byte(tt.in), injectFunc(inject.Config{Image: "x"}), &strings.Builder{})
			if err != nil {
				t.Fatal(err)
			}
			back, err := Manifests(out, inject.Uninject, &strings.Builder{})
			if err != nil {
				t.Fatal(err)
			}
			if string(back) != tt.want {
				t.Errorf("uninject after inject: first difference %s; got:\n%s", firstDiff([]byte(tt.want), back), back)
			}
			if assertGivenBack(t, []byte(tt.in), back) {
				t.Error("every document came back byte for byte: this case shows no difference")
			}
			// Written in the normal form, the same objects come back byte for byte.
			if again := reinjected(t, back); !bytes.Equal(again, back) {
				t.Errorf("the normal form did not come back byte for byte: first difference %s", firstDiff(back, again))
			}
		})
	}
}

// reinjected is uninject∘inject of a stream.
func reinjected(t *testing.T, in []byte) []byte {
	t.Helper()
	out, err := Manifests(in, injectFunc(inject.Config{Image: "x"}), &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	back, err := Manifests(out, inject.Uninject, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// TestUninjectPeersBytes: `inject --takeover | uninject`, in every mode, over every Envoy workload Contour and
// Envoy Gateway render (read from their Go modules) gives the document back byte for byte or in its normal form
// (assertGivenBack), and Envoy Gateway's, which are written in the normal form, byte for byte.
func TestUninjectPeersBytes(t *testing.T) {
	exact, normalised := 0, 0
	for _, w := range peers.Workloads(t) {
		given := "" // the renderings Envoy would not start on need the admin address given (TestTakeoverPeers)
		if w.EnvoyRefuses() {
			given = "http://127.0.0.1:19000"
		}
		for _, mode := range []inject.Mode{inject.ModeHook, inject.ModeSidecar, inject.ModeAgent} {
			out, err := Manifests(w.YAML, injectFunc(inject.Config{Image: "x", Mode: mode, Takeover: true, AdminAddress: given}), &strings.Builder{})
			if err != nil {
				t.Fatalf("%s (%s): %v", w.Source, mode, err)
			}
			back, err := Manifests(out, inject.Uninject, &strings.Builder{})
			if err != nil {
				t.Fatalf("%s (%s): uninject: %v", w.Source, mode, err)
			}
			if assertGivenBack(t, w.YAML, back) {
				exact++
				continue
			}
			normalised++
			if w.Peer == "envoy-gateway" {
				t.Errorf("%s (%s): not given back byte for byte: %s", w.Source, mode, firstDiff(w.YAML, back))
			}
		}
	}
	t.Logf("%d byte for byte, %d in their normal form", exact, normalised)
}

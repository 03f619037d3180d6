package manifest

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

func TestSplitDocumentsKeepsEveryByte(t *testing.T) {
	for _, in := range []string{
		"", "a: 1\n", "---\na: 1\n---\nb: 2", "# c\n--- # x\na: 1\n...\n---\n", "a: |\n  ---x\n  y\n---\r\nb: 1\r\n",
	} {
		var joined []byte
		for _, d := range splitDocuments([]byte(in)) {
			joined = append(append(joined, d.separator...), d.body...)
		}
		if string(joined) != in {
			t.Errorf("split and joined %q gives %q", in, joined)
		}
	}
}

// FuzzManifests feeds arbitrary YAML streams through inject and uninject as the command does: no panic,
// every error names its document, and whatever is injected is injected once.
func FuzzManifests(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("kind: List\nitems: [1, {kind: Pod, apiVersion: v1}]\n"))
	f.Add([]byte("---\n---\n- a\n---\n\"x\"\n"))
	cfg := inject.Config{Image: "sm:1"}
	f.Fuzz(func(t *testing.T, data []byte) {
		for i, fn := range []PodFunc{injectFunc(cfg), inject.Uninject} {
			out, err := Manifests(data, fn, &bytes.Buffer{})
			if err != nil {
				if !strings.HasPrefix(err.Error(), "document ") {
					t.Fatalf("error does not name the document: %v", err)
				}
				continue
			}
			again, err := Manifests(out, fn, &bytes.Buffer{})
			if err != nil {
				t.Fatalf("second pass over our own output: %v\noutput:\n%s", err, out)
			}
			if !bytes.Equal(again, out) {
				t.Fatalf("second pass changed the output:\nfirst:\n%s\nsecond:\n%s", out, again)
			}
			// uninject∘inject = identity, field for field as written, for a stream nothing had been injected into, and
			// byte for byte but for the documents inject changed, which come back in their normal form.
			if i == 0 && !bytes.Contains(data, []byte(inject.AnnotationStatus)) {
				back, err := Manifests(out, inject.Uninject, &bytes.Buffer{})
				if err != nil {
					t.Fatalf("uninjecting our own output: %v\noutput:\n%s", err, out)
				}
				if g, w := decodeUnstructured(t, back), decodeUnstructured(t, data); !reflect.DeepEqual(g, w) {
					t.Fatalf("uninject after inject differs from the input:\ninput:\n%s\nback:\n%s", data, back)
				}
				assertGivenBack(t, data, back) // and byte for byte, but for the documents inject changed: their normal form
			}
		}
	})
}

// A manifest's null, {} and [] fields come back from uninject as written, through a re-injection in another
// mode, and never over what was added to the injected manifest since.
func TestEmptyFieldsKept(t *testing.T) {
	in := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {}\n  labels: null\nspec:\n  initContainers: []\n  volumes: []\n  containers:\n  - name: envoy\n    image: envoyproxy/envoy:v1.36.2\n    args: [-c, /e.yaml]\n    env: []\n    volumeMounts: []\n    lifecycle:\n"
	once, err := Manifests([]byte(in), injectFunc(inject.Config{Image: "sm:1"}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	twice, err := Manifests(once, injectFunc(inject.Config{Image: "sm:1", Mode: inject.ModeAgent}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for name, injected := range map[string][]byte{"injected": once, "injected twice": twice} {
		back, err := Manifests(injected, inject.Uninject, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if g, w := decodeUnstructured(t, back), decodeUnstructured(t, []byte(in)); !reflect.DeepEqual(g, w) {
			t.Errorf("%s and uninjected differs from the input:\n%s", name, back)
		}
	}
	// Someone adds a variable of their own to the injected manifest: uninject keeps it rather than writing the
	// env: [] it was recorded with.
	edited := bytes.Replace(once, []byte("    env:\n"), []byte("    env:\n    - name: OWN\n      value: x\n"), 1)
	if bytes.Equal(edited, once) {
		t.Fatalf("no env list in the injected manifest:\n%s", once)
	}
	back, err := Manifests(edited, inject.Uninject, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(back, []byte("name: OWN")) || bytes.Contains(back, []byte("env: []")) {
		t.Errorf("uninject wrote over a variable added after injection:\n%s", back)
	}
}

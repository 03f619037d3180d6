package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenConfig is the Config of every golden case before its own changes.
func goldenConfig() inject.Config {
	return inject.Config{Image: "ghcr.io/envoy-shutdown-manager/shutdown-manager:v1.0.0", Version: "v1.0.0"}
}

func dur(s string) *time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return &d
}

// goldenCases: testdata/<name>.in.yaml injected with goldenConfig changed by cfg gives <name>.out.yaml,
// or the error in <name>.err.txt; notes (stderr of the command) go to <name>.notes.txt when there are any.
var goldenCases = []struct {
	name string
	cfg  func(*inject.Config)
}{
	// Modes and binary sources.
	{"hook", nil},
	{"hook-image-volume", func(c *inject.Config) { c.BinaryFrom = inject.BinaryImageVolume }},
	{"sidecar", func(c *inject.Config) { c.Mode = inject.ModeSidecar }},
	{"sidecar-image-volume", func(c *inject.Config) { c.Mode, c.BinaryFrom = inject.ModeSidecar, inject.BinaryImageVolume }},
	{"sidecar-envoy-user", func(c *inject.Config) { c.Mode = inject.ModeSidecar }},
	{"sidecar-http", func(c *inject.Config) { c.Mode, c.Hook = inject.ModeSidecar, inject.HookHTTP }},
	{"sidecar-plain", func(c *inject.Config) { c.Mode, c.SidecarKind = inject.ModeSidecar, inject.SidecarPlain }},
	{"sidecar-plain-http", func(c *inject.Config) {
		c.Mode, c.SidecarKind, c.Hook = inject.ModeSidecar, inject.SidecarPlain, inject.HookHTTP
	}},
	{"agent", func(c *inject.Config) { c.Mode = inject.ModeAgent }},
	{"agent-image-volume", func(c *inject.Config) { c.Mode, c.BinaryFrom = inject.ModeAgent, inject.BinaryImageVolume }},
	{"agent-command", func(c *inject.Config) { c.Mode = inject.ModeAgent }},
	{"agent-no-command", func(c *inject.Config) { c.Mode = inject.ModeAgent }},
	{"image-pull-policy", func(c *inject.Config) { c.ImagePullPolicy = corev1.PullNever; c.BinaryFrom = inject.BinaryImageVolume }},
	{"flags-drain", func(c *inject.Config) {
		c.AdminAddress = "unix:///var/run/envoy/admin.sock"
		c.Drain = inject.Drain{Delay: dur("2s"), MinDuration: dur("0s"), QuietPeriod: dur("1s"), Timeout: dur("40s"), MinOpenConnections: new(int64), Count: "requests", ListenerExclude: []string{"^listener\\.admin2"}}
	}},
	// Every row of DrainSettings, from its example, in each mode.
	{"flags-every-setting", everySetting},
	{"flags-every-setting-sidecar", func(c *inject.Config) { everySetting(c); c.Mode = inject.ModeSidecar }},
	{"flags-every-setting-agent", func(c *inject.Config) { everySetting(c); c.Mode = inject.ModeAgent }},
	// Per-pod annotations, valid and not.
	{"annotations-drain", nil},
	{"annotations-agent", nil},
	{"annotations-sidecar", nil},
	{"annotation-envoy-container", nil},
	{"annotations-on-workload", nil},
	{"opted-out", nil},
	{"bad-annotation-drain-delay", nil},
	{"bad-annotation-mode", nil},
	{"bad-annotation-count", nil},
	{"bad-annotation-drain-timout", nil},
	{"bad-annotation-admin-address", nil},
	{"bad-annotation-min-open-connections", nil},
	{"bad-annotation-listener-exclude", nil},
	{"bad-annotation-inject", nil},
	{"bad-annotation-drain-timeout", nil},
	// Grace periods.
	{"grace-short", nil},
	{"grace-long", nil},
	{"grace-raised-for-timeout", func(c *inject.Config) { c.Drain.Timeout = dur("60s") }},
	{"grace-fits-timeout", func(c *inject.Config) { c.Drain.Timeout = dur("20s") }},
	{"agent-grace-short", func(c *inject.Config) { c.Mode = inject.ModeAgent }},
	{"agent-grace-raised-for-timeout", func(c *inject.Config) { c.Mode, c.Drain.Timeout = inject.ModeAgent, dur("60s") }},
	// A load balancer's deregistration delay: the derived drain timeout covers it and the quiet period's
	// longest silence (auto: 10 s); a longer grace period is used whole; the annotation with a fixed quiet period.
	{"grace-raised-for-deregistration", func(c *inject.Config) { c.DeregistrationDelay = 120 * time.Second }},
	{"grace-long-deregistration", func(c *inject.Config) { c.DeregistrationDelay = 120 * time.Second }},
	{"annotation-deregistration-delay", nil},
	{"bad-annotation-deregistration-delay", nil},
	// Existing hooks, finding Envoy, names.
	{"existing-prestop", nil},
	{"existing-prestop-replaced", func(c *inject.Config) { c.ReplaceHooks = true }},
	{"agent-existing-prestop-replaced", func(c *inject.Config) { c.Mode, c.ReplaceHooks = inject.ModeAgent, true }},
	{"missing-envoy", nil},
	{"ambiguous-envoy", nil},
	{"envoy-by-image", nil},
	{"name-conflict", func(c *inject.Config) { c.Mode = inject.ModeSidecar }},
	{"sidecar-http-port-conflict", func(c *inject.Config) { c.Mode, c.Hook = inject.ModeSidecar, inject.HookHTTP }},
	{"existing-init-containers", nil},
	{"sidecar-existing-init-containers", func(c *inject.Config) { c.Mode = inject.ModeSidecar }},
	{"reinject-other-mode", func(c *inject.Config) { c.Mode, c.Hook = inject.ModeSidecar, inject.HookHTTP }},
	{"env-user-set", nil},
	{"env-user-set-agent", func(c *inject.Config) { c.Mode = inject.ModeAgent }},
	// Pods as people build them.
	{"native-sidecar-envoy", nil},
	{"native-sidecar-envoy-sidecar", func(c *inject.Config) { c.Mode = inject.ModeSidecar }},
	{"native-sidecar-envoy-agent", func(c *inject.Config) { c.Mode = inject.ModeAgent }},
	{"two-envoys", nil},
	{"two-envoys-native-sidecar", nil},
	{"sidecar-http-host-network", func(c *inject.Config) { c.Mode, c.Hook = inject.ModeSidecar, inject.HookHTTP }},
	{"sidecar-http-token", func(c *inject.Config) {
		c.Mode, c.Hook, c.TokenSecret = inject.ModeSidecar, inject.HookHTTP, "envoy-drain-token"
	}},
	{"sidecar-http-host-network-token", func(c *inject.Config) {
		c.Mode, c.Hook, c.TokenSecret = inject.ModeSidecar, inject.HookHTTP, "envoy-drain-token"
	}},
	{"bad-annotation-token-secret", func(c *inject.Config) { c.Mode = inject.ModeSidecar }},
	{"sidecar-host-network", func(c *inject.Config) { c.Mode = inject.ModeSidecar }},
	// automountServiceAccountToken: false (Contour's and Envoy Gateway's pods): the manager's own token, or not.
	{"automount-off", nil},
	{"automount-off-sidecar", func(c *inject.Config) { c.Mode = inject.ModeSidecar }},
	{"automount-off-opted-out", nil},
	// Envoy's admin on a unix socket: the sidecar mounts the volume that holds it, or the pod is refused.
	{"sidecar-admin-socket-subpath", func(c *inject.Config) {
		c.Mode, c.Hook, c.AdminAddress = inject.ModeSidecar, inject.HookHTTP, "unix:///var/run/envoy/admin.sock"
	}},
	{"sidecar-admin-socket-unshared", func(c *inject.Config) {
		c.Mode, c.AdminAddress = inject.ModeSidecar, "unix:///var/run/envoy/admin.sock"
	}},
	{"sidecar-admin-socket-subpathexpr", func(c *inject.Config) {
		c.Mode, c.AdminAddress = inject.ModeSidecar, "unix:///var/run/envoy/admin.sock"
	}},
	{"grace-max", nil},
	{"agent-grace-max", func(c *inject.Config) { c.Mode = inject.ModeAgent }},
	{"grace-over-duration", nil},
	// Workload kinds and streams.
	{"kind-pod", nil},
	{"kind-daemonset", nil},
	{"kind-statefulset", nil},
	{"kind-replicaset", nil},
	{"kind-replicationcontroller", nil},
	{"kind-job", nil},
	{"kind-cronjob", nil},
	{"kind-deployment-json", nil}, // JSON in (kubectl get -o json), JSON out
	{"kind-rollout", nil},
	{"kind-cloneset", nil},
	{"kind-advanced-statefulset", nil},
	{"kind-advanced-daemonset", nil},
	{"rollout-workload-ref", nil},
	{"kind-podtemplate", nil},
	{"controller-revision", nil},
	{"template-path", nil}, // with goldenTemplates
	{"unknown-kind-with-envoy", nil},
	{"list", nil},
	{"multi-document", nil},
	{"unsupported-api-version", nil},
	{"unknown-field", nil},
}

// everySetting sets every row of DrainSettings to its example.
func everySetting(c *inject.Config) {
	for _, d := range inject.DrainSettings {
		if err := d.Set(c, d.Example); err != nil {
			panic(fmt.Sprintf("setting %s: example %q: %v", d.Name, d.Example, err))
		}
	}
}

// goldenTemplates are the --template-path flags of the cases that have some.
var goldenTemplates = map[string][]string{
	"template-path": {"example.com/v1/EdgeFleet=spec.pod"},
}

// goldenOptions are the Options of a golden case (its notes go to notes).
func goldenOptions(t *testing.T, name string, notes io.Writer) Options {
	t.Helper()
	opts := Options{Notes: notes}
	for _, v := range goldenTemplates[name] {
		w, err := ParseTemplatePath(v)
		if err != nil {
			t.Fatal(err)
		}
		opts.Workloads = append(opts.Workloads, w)
	}
	return opts
}

func TestInjectGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			in := readFile(t, filepath.Join("testdata", tc.name+".in.yaml"))
			cfg := goldenConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			var notes bytes.Buffer
			opts := goldenOptions(t, tc.name, &notes)
			got, err := Transform(bytes.NewReader(in), injectFunc(cfg), opts)
			base := filepath.Join("testdata", tc.name)
			if err != nil {
				golden(t, base+".out.yaml", nil)
				golden(t, base+".err.txt", []byte(err.Error()+"\n"))
				if !strings.HasPrefix(err.Error(), "document ") {
					t.Errorf("error does not name the document: %v", err)
				}
				return
			}
			golden(t, base+".err.txt", nil)
			golden(t, base+".out.yaml", got)
			golden(t, base+".notes.txt", notes.Bytes())

			// inject∘inject = inject, byte for byte: an unchanged workload is written back as it came.
			opts.Notes = &bytes.Buffer{}
			again, err := Transform(bytes.NewReader(got), injectFunc(cfg), opts)
			if err != nil {
				t.Fatalf("injecting the output again: %v", err)
			}
			if !bytes.Equal(again, got) {
				t.Errorf("injecting twice differs from injecting once:\n%s", again)
			}
			// uninject∘inject = identity, object for object.
			back, err := Transform(bytes.NewReader(got), inject.Uninject, opts)
			if err != nil {
				t.Fatalf("uninjecting the output: %v", err)
			}
			want := in
			if tc.name == "reinject-other-mode" { // its input was injected: uninject gives the plain pod
				want, _ = Manifests(in, inject.Uninject, &bytes.Buffer{})
			}
			assertSameObjects(t, back, want)
			assertGivenBack(t, want, back)
		})
	}
}

// TestGoldenCasesComplete: every input file has a case, and no golden file is left over from an old one.
func TestGoldenCasesComplete(t *testing.T) {
	names := map[string]bool{}
	for _, tc := range goldenCases {
		names[tc.name] = true
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "*.*"))
	for _, f := range files {
		name := filepath.Base(f)
		for _, ext := range []string{".in.yaml", ".out.yaml", ".err.txt", ".notes.txt"} {
			if c, ok := strings.CutSuffix(name, ext); ok && !names[c] {
				t.Errorf("%s has no case in goldenCases", f)
			}
		}
	}
}

func injectFunc(cfg inject.Config) PodFunc {
	return func(meta *metav1.ObjectMeta, spec *corev1.PodSpec) error { return inject.Inject(meta, spec, cfg) }
}

// assertSameObjects compares two YAML streams object by object, as the API types see them, and field for
// field as written: a field one has and the other not (a status block of zeros) is a difference even where
// the API types see none.
func assertSameObjects(t *testing.T, got, want []byte) {
	t.Helper()
	if g, w := decodeUnstructured(t, got), decodeUnstructured(t, want); !reflect.DeepEqual(g, w) {
		gy, _ := yaml.Marshal(g)
		wy, _ := yaml.Marshal(w)
		t.Errorf("the objects differ as written:\ngot:\n%s\nwant:\n%s", gy, wy)
	}
	g, w := decodeStream(t, got), decodeStream(t, want)
	if len(g) != len(w) {
		t.Fatalf("got %d objects, want %d", len(g), len(w))
	}
	for i := range g {
		if !equality.Semantic.DeepEqual(g[i], w[i]) {
			gy, _ := yaml.Marshal(g[i])
			wy, _ := yaml.Marshal(w[i])
			t.Errorf("object %d differs:\ngot:\n%s\nwant:\n%s", i+1, gy, wy)
		}
	}
}

// decodeStream decodes every object of a YAML stream (the items of a List one by one) into its API type,
// or into a generic map for kinds outside the workload table.
func decodeStream(t *testing.T, data []byte) []any {
	t.Helper()
	var objs []any
	for _, doc := range splitDocuments(data) {
		js, err := yaml.YAMLToJSON(doc.body)
		if err != nil {
			t.Fatal(err)
		}
		var h header
		if err := yaml.Unmarshal(js, &h); err != nil || h.Kind == "" {
			continue
		}
		objs = append(objs, decodeObject(t, js, h))
	}
	return objs
}

// decodeUnstructured decodes every document of a YAML stream as written, into generic values (nil for an
// empty document).
func decodeUnstructured(t testing.TB, data []byte) []any {
	t.Helper()
	var objs []any
	for _, doc := range splitDocuments(data) {
		var v any
		if err := yaml.Unmarshal(doc.body, &v); err != nil {
			t.Fatal(err)
		}
		if v != nil {
			objs = append(objs, v)
		}
	}
	return objs
}

func decodeObject(t *testing.T, js []byte, h header) any {
	t.Helper()
	if strings.HasSuffix(h.Kind, "List") {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := yaml.Unmarshal(js, &list); err != nil {
			t.Fatal(err)
		}
		var items []any
		for _, it := range list.Items {
			var ih header
			if err := yaml.Unmarshal(it, &ih); err != nil {
				t.Fatal(err)
			}
			items = append(items, decodeObject(t, it, ih))
		}
		return items
	}
	if w, ok := LookupWorkload(h.APIVersion, h.Kind); ok && w.New != nil {
		obj := w.New()
		if err := yaml.Unmarshal(js, obj); err != nil {
			t.Fatal(err)
		}
		return obj
	}
	var m map[string]any
	if err := yaml.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// golden compares got with the file at path, or rewrites it with -update. An empty got means no file.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if len(got) == 0 {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			return
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && len(got) == 0 {
		return
	}
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to write it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -run '%s' -update rewrites it; the diff is the review):\ngot:\n%s\nwant:\n%s", path, t.Name(), got, want)
	}
}

// splitDocuments splits a YAML stream at its "---" lines, keeping every byte: joining the separators and
// bodies gives the input back (data is small: no limit applies).
func splitDocuments(data []byte) []document {
	var docs []document
	sc := newDocScanner(bytes.NewReader(data))
	sc.limit = len(data) + 1
	for {
		doc, err := sc.next()
		if err != nil {
			return docs
		}
		docs = append(docs, doc)
	}
}

// endless is a reader of a YAML stream that never ends: a document of 1 MiB of comments again and again (cheap
// to decode); it counts what was read of it.
type endless struct{ read int64 }

var endlessDoc = "---\n" + strings.Repeat("# "+strings.Repeat("x", 1021)+"\n", 1024)

func (e *endless) Read(p []byte) (int, error) {
	doc := endlessDoc
	n := 0
	for n < len(p) {
		n += copy(p[n:], doc[(e.read+int64(n))%int64(len(doc)):])
	}
	e.read += int64(n)
	return n, nil
}

// ManifestsFrom reads a stream document by document and stops at MaxStreamBytes with ErrTooLarge: an endless
// stream (stdin from a wrong command) ends in an error naming the limit, having read not much more than it.
func TestManifestsFromStopsAtTheLimit(t *testing.T) {
	r := &endless{}
	_, err := ManifestsFrom(r, inject.Uninject, &bytes.Buffer{})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "the manifests are over 32 MiB") {
		t.Fatalf("ManifestsFrom(endless) = %v, want ErrTooLarge naming the limit", err)
	}
	if r.read > MaxStreamBytes+1 {
		t.Errorf("read %d bytes, want at most the limit %d and one", r.read, MaxStreamBytes)
	}
}

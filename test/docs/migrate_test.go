package docs

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/doctable"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubecli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
)

type migrationPage struct{ page, module, version, input string }

// migrationPages: each page, the peer's module and the rendered file its commands and YAML are about.
var migrationPages = []migrationPage{
	{"docs/migrate-contour.md", peers.ContourModule, peers.ContourVersion, "examples/render/contour.yaml"},
	{"docs/migrate-envoy-gateway.md", peers.EnvoyGatewayModule, peers.EnvoyGatewayVersion,
		"internal/infrastructure/kubernetes/proxy/testdata/deployments/default.yaml"},
}

// envoyProxyCRD is where Envoy Gateway's module keeps the EnvoyProxy CRD its controller serves.
const envoyProxyCRD = "charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_envoyproxies.yaml"

// TestMigrationPages: every command and YAML block of docs/migrate-contour.md and docs/migrate-envoy-gateway.md,
// against the peers' own files read from their Go modules. Each ```sh line must be one the test knows how to check:
// `shutdown-manager …` lines run (in order, in a directory holding the peer's rendered file as `curl` fetches it)
// and must exit 0; `kubectl … -f FILE` must name a file an earlier line wrote or one of this repository; `kubectl
// patch` and `kubectl label` must use inject's own names; `helm install` must name this repository's chart and its
// values. Each ```yaml block must be a run of lines of the peer's rendered file or of `inject --takeover`'s output
// for it, or an EnvoyProxy whose every field Envoy Gateway's CRD has and whose labels and annotations are inject's.
// uninject must give back the rendered file's objects.
func TestMigrationPages(t *testing.T) {
	asRelease(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range migrationPages {
		t.Run(filepath.Base(p.page), func(t *testing.T) {
			dir, err := peers.Download(context.Background(), p.module, p.version)
			if err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("CI=true and %s@%s could not be read: %v", p.module, p.version, err)
				}
				t.Skipf("%s@%s could not be read (no Go module proxy?): %v", p.module, p.version, err)
			}
			page, err := os.ReadFile(filepath.Join(root, p.page))
			if err != nil {
				t.Fatal(err)
			}
			rendered, err := os.ReadFile(filepath.Join(dir, p.input))
			if err != nil {
				t.Fatal(err)
			}
			takenOver := runCLI(t, "", nil, "inject", "--takeover", "-f", filepath.Join(dir, p.input))
			checkShell(t, root, dir, p.input, p.version, string(page), rendered)
			checkYAML(t, dir, string(page), rendered, takenOver)
		})
	}
}

// docsRelease is the release the pages' commands name and run as: `helm install` sets image.tag to it, and the
// pages show what its `shutdown-manager` writes (a release's default image is its own on ghcr.io).
const docsRelease = "v0.1.0"

// asRelease makes the in-process shutdown-manager a build of docsRelease for the rest of t, as -ldflags
// -X …/internal/cli.Version=v0.1.0 does: a user runs a release; a development build has no default image.
func asRelease(t *testing.T) {
	old := cli.Version
	cli.Version = docsRelease
	t.Cleanup(func() { cli.Version = old })
}

// runCLI runs shutdown-manager in-process with stdin and returns its stdout; it fails t unless it exits 0.
func runCLI(t *testing.T, wd string, stdin []byte, args ...string) []byte {
	t.Helper()
	if wd != "" {
		for i, a := range args {
			if !strings.HasPrefix(a, "-") && strings.Contains(a, ".") {
				if _, err := os.Stat(filepath.Join(wd, a)); err == nil {
					args[i] = filepath.Join(wd, a)
				}
			}
		}
	}
	var stdout, stderr bytes.Buffer
	if code := kubecli.Run(context.Background(), args, bytes.NewReader(stdin), &stdout, &stderr); code != 0 {
		t.Fatalf("shutdown-manager %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.Bytes()
}

// shellWords splits a command line on spaces, keeping '…' together (without the quotes).
func shellWords(line string) []string {
	var words []string
	for len(line) > 0 {
		line = strings.TrimLeft(line, " ")
		if strings.HasPrefix(line, "'") {
			end := strings.Index(line[1:], "'")
			if end < 0 {
				return append(words, line[1:])
			}
			words, line = append(words, line[1:end+1]), line[end+2:]
			continue
		}
		w, rest, _ := strings.Cut(line, " ")
		if w != "" {
			words = append(words, w)
		}
		line = rest
	}
	return words
}

func checkShell(t *testing.T, root, modDir, input, version, page string, rendered []byte) {
	wd := t.TempDir()
	lines := 0
	for _, b := range doctable.Blocks(page, "sh") {
		for _, line := range strings.Split(strings.TrimSpace(b), "\n") {
			lines++
			w := shellWords(line)
			switch {
			case w[0] == "curl":
				url := w[len(w)-1]
				want := "https://raw.githubusercontent.com/projectcontour/contour/" + version + "/" + input
				if url != want || !slices.Contains(w, "-sSLo") {
					t.Errorf("%q: want curl -sSLo FILE %s", line, want)
					continue
				}
				out := w[slices.Index(w, "-sSLo")+1]
				if err := os.WriteFile(filepath.Join(wd, out), rendered, 0o644); err != nil {
					t.Fatal(err)
				}
			case w[0] == "shutdown-manager":
				args, out := w[1:], ""
				if i := slices.Index(args, ">"); i >= 0 {
					args, out = args[:i], args[i+1]
				}
				stdout := runCLI(t, wd, nil, args...)
				if out != "" {
					if err := os.WriteFile(filepath.Join(wd, out), stdout, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if args[0] == "uninject" {
					checkRoundTrip(t, line, rendered, stdout)
				}
			case w[0] == "kubectl" && len(w) > 2 && w[1] == "shutdown-manager":
				// The plugin reads a live cluster (the e2e runs it there): here, its command and flags.
				checkCommand(t, root, page, line, append([]string{"shutdown-manager", "kubectl"}, w[2:]...), nil, "")
			case w[0] == "kubectl" && slices.Contains(w, "-f"):
				f := w[slices.Index(w, "-f")+1]
				if !exists(filepath.Join(wd, f)) && !exists(filepath.Join(root, f)) {
					t.Errorf("%q: %s is neither written by a line above nor a file of this repository", line, f)
				}
			case w[0] == "kubectl" && slices.Contains(w, "patch"):
				checkPatch(t, line, w[slices.Index(w, "-p")+1])
			case w[0] == "kubectl" && slices.Contains(w, "label"):
				if got, want := w[len(w)-1], inject.LabelInject+"="+inject.InjectEnabled; got != want {
					t.Errorf("%q: the label is %s, not %s", line, got, want)
				}
			case w[0] == "kubectl" && slices.Contains(w, "rollout") && slices.Contains(w, "restart"):
			case w[0] == "helm" && w[1] == "install":
				checkHelm(t, root, line, w)
				checkReleaseImage(t, root, line, w)
			default:
				t.Errorf("%q: a command this test does not check: check it here or take it off the page", line)
			}
		}
	}
	if lines == 0 {
		t.Error("the page has no sh block: this test checks nothing")
	}
}

func exists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}

// checkRoundTrip: uninject's output holds the rendered file's objects (the status block inject adds to a
// workload that had none aside).
func checkRoundTrip(t *testing.T, line string, rendered, got []byte) {
	t.Helper()
	docs := func(b []byte) []map[string]any {
		var out []map[string]any
		for _, d := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(b), -1) {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(d), &m); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			if m == nil {
				continue
			}
			delete(m, "status")
			out = append(out, m)
		}
		return out
	}
	want, have := docs(rendered), docs(got)
	if len(want) != len(have) {
		t.Fatalf("%q: %d documents, the rendered file has %d", line, len(have), len(want))
	}
	for i := range want {
		a, _ := json.Marshal(want[i])
		b, _ := json.Marshal(have[i])
		if !bytes.Equal(a, b) {
			t.Errorf("%q: document %d is not the rendered file's:\n%s\nwant\n%s", line, i+1, b, a)
		}
	}
}

// checkPatch: a merge patch of a pod template's annotations (inject's takeover) or of automountServiceAccountToken.
func checkPatch(t *testing.T, line, patch string) {
	t.Helper()
	var p struct {
		Spec struct {
			Template struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
				Spec map[string]any `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(patch), &p); err != nil {
		t.Errorf("%q: the patch is not JSON: %v", line, err)
		return
	}
	for k, v := range p.Spec.Template.Metadata.Annotations {
		if k != inject.AnnotationTakeover || v != "true" {
			t.Errorf("%q: annotation %s: %q is not %s: \"true\"", line, k, v, inject.AnnotationTakeover)
		}
	}
	for k, v := range p.Spec.Template.Spec {
		if k != "automountServiceAccountToken" || v != true {
			t.Errorf("%q: pod spec field %s: %v, want automountServiceAccountToken: true only", line, k, v)
		}
	}
}

// checkReleaseImage: the page's `helm install` of the repository's chart (appVersion dev, which refuses to render
// without image.tag or image.digest) names the image the release workflow publishes for docsRelease, so the command
// works as written once that release is out.
func checkReleaseImage(t *testing.T, root, line string, w []string) {
	t.Helper()
	var values struct {
		Image struct{ Repository string } `json:"image"`
	}
	vb, err := os.ReadFile(filepath.Join(root, "charts/shutdown-manager/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(vb, &values); err != nil {
		t.Fatal(err)
	}
	repository, tag := values.Image.Repository, ""
	for i, a := range w {
		if a != "--set" || i+1 >= len(w) {
			continue
		}
		for _, kv := range strings.Split(w[i+1], ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "image.repository":
				repository = v
			case "image.tag":
				tag = v
			case "image.digest", "inject.image":
				t.Errorf("%q: sets %s: name the release by image.tag alone", line, k)
			}
		}
	}
	if got, want := repository+":"+tag, kubecli.ReleaseRepository+":"+docsRelease; got != want {
		t.Errorf("%q: the image is %s, want the release's %s (--set image.tag=%s)", line, got, want, docsRelease)
	}
}

// checkHelm: `helm install NAME charts/shutdown-manager …`, each --set a key of the chart's values.yaml.
func checkHelm(t *testing.T, root, line string, w []string) {
	t.Helper()
	if len(w) < 4 || w[3] != "charts/shutdown-manager" {
		t.Errorf("%q: not this repository's chart charts/shutdown-manager", line)
		return
	}
	vb, err := os.ReadFile(filepath.Join(root, "charts/shutdown-manager/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(vb, &values); err != nil {
		t.Fatal(err)
	}
	for i, a := range w {
		if a != "--set" || i+1 >= len(w) {
			continue
		}
		key, _, _ := strings.Cut(w[i+1], "=")
		var node any = values
		for _, k := range strings.Split(key, ".") {
			m, _ := node.(map[string]any)
			var ok bool
			if node, ok = m[k]; !ok {
				t.Errorf("%q: the chart has no value %s", line, key)
				break
			}
		}
	}
}

func checkYAML(t *testing.T, modDir, page string, rendered, takenOver []byte) {
	t.Helper()
	sources := [][]string{strings.Split(string(rendered), "\n"), strings.Split(string(takenOver), "\n")}
	bs := doctable.Blocks(page, "yaml")
	if len(bs) == 0 {
		t.Error("the page has no yaml block: this test checks nothing")
	}
	for _, b := range bs {
		if strings.Contains(b, "kind: EnvoyProxy") {
			checkEnvoyProxy(t, modDir, b)
			continue
		}
		if !isExcerpt(b, sources) {
			t.Errorf("yaml block is a run of lines of neither the peer's rendered file nor inject --takeover's output for it:\n%s", b)
		}
	}
}

// checkEnvoyProxy: every field of the block is in Envoy Gateway's EnvoyProxy CRD, and its pod labels and
// annotations are inject's opt-in and takeover.
func checkEnvoyProxy(t *testing.T, modDir, block string) {
	t.Helper()
	crdBytes, err := os.ReadFile(filepath.Join(modDir, envoyProxyCRD))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Group    string `json:"group"`
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(crdBytes, &crd); err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(block), &obj); err != nil {
		t.Fatalf("the EnvoyProxy block: %v", err)
	}
	var schema map[string]any
	for _, v := range crd.Spec.Versions {
		if obj["apiVersion"] == crd.Spec.Group+"/"+v.Name {
			schema = v.Schema.OpenAPIV3Schema
		}
	}
	if schema == nil {
		t.Fatalf("the EnvoyProxy block's apiVersion %v is not one the CRD serves", obj["apiVersion"])
	}
	spec, _ := obj["spec"].(map[string]any)
	props, _ := schema["properties"].(map[string]any)
	checkFields(t, "spec", spec, props["spec"])
	pod := dig(obj, "spec", "provider", "kubernetes", "envoyDeployment", "pod")
	labels, _ := dig(pod, "labels").(map[string]any)
	annotations, _ := dig(pod, "annotations").(map[string]any)
	if len(labels) != 1 || labels[inject.LabelInject] != inject.InjectEnabled {
		t.Errorf("the EnvoyProxy's pod labels are %v, want %s: %s", labels, inject.LabelInject, inject.InjectEnabled)
	}
	if len(annotations) != 1 || annotations[inject.AnnotationTakeover] != "true" {
		t.Errorf("the EnvoyProxy's pod annotations are %v, want %s: \"true\"", annotations, inject.AnnotationTakeover)
	}
}

// checkFields fails t for every field of v that the schema node does not have (an object's properties, or a map's
// additionalProperties).
func checkFields(t *testing.T, path string, v any, node any) {
	t.Helper()
	n, _ := node.(map[string]any)
	if n == nil {
		t.Errorf("%s: not in Envoy Gateway's EnvoyProxy CRD", path)
		return
	}
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	props, _ := n["properties"].(map[string]any)
	for k, child := range m {
		switch {
		case props[k] != nil:
			checkFields(t, path+"."+k, child, props[k])
		case n["additionalProperties"] != nil:
			checkFields(t, path+"."+k, child, n["additionalProperties"])
		default:
			t.Errorf("%s.%s: not in Envoy Gateway's EnvoyProxy CRD", path, k)
		}
	}
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/doctable"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
)

var update = flag.Bool("update", false, "rewrite this line's column of docs/compatibility.md from what the API server did")

// compatibilityDoc is the compatibility matrix: its Kubernetes table has one column per pinned line, written by
// TestFeatureMatrix from what that line's API server did (go test ./test/kube -run TestFeatureMatrix -update, once
// per line), and checked against it on every run, so that it cannot drift.
const compatibilityDoc = "docs/compatibility.md"

// A feature is one API the injected pods, the chart or the policy rely on, and how to see whether a server has it.
type feature struct {
	name  string
	probe func(t *testing.T, api *kubetest.APIServer) string // "yes", or what the server does instead, in one line
}

// storedField dry-runs (server side) a pod with the given spec fragment and returns what jsonpath reads of the pod
// the server would store, or the server's refusal.
func storedField(t *testing.T, api *kubetest.APIServer, name, spec, jsonpath string) string {
	t.Helper()
	pod := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: default}\nspec:\n%s", name, spec)
	file := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(file, []byte(pod), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := api.Command(t.Context(), "create", "--dry-run=server", "-f", file, "-o", "jsonpath="+jsonpath)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "refused (" + firstLineOf(string(out)) + ")"
	}
	return strings.TrimSpace(string(out))
}

// kept is what a feature's cell says of a field the server stores as given ("yes"), drops, or refuses.
func kept(stored, want string) string {
	switch stored {
	case want:
		return "yes"
	case "":
		return "no: accepted with the field dropped (feature gate off)"
	}
	return "no: " + stored
}

func firstLineOf(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

// storedAsWritten dry-runs (server side) the workload in file (one object) and compares the pod template the server
// would store with the file's: "yes" if every field written is stored with its value, else the fields it dropped.
// Lists of named objects (containers, volumes, mounts) are matched by name; the server's defaults are extra fields.
func storedAsWritten(t *testing.T, api *kubetest.APIServer, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	var in map[string]any
	if err := yaml.Unmarshal(b, &in); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	path := filepath.Join(t.TempDir(), filepath.Base(file))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	api.CreateNamespacesOf(t, path)
	var stdout, stderr bytes.Buffer
	cmd := api.Command(t.Context(), "create", "--dry-run=server", "-f", path, "-o", "json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "no: refused (" + firstLineOf(stderr.String()) + ")"
		}
		t.Fatal(err)
	}
	warned := "no warning"
	if w := strings.TrimSpace(stderr.String()); w != "" {
		warned = "kubectl: " + firstLineOf(w)
	}
	out := stdout.Bytes()
	var stored map[string]any
	if err := json.Unmarshal(out, &stored); err != nil {
		t.Fatal(err)
	}
	template := func(o map[string]any) any {
		spec, _ := o["spec"].(map[string]any)
		tmpl, _ := spec["template"].(map[string]any)
		return tmpl["spec"]
	}
	var dropped []string
	missing("spec.template.spec", template(in), template(stored), &dropped)
	if len(dropped) == 0 {
		return "yes"
	}
	return "no: accepted without `" + strings.Join(dropped, "`, `") + "`, " + warned
}

// missing appends to dropped the paths of want's fields that got lacks or holds with another value.
func missing(path string, want, got any, dropped *[]string) {
	switch w := want.(type) {
	case map[string]any:
		g, _ := got.(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(w)) {
			if _, ok := g[k]; !ok {
				*dropped = append(*dropped, path+"."+k)
				continue
			}
			missing(path+"."+k, w[k], g[k], dropped)
		}
	case []any:
		g, _ := got.([]any)
		for i, e := range w {
			m, _ := e.(map[string]any)
			name, named := m["name"].(string)
			if !named {
				if i >= len(g) {
					*dropped = append(*dropped, fmt.Sprintf("%s[%d]", path, i))
					continue
				}
				missing(fmt.Sprintf("%s[%d]", path, i), e, g[i], dropped)
				continue
			}
			j := slices.IndexFunc(g, func(x any) bool { m, _ := x.(map[string]any); return m["name"] == name })
			if j < 0 {
				*dropped = append(*dropped, path+"["+name+"]")
				continue
			}
			missing(path+"["+name+"]", e, g[j], dropped)
		}
	default:
		if fmt.Sprint(want) != fmt.Sprint(got) {
			*dropped = append(*dropped, path)
		}
	}
}

// modes are the injected workloads, one per mode and binary source: rows of the matrix beside the features.
var modes = []struct{ name, file string }{
	{"hook mode (`deploy/hook`)", "deploy/hook/envoy.yaml"},
	{"sidecar mode, native sidecar (`deploy/sidecar`)", "deploy/sidecar/envoy.yaml"},
	{"agent mode (`deploy/agent`)", "deploy/agent/envoy.yaml"},
	{"hook mode, `--binary-from=image-volume` (inject's golden `hook-image-volume`)", "internal/manifest/testdata/hook-image-volume.out.yaml"},
	{"agent mode, `--binary-from=image-volume` (inject's golden `agent-image-volume`)", "internal/manifest/testdata/agent-image-volume.out.yaml"},
}

var features = []feature{{
	name: "native sidecar (init container `restartPolicy: Always`): sidecar mode",
	probe: func(t *testing.T, api *kubetest.APIServer) string {
		return kept(storedField(t, api, "sidecar", "  initContainers: [{name: m, image: m, restartPolicy: Always}]\n  containers: [{name: envoy, image: e}]\n",
			"{.spec.initContainers[0].restartPolicy}"), "Always")
	},
}, {
	name: "preStop `sleep` action: the chart's webhook Deployment",
	probe: func(t *testing.T, api *kubetest.APIServer) string {
		return kept(storedField(t, api, "sleep", "  containers: [{name: envoy, image: e, lifecycle: {preStop: {sleep: {seconds: 5}}}}]\n",
			"{.spec.containers[0].lifecycle.preStop.sleep.seconds}"), "5")
	},
}, {
	name: "image volume (`volumes[].image`): `--binary-from=image-volume`",
	probe: func(t *testing.T, api *kubetest.APIServer) string {
		// What the server stores of the volume and of Envoy's mount of it, as inject writes them.
		got := storedField(t, api, "imagevolume",
			"  volumes: [{name: b, image: {reference: example.invalid/m:1, pullPolicy: IfNotPresent}}]\n  containers: [{name: envoy, image: e, volumeMounts: [{name: b, mountPath: /b}]}]\n",
			`{.spec.volumes[?(@.name=="b")].image.reference} {.spec.containers[0].volumeMounts[?(@.name=="b")].mountPath}`)
		switch got {
		case "example.invalid/m:1 /b":
			return "yes"
		case "":
			return "no: accepted with the volume and Envoy's mount of it dropped, without a warning (ImageVolume feature gate off)"
		}
		return "no: " + got
	},
}, {
	name: "MutatingAdmissionPolicy `admissionregistration.k8s.io/v1`: `policy`, the chart's `mode=policy`",
	probe: func(t *testing.T, api *kubetest.APIServer) string {
		out, err := api.Command(t.Context(), "get", "--raw", "/apis/admissionregistration.k8s.io/v1").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get --raw /apis/admissionregistration.k8s.io/v1: %v: %s", err, out)
		}
		var list struct{ Resources []struct{ Name string } }
		if err := json.Unmarshal(out, &list); err != nil {
			t.Fatalf("decoding the API group's resources: %v", err)
		}
		for _, r := range list.Resources {
			if r.Name == "mutatingadmissionpolicies" {
				return "yes"
			}
		}
		// Not in discovery: what the server says to one who applies a policy anyway.
		out, err = api.Command(t.Context(), "create", "--dry-run=server", "-f", filepath.Join(repoRoot, "deploy/policy/policy.yaml")).CombinedOutput()
		if err == nil {
			t.Fatalf("the server does not list mutatingadmissionpolicies in admissionregistration.k8s.io/v1, yet took deploy/policy/policy.yaml:\n%s", out)
		}
		if m := noMatchesRE.FindString(string(out)); m != "" {
			return "no: not served (kubectl: " + m + ")"
		}
		return "no: not served (kubectl: " + firstLineOf(string(out)) + ")"
	},
}}

// noMatchesRE is kubectl's words for a kind the server does not serve.
var noMatchesRE = regexp.MustCompile(`no matches for kind "[^"]+" in version "[^"]+"`)

// handColumns are the columns of the Kubernetes table written by hand (the feature, what it needs and where the
// project refuses it); every other column is one pinned line's, written by TestFeatureMatrix.
var handColumns = []string{"feature", "needs; refused by"}

// TestFeatureMatrix probes the running API server for every feature and compares the answers with this line's
// column of the compatibility matrix.
func TestFeatureMatrix(t *testing.T) {
	api := kubetest.Start(t)
	version := api.Version(t)
	column := fmt.Sprintf("%s (%s)", strings.TrimPrefix(version.Server, "v"), kubetest.Line())
	got := map[string]string{}
	for _, f := range features {
		got[f.name] = f.probe(t, api)
		t.Logf("%s on %s: %s", f.name, version.Server, got[f.name])
	}
	for _, m := range modes {
		got[m.name] = storedAsWritten(t, api, m.file)
		t.Logf("%s on %s: %s", m.name, version.Server, got[m.name])
	}
	path := filepath.Join(repoRoot, compatibilityDoc)
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// One column per pinned line, no other: a line no longer pinned loses its column (with -update) or fails the test.
	lines := map[string]bool{}
	for _, l := range kubetest.Lines {
		v, err := kubetest.PinnedVersionOf(l)
		if err != nil {
			t.Fatal(err)
		}
		lines[fmt.Sprintf("%s (%s)", strings.TrimPrefix(v, "v"), l)] = true
	}
	if !lines[column] {
		t.Fatalf("the server is Kubernetes %s, not the %s line's %v", version.Server, kubetest.Line(), lines)
	}
	text, err := doctable.KeepColumns(string(doc), "| feature |", func(c string) bool { return lines[c] || slices.Contains(handColumns, c) })
	if err != nil {
		t.Fatal(err)
	}
	text, err = doctable.SetColumn(text, "| feature |", column, got)
	if err != nil {
		t.Fatal(err)
	}
	if text == string(doc) {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: column %q rewritten", compatibilityDoc, column)
		return
	}
	t.Errorf("%s does not say what Kubernetes %s did (column %q), or has a line no longer pinned; `go test ./test/kube -run TestFeatureMatrix -update` with %s=%s rewrites it. What the server did:\n%v",
		compatibilityDoc, version.Server, column, kubetest.EnvLine, kubetest.Line(), got)
}

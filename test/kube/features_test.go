package kube

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

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

package kube

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
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

// storedField dry-runs (server side) a pod with the given spec fragment and reads back a field of what the server
// would store: "yes" if the field is kept, the server's answer otherwise.
func storedField(t *testing.T, api *kubetest.APIServer, name, spec, jsonpath string) string {
	t.Helper()
	pod := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: default}\nspec:\n%s", name, spec)
	file := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(file, []byte(pod), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := api.Command(t.Context(), "create", "--dry-run=server", "-f", file, "-o", "jsonpath="+jsonpath)
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		return "no: refused (" + firstLineOf(string(out)) + ")"
	case strings.TrimSpace(string(out)) == "":
		return "no: accepted with the field dropped (feature gate off)"
	}
	return "yes"
}

func firstLineOf(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

var features = []feature{{
	name: "native sidecar (init container `restartPolicy: Always`): sidecar mode",
	probe: func(t *testing.T, api *kubetest.APIServer) string {
		return storedField(t, api, "sidecar", "  initContainers: [{name: m, image: m, restartPolicy: Always}]\n  containers: [{name: envoy, image: e}]\n",
			"{.spec.initContainers[0].restartPolicy}")
	},
}, {
	name: "preStop `sleep` action: the chart's webhook Deployment",
	probe: func(t *testing.T, api *kubetest.APIServer) string {
		return storedField(t, api, "sleep", "  containers: [{name: envoy, image: e, lifecycle: {preStop: {sleep: {seconds: 5}}}}]\n",
			"{.spec.containers[0].lifecycle.preStop.sleep.seconds}")
	},
}, {
	name: "image volume (`volumes[].image`): `--binary-from=image-volume`",
	probe: func(t *testing.T, api *kubetest.APIServer) string {
		return storedField(t, api, "imagevolume",
			"  volumes: [{name: b, image: {reference: example.invalid/m:1, pullPolicy: IfNotPresent}}]\n  containers: [{name: envoy, image: e, volumeMounts: [{name: b, mountPath: /b}]}]\n",
			"{.spec.volumes[0].image.reference}")
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
		return "no: not served (kubectl: no matches for kind \"MutatingAdmissionPolicy\" in version \"admissionregistration.k8s.io/v1\")"
	},
}}

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
	text, err := doctable.SetColumn(string(doc), "| feature |", column, got)
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
	t.Errorf("%s does not say what Kubernetes %s did (column %q); `go test ./test/kube -run TestFeatureMatrix -update` with %s=%s rewrites it. What the server did:\n%v",
		compatibilityDoc, version.Server, column, kubetest.EnvLine, kubetest.Line(), got)
}

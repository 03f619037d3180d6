package docs

import (
	"os/exec"
	"strings"
	"testing"
)

// kubernetesModules are the prefixes of the import paths of the Kubernetes API types and clients (and of the
// JSON patch library the webhook diffs pods with): what only the cluster side may link.
var kubernetesModules = []string{"k8s.io/", "sigs.k8s.io/", "gomodules.xyz/"}

// kubernetesDeps are the packages of kubernetesModules that pkg is built from, each with the package of this
// module or another module that imports it first (go list -deps: dependencies before dependents).
func kubernetesDeps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	importedBy := map[string]string{}
	var found []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if importedBy[imp] == "" {
				importedBy[imp] = f[0]
			}
		}
		for _, prefix := range kubernetesModules {
			if strings.HasPrefix(f[0], prefix) || strings.Contains(f[0], "/client-go/") {
				found = append(found, f[0])
				break
			}
		}
	}
	for i, p := range found {
		found[i] = p + " (imported by " + importedBy[p] + ")"
	}
	return found
}

// TestPodBinaryLinksNoKubernetes: the binary in every Envoy pod (cmd/shutdown-manager-pod) is built from no
// package of k8s.io/, sigs.k8s.io/ or a Kubernetes client; the full CLI is (the check sees them when there).
func TestPodBinaryLinksNoKubernetes(t *testing.T) {
	if deps := kubernetesDeps(t, "../../cmd/shutdown-manager-pod"); len(deps) > 0 {
		t.Errorf("the pod binary links %d Kubernetes packages:\n  %s", len(deps), strings.Join(deps, "\n  "))
	}
	if deps := kubernetesDeps(t, "../../cmd/shutdown-manager"); len(deps) == 0 {
		t.Error("the full CLI links no Kubernetes package either: this check sees nothing")
	}
}

package docs

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// kubernetesModules are the prefixes of the import paths of the Kubernetes API types and clients (and of the
// JSON patch library the webhook diffs pods with): what only the cluster side may link.
var kubernetesModules = []string{"k8s.io/", "sigs.k8s.io/", "gomodules.xyz/"}

// imageModules are the prefixes of the import paths of the image tooling: go-containerregistry and the Docker
// client code it brings (credential helpers). The module needs them to build and push its images (internal/image,
// `make image`, `make release`) and in the tests that pull from a registry; no shipped binary may link them.
var imageModules = []string{"github.com/google/go-containerregistry/", "github.com/docker/"}

// kubernetesDeps are the packages of kubernetesModules (or of any client-go) that pkg is built from (see deps).
func kubernetesDeps(t *testing.T, pkg string) []string {
	t.Helper()
	return deps(t, pkg, func(p string) bool { return hasPrefix(p, kubernetesModules) || strings.Contains(p, "/client-go/") })
}

// hasPrefix reports whether path starts with one of prefixes.
func hasPrefix(path string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(prefix string) bool { return strings.HasPrefix(path, prefix) })
}

// deps are the packages pkg is built from whose import path match accepts, each with the package of this module
// or another module that imports it first (go list -deps: dependencies before dependents).
func deps(t *testing.T, pkg string, match func(path string) bool) []string {
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
		if match(f[0]) {
			found = append(found, f[0])
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

// TestShippedBinariesLinkNoImageTooling: go-containerregistry is in go.mod for the image build and the e2e's
// registry, not for users: neither binary a release ships (the pod binary, the full CLI) is built from it, so it
// is in no image and, since the SBOM lists what each binary's build information records, in no SBOM either.
// This is why it stays in the one module (issue 26 asked to move it to a module of its own; the test pins what the
// move would have protected). The image build itself must link it: the check sees it there.
func TestShippedBinariesLinkNoImageTooling(t *testing.T) {
	for _, main := range []string{"../../cmd/shutdown-manager-pod", "../../cmd/shutdown-manager"} {
		if d := deps(t, main, func(p string) bool { return hasPrefix(p, imageModules) }); len(d) > 0 {
			t.Errorf("%s links %d packages of the image tooling:\n  %s", main, len(d), strings.Join(d, "\n  "))
		}
	}
	if d := deps(t, "../../internal/image/build", func(p string) bool { return hasPrefix(p, imageModules) }); len(d) == 0 {
		t.Error("the image build links no go-containerregistry package either: this check sees nothing")
	}
}

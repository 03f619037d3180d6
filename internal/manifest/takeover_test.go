package manifest

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
)

// TestTakeoverPeersManifests: every Envoy workload Contour and Envoy Gateway render (read from their Go modules),
// through the manifests as `inject --takeover | uninject` does, gives back the very object (internal/inject's
// TestTakeoverPeers takes the typed objects over).
func TestTakeoverPeersManifests(t *testing.T) {
	for _, w := range peers.Workloads(t) {
		t.Run(w.Source, func(t *testing.T) {
			original := decodeWorkload(t, w)
			given := "" // --admin-address, where the takeover must refuse without it
			if w.EnvoyRefuses() {
				given = "http://127.0.0.1:19000"
			}
			out, err := Manifests(w.YAML, injectFunc(inject.Config{Image: "x", Takeover: true, AdminAddress: given}), &strings.Builder{})
			if err != nil {
				t.Fatal(err)
			}
			back, err := Manifests(out, inject.Uninject, &strings.Builder{})
			if err != nil {
				t.Fatal(err)
			}
			if got := decodeWorkload(t, peers.Workload{Kind: w.Kind, YAML: back}); !equality.Semantic.DeepEqual(got, original) {
				t.Errorf("inject --takeover | uninject is not the manifest")
			}
		})
	}
}

func decodeWorkload(t *testing.T, w peers.Workload) any {
	t.Helper()
	wl, ok := LookupWorkload("apps/v1", w.Kind)
	if !ok {
		t.Fatalf("%s: kind %s", w.Source, w.Kind)
	}
	obj := wl.New()
	if err := yaml.UnmarshalStrict(w.YAML, obj); err != nil {
		t.Fatalf("%s: %v", w.Source, err)
	}
	return obj
}

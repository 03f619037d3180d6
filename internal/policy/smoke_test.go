package policy

import (
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

func TestSmoke(t *testing.T) {
	for _, m := range []inject.Mode{inject.ModeHook, inject.ModeSidecar, inject.ModeAgent} {
		p, b, err := Generate(inject.Config{Image: "x:1", Version: "v1", Mode: m})
		if err != nil {
			t.Fatal(err)
		}
		y, err := YAML(p, b[0], b[1])
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", y)
	}
}

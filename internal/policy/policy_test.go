package policy

import (
	"os"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// TestGenerateEverySetting: every combination of inject's settings gives a policy (the probes of inject
// find nothing the policy cannot reproduce), written as YAML that reads back to the same objects.
func TestGenerateEverySetting(t *testing.T) {
	for _, mode := range []inject.Mode{inject.ModeHook, inject.ModeSidecar, inject.ModeAgent} {
		for _, from := range []inject.BinaryFrom{inject.BinaryCopy, inject.BinaryImageVolume} {
			for _, hook := range []inject.Hook{inject.HookExec, inject.HookHTTP} {
				for _, kind := range []inject.SidecarKind{inject.SidecarNative, inject.SidecarPlain} {
					cfg := inject.Config{Image: "example.invalid/sm:1", Version: "1", Mode: mode, BinaryFrom: from, Hook: hook, SidecarKind: kind}
					p, b, err := Generate(cfg)
					if err != nil {
						t.Errorf("%+v: %v", cfg, err)
						continue
					}
					out, err := YAML(p, b[0], b[1])
					if err != nil {
						t.Fatal(err)
					}
					docs := strings.Split(string(out), "---\n")
					if len(docs) != 3 {
						t.Fatalf("%d YAML documents, want 3", len(docs))
					}
					var back admissionv1.MutatingAdmissionPolicy
					if err := yaml.UnmarshalStrict([]byte(docs[0]), &back); err != nil {
						t.Fatal(err)
					}
					if back.Spec.Mutations[0].JSONPatch.Expression != p.Spec.Mutations[0].JSONPatch.Expression {
						t.Errorf("%+v: the expression does not survive YAML", cfg)
					}
				}
			}
		}
	}
}

// TestGenerateRefusesBadSettings: settings inject refuses give no policy.
func TestGenerateRefusesBadSettings(t *testing.T) {
	for _, cfg := range []inject.Config{
		{},
		{Image: "x", Mode: "daemon"},
		{Image: "x", Drain: inject.Drain{Count: "bytes"}},
		// The sidecar would need the volume of each pod's Envoy that holds the socket (inject's adminSocketMount).
		{Image: "x", Mode: inject.ModeSidecar, AdminAddress: "unix:///var/run/envoy/admin.sock"},
	} {
		if _, _, err := Generate(cfg); err == nil {
			t.Errorf("Generate(%+v) = nil error, want inject's refusal", cfg)
		}
	}
}

// TestMatchConditionsAreRefusals: every matchCondition is a documented refusal (docs/install.md lists them).
func TestMatchConditionsAreRefusals(t *testing.T) {
	p, _, err := Generate(inject.Config{Image: "x", Mode: inject.ModeSidecar, Hook: inject.HookHTTP})
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := Generate(inject.Config{Image: "x", Mode: inject.ModeAgent})
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, r := range Refusals {
		documented[r.Name] = true
	}
	for _, c := range append(p.Spec.MatchConditions, a.Spec.MatchConditions...) {
		if !documented[c.Name] {
			t.Errorf("matchCondition %s is not in Refusals", c.Name)
		}
	}
}

// TestRefusalsInReadme: the table of docs/install.md (the policy's section, moved there from the README) names
// every refusal.
func TestRefusalsInReadme(t *testing.T) {
	readme, err := os.ReadFile("../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Refusals {
		if !strings.Contains(string(readme), "| `"+r.Name+"` |") {
			t.Errorf("docs/install.md's MutatingAdmissionPolicy table has no row for %s (%s)", r.Name, r.Why)
		}
	}
}

package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// TestInjectValuesCarryDrainSettings: every row of inject.DrainSettings is a value inject.<row.ChartValue()> of
// values.yaml and of the schema (whose enum, for a row with values, is the row's values and ""), and the chart
// passes it to the webhook as inject's flag --<row.Name>: rendered with every row set to its example, the
// webhook's arguments hold each one.
func TestInjectValuesCarryDrainSettings(t *testing.T) {
	raw, err := os.ReadFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Inject map[string]any `json:"inject"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	rawSchema, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Inject struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"inject"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(rawSchema, &schema); err != nil {
		t.Fatal(err)
	}

	set := map[string]any{}
	var want []string
	for _, d := range inject.DrainSettings {
		key := d.ChartValue()
		if _, ok := values.Inject[key]; !ok {
			t.Errorf("values.yaml has no inject.%s (inject.DrainSettings row %s)", key, d.Name)
		}
		prop, ok := schema.Properties.Inject.Properties[key]
		if !ok {
			t.Errorf("values.schema.json has no inject.%s", key)
		}
		if d.Values != nil && !slices.Equal(prop.Enum, append([]string{""}, d.Values...)) {
			t.Errorf("values.schema.json's inject.%s allows %q, want %q (the row's values and empty)", key, prop.Enum, append([]string{""}, d.Values...))
		}
		switch d.Kind {
		case inject.KindList:
			set[key] = []string{d.Example}
		case inject.KindCount:
			n, err := strconv.Atoi(d.Example)
			if err != nil {
				t.Fatal(err)
			}
			set[key] = n
		default:
			set[key] = d.Example
		}
		want = append(want, "--"+d.Name+"="+d.Example)
	}
	// The token, inject's setting rather than the drain's (sidecar mode with the http hook, which Validate checks
	// in the webhook, not here).
	set["tokenSecret"] = "envoy-drain-token"
	want = append(want, "--token-secret=envoy-drain-token")
	// The load balancer's deregistration delay, inject's too.
	set["deregistrationDelay"] = "120s"
	want = append(want, "--deregistration-delay=120s")
	b, err := yaml.Marshal(map[string]any{"inject": set})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "settings.yaml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}

	h := newHelm(t)
	out := h.must(t, "template", "shutdown-manager", h.chart, "--namespace", namespace, "--values", file)
	var args []string
	for _, o := range objects(t, out) {
		if o.Kind != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := yaml.Unmarshal(o.doc, &d); err != nil {
			t.Fatal(err)
		}
		args = d.Spec.Template.Spec.Containers[0].Args
	}
	for _, w := range want {
		if !slices.Contains(args, w) {
			t.Errorf("the webhook's arguments lack %s: %q", w, args)
		}
	}
}

package docs

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/doctable"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/podenv"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/webhook"
)

const observabilityPage = "docs/observability-alerts.md"

// TestObservabilityPage: docs/observability-alerts.md against what it describes. Its YAML blocks are excerpts of
// the chart's monitoring value set (test/chart renders it) and of docs/examples/loki-rules.yaml; its alert table
// names exactly the chart's alerts, and each metric it names is registered in the code (or is the API server's);
// the log line it shows is the drain's (message and fields as internal/drain writes them), and the Loki rule
// reads that line; the variables and Event reasons it names are the code's. Its ```sh block is run by test/kube
// (TestEventsDescribePod).
func TestObservabilityPage(t *testing.T) {
	page := readRepo(t, observabilityPage)
	lokiFile := "docs/examples/loki-rules.yaml"
	sources := map[string]string{
		"test/chart/testdata/values/monitoring.yaml": readRepo(t, "test/chart/testdata/values/monitoring.yaml"),
		lokiFile: readRepo(t, lokiFile),
	}
	var lines [][]string
	for _, s := range sources {
		lines = append(lines, strings.Split(s, "\n"))
	}
	yamlBlocks := doctable.Blocks(page, "yaml")
	if len(yamlBlocks) != 2 {
		t.Errorf("%d yaml blocks, want 2 (the values, the Loki rule)", len(yamlBlocks))
	}
	for _, b := range yamlBlocks {
		if !isExcerpt(b, lines) {
			t.Errorf("yaml block is not a run of lines of %v:\n%s", slices.Sorted(maps.Keys(sources)), b)
		}
	}

	// The alerts: the page's table and the chart's PrometheusRule name the same ones.
	rule := readRepo(t, "charts/shutdown-manager/templates/monitoring-prometheusrule.yaml")
	alertName := regexp.MustCompile(`alert: (ShutdownManager\w+)`)
	var chartAlerts []string
	for _, m := range alertName.FindAllStringSubmatch(rule, -1) {
		chartAlerts = append(chartAlerts, m[1])
	}
	table := section(t, page, "## The alerts (PrometheusRule)")
	var pageAlerts []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(ShutdownManager\\w+)`").FindAllStringSubmatch(table, -1) {
		pageAlerts = append(pageAlerts, m[1])
	}
	slices.Sort(chartAlerts)
	slices.Sort(pageAlerts)
	if len(chartAlerts) == 0 || !slices.Equal(chartAlerts, pageAlerts) {
		t.Errorf("the page's alert table names %v, the chart's PrometheusRule %v", pageAlerts, chartAlerts)
	}

	// The metrics it names are registered (a Name: literal or constant in internal/), or are the API server's.
	registered := map[string]bool{}
	for _, f := range []string{"internal/drain/metrics.go", "internal/server/server.go", "internal/manager/stack.go", "internal/webhook/metrics.go", "internal/webhook/audit.go"} {
		for _, m := range regexp.MustCompile(`"(shutdown_manager_[a-z_]+)"`).FindAllStringSubmatch(readRepo(t, f), -1) {
			registered[m[1]] = true
		}
	}
	for _, m := range regexp.MustCompile(`\b(shutdown_manager_[a-z_]+|apiserver_[a-z_]+)\b`).FindAllStringSubmatch(page, -1) {
		name := m[1]
		if strings.HasPrefix(name, "apiserver_") {
			if name != "apiserver_admission_webhook_fail_open_count" && name != "apiserver_admission_webhook_rejection_count" {
				t.Errorf("the page names the API server's %s, which no test reads from a real API server", name)
			}
			continue
		}
		if !registered[name] {
			t.Errorf("the page names %s, which the code does not register", name)
		}
	}

	// The log line: the drain's "drain finished", with the fields the page and the Loki rule read.
	seq := readRepo(t, "internal/drain/sequence.go")
	if !strings.Contains(seq, `level("drain finished", "outcome", string(res.Outcome)`) {
		t.Error(`internal/drain/sequence.go no longer logs "drain finished" with outcome: update the page, the Loki rule and this test`)
	}
	text := doctable.Blocks(page, "text")
	if len(text) != 1 {
		t.Fatalf("%d text blocks, want 1 (the log line)", len(text))
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(text[0]), &line); err != nil {
		t.Fatalf("the log line is not JSON: %v", err)
	}
	if line["msg"] != "drain finished" || line["outcome"] == nil || line["level"] == nil {
		t.Errorf("the log line %v is not a drain's drain finished line", line)
	}
	var outcomes []string
	for _, o := range drain.Outcomes {
		outcomes = append(outcomes, string(o))
	}
	if o, _ := line["outcome"].(string); !slices.Contains(outcomes, o) {
		t.Errorf("the log line's outcome %q is not one of %v", o, outcomes)
	}
	var loki struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict([]byte(sources[lokiFile]), &loki); err != nil {
		t.Fatalf("%s: %v", lokiFile, err)
	}
	if len(loki.Groups) != 1 || len(loki.Groups[0].Rules) != 1 {
		t.Fatalf("%s: want one group of one rule", lokiFile)
	}
	expr := loki.Groups[0].Rules[0].Expr
	for _, want := range []string{`|= "drain finished"`, `| json`, `outcome=~"` + string(drain.OutcomeTimeout) + `|` + string(drain.OutcomeError) + `|` + string(drain.OutcomeMisconfigured) + `"`} {
		if !strings.Contains(expr, want) {
			t.Errorf("%s: the expression does not have %s", lokiFile, want)
		}
	}

	// The names of the code.
	for _, want := range []string{podenv.Name, podenv.Namespace, podenv.UID, events.ReasonDrainStarted, events.ReasonDrained,
		events.ReasonDrainTimedOut, events.ReasonEnvoyGone, events.ReasonDrainFailed, events.ReasonDrainCanceled, events.ReasonAdminMisconfigured,
		webhook.ReasonNotInjected, "namespaces.shutdown-manager.io", "pods.shutdown-manager.io"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page does not name %s", want)
		}
	}
	for _, name := range []string{"namespaces.shutdown-manager.io", "pods.shutdown-manager.io"} {
		if !strings.Contains(readRepo(t, "charts/shutdown-manager/templates/webhook-admission.yaml"), `"name" "`+name+`"`) {
			t.Errorf("the chart's webhooks are no longer named %s: update the page and the rules", name)
		}
	}
}

package manager

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/server"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/webhook"
)

var updateMetrics = flag.Bool("update", false, "rewrite the generated metrics reference of docs/observability.md")

// observabilityPage holds the generated metrics reference.
const observabilityPage = "../../docs/observability.md"

// recorder is a Registerer that keeps what is registered on it, so that every metric's description can be
// read, including vectors that have no sample yet (which a Gather leaves out).
type recorder struct{ collectors []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return nil
}
func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	r.collectors = append(r.collectors, cs...)
}
func (r *recorder) Unregister(prometheus.Collector) bool { return false }

var descRE = regexp.MustCompile(`^Desc\{fqName: "([^"]*)", help: "((?:[^"\\]|\\.)*)", (?:unit: "[^"]*", )?constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

// metricRows are the project's own metrics registered on r (the Go runtime's and the process's left out),
// one Markdown row each, sorted by name.
func metricRows(t *testing.T, r *recorder) []string {
	t.Helper()
	var rows []string
	for _, c := range r.collectors {
		ch := make(chan *prometheus.Desc, 64)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the description %s", d)
			}
			if !strings.HasPrefix(m[1], "shutdown_manager_") {
				continue
			}
			var labels []string
			for _, l := range []string{m[3], m[4]} {
				for _, kv := range strings.Split(l, ",") {
					if kv = strings.TrimSpace(kv); kv != "" {
						labels = append(labels, "`"+strings.SplitN(kv, "=", 2)[0]+"`")
					}
				}
			}
			help := strings.NewReplacer(`\"`, `"`, `\\`, `\`, "|", `\|`).Replace(m[2])
			rows = append(rows, fmt.Sprintf("| `%s` | %s | %s |", m[1], strings.Join(labels, ", "), help))
		}
	}
	slices.Sort(rows)
	return rows
}

// metricsReference registers the metrics as serve and run do (newStack's build info, the engine's, the API's)
// and as the webhook does, and writes one table for each.
func metricsReference(t *testing.T) string {
	drainSide := &recorder{}
	drainSide.MustRegister(server.BuildInfo("VERSION"))
	drain.NewMetrics(drainSide)
	server.New(nil, server.Options{Registerer: drainSide})
	webhookSide := &recorder{}
	webhook.New(webhook.Options{Registerer: webhookSide})
	webhookSide.MustRegister(server.BuildInfo("VERSION"), webhook.CertExpiry(webhook.NewCertFiles("", "", slog.New(slog.DiscardHandler)))) // as runWebhook registers them
	// with --audit-interval above 0 (the default):
	webhook.NewAuditor(nil, webhook.AuditConfig{}, nil, webhookSide)
	var b strings.Builder
	b.WriteString("\n`serve` and `run` (on `/metrics` of `--listen`, or of `--metrics-listen`):\n\n| metric | labels | help |\n|---|---|---|\n")
	b.WriteString(strings.Join(metricRows(t, drainSide), "\n") + "\n")
	b.WriteString("\n`webhook` (on `/metrics` of `--health-listen`):\n\n| metric | labels | help |\n|---|---|---|\n")
	b.WriteString(strings.Join(metricRows(t, webhookSide), "\n") + "\n")
	return b.String()
}

// TestMetricsReference: the metrics reference of docs/observability.md is the one generated from what the
// drain side and the webhook register; a metric added, removed, relabelled or re-described without the page
// fails here. `go test ./internal/manager -run TestMetricsReference -update` rewrites it.
func TestMetricsReference(t *testing.T) {
	const begin, end = "<!-- BEGIN generated metrics: go test ./internal/manager -run TestMetricsReference -update -->", "<!-- END generated metrics -->"
	data, err := os.ReadFile(observabilityPage)
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	i, j := strings.Index(page, begin+"\n"), strings.Index(page, "\n"+end)
	if i < 0 || j < i {
		t.Fatalf("%s has no lines %q ... %q", observabilityPage, begin, end)
	}
	want := page[:i+len(begin)+1] + strings.TrimPrefix(metricsReference(t), "\n") + page[j:]
	if want == page {
		return
	}
	if *updateMetrics {
		if err := os.WriteFile(observabilityPage, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the metrics reference of %s is not what the code registers: run go test ./internal/manager -run TestMetricsReference -update and review the diff", observabilityPage)
}

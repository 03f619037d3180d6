package chart

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/server"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/webhook"
)

// The monitoring objects (values monitoring.*): every metric their expressions name is one the code registers (or
// the API server's, which test/kube reads from a real kube-apiserver), with labels it has and label values it
// sets, and every expression parses (promql_test.go says how far that check goes).

// metricInfo is what the check knows of one metric family: its series' label names, and for some labels the
// only values the code sets.
type metricInfo struct {
	labels []string
	values map[string][]string
}

// capture is a Registerer that keeps what is registered, so that the descriptors of the code's metrics can be
// read without running the commands that serve them.
type capture struct{ collectors []prometheus.Collector }

func (c *capture) Register(col prometheus.Collector) error {
	c.collectors = append(c.collectors, col)
	return nil
}

func (c *capture) MustRegister(cols ...prometheus.Collector) {
	c.collectors = append(c.collectors, cols...)
}

func (c *capture) Unregister(prometheus.Collector) bool { return false }

var descFields = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", help: ".*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

// codeMetrics are the metrics the code registers: the drain engine's (drain.NewMetrics), the sidecar's API
// (server.New), the webhook's (webhook.New, webhook.CertExpiry and its audit's webhook.NewAuditor), and
// shutdown_manager_build_info (server.BuildInfo, which every long-running command registers), each read from its
// collectors' descriptors.
func codeMetrics(t *testing.T) map[string]metricInfo {
	t.Helper()
	c := &capture{}
	drain.NewMetrics(c)
	server.New(nil, server.Options{Registerer: c})
	webhook.New(webhook.Options{Registerer: c})
	c.MustRegister(webhook.CertExpiry(webhook.NewCertFiles("", "", nil)), server.BuildInfo("VERSION"))
	webhook.NewAuditor(nil, webhook.AuditConfig{}, nil, c)
	known := map[string]metricInfo{}
	for _, col := range c.collectors {
		descs := make(chan *prometheus.Desc, 16)
		go func() { col.Describe(descs); close(descs) }()
		for d := range descs {
			m := descFields.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the descriptor %s", d)
			}
			var labels []string
			for _, part := range []string{m[2], m[3]} {
				for l := range strings.SplitSeq(part, ",") {
					if name, _, _ := strings.Cut(l, "="); name != "" {
						labels = append(labels, name)
					}
				}
			}
			known[m[1]] = metricInfo{labels: labels}
		}
	}

	enum := func(name, label string, values []string) {
		info, ok := known[name]
		if !ok {
			t.Fatalf("no metric %s registered", name)
		}
		if info.values == nil {
			info.values = map[string][]string{}
		}
		info.values[label] = values
		known[name] = info
	}
	enum("shutdown_manager_drains_total", "outcome", strs(drain.Outcomes))
	enum("shutdown_manager_drain_phase", "phase", strs(drain.Phases))
	enum("shutdown_manager_webhook_requests_total", "outcome", strs(webhook.Outcomes))
	enum("shutdown_manager_webhook_audits_total", "outcome", webhook.AuditOutcomes)
	return known
}

func strs[S ~string](xs []S) []string {
	var out []string
	for _, x := range xs {
		out = append(out, string(x))
	}
	return out
}

// apiserverMetrics are the kube-apiserver's metrics the rules and dashboard use, with their labels. test/kube's
// TestWebhook (fail-open) and TestWebhookSidecarServiceAccount (rejection) read them from a real kube-apiserver.
var apiserverMetrics = map[string]metricInfo{
	"apiserver_admission_webhook_fail_open_count": {labels: []string{"name", "type"}},
	"apiserver_admission_webhook_rejection_count": {labels: []string{"name", "type", "operation", "error_type", "rejection_code"}},
}

// targetLabels are the labels Prometheus (the Prometheus Operator's ServiceMonitor and PodMonitor) adds to
// every series it scrapes.
var targetLabels = []string{"namespace", "pod", "container", "service", "endpoint", "job", "instance"}

// series resolves a series name to its family: a histogram's _bucket (with le), _sum and _count.
func series(known map[string]metricInfo, name string) (metricInfo, bool) {
	if info, ok := known[name]; ok {
		return info, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if info, ok := known[base]; ok {
				if suffix == "_bucket" {
					info.labels = append(slices.Clone(info.labels), "le")
				}
				return info, true
			}
		}
	}
	return metricInfo{}, false
}

// monitoringExprs renders the monitoring value set and returns each expression of the PrometheusRule and of the
// dashboard, by where it is.
func monitoringExprs(t *testing.T) map[string]string {
	t.Helper()
	h := newHelm(t)
	var vs valueSet
	for _, v := range valueSets {
		if v.name == "monitoring" {
			vs = v
		}
	}
	objs := objects(t, h.must(t, vs.templateArgs(h.chart)...))
	exprs := map[string]string{}

	var rule struct {
		Spec struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Alert       string            `json:"alert"`
					Expr        string            `json:"expr"`
					For         string            `json:"for,omitempty"`
					Labels      map[string]string `json:"labels"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
	}
	only(t, objs, "PrometheusRule", &rule)
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %q of group %s: an alert needs a name, a severity and a summary", r.Alert, g.Name)
			}
			exprs["alert "+r.Alert] = r.Expr
		}
	}

	var cm struct {
		Data map[string]string `json:"data"`
	}
	for _, o := range objs {
		if o.Kind == "ConfigMap" && strings.HasSuffix(o.Metadata.Name, "-dashboard") {
			if err := yaml.Unmarshal(o.doc, &cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	raw, ok := cm.Data["shutdown-manager.json"]
	if !ok {
		t.Fatal("no dashboard ConfigMap with shutdown-manager.json")
	}
	var dash struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(raw), &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	labelValues := regexp.MustCompile(`^label_values\(([a-z_:]+), ([a-z_]+)\)$`)
	for _, v := range dash.Templating.List {
		if v.Definition == "" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("dashboard variable %s: %q is not label_values(metric, label)", v.Name, v.Definition)
			continue
		}
		exprs["variable "+v.Name] = "count by (" + m[2] + ") (" + m[1] + ")" // the same names, as an expression
	}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for i, tg := range p.Targets {
			exprs["panel "+p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	return exprs
}

// TestMonitoringMetricsExist: every expression of the rules and dashboard parses, and names metrics, labels and
// label values that exist.
func TestMonitoringMetricsExist(t *testing.T) {
	known := codeMetrics(t)
	for name, info := range apiserverMetrics {
		known[name] = info
	}
	exprs := monitoringExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("only %d expressions found: this test checks too little", len(exprs))
	}
	used := map[string]bool{}
	for where, expr := range exprs {
		p, err := checkPromQL(expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", where, err, expr)
			continue
		}
		if len(p.selectors) == 0 && !strings.Contains(expr, "time()") {
			t.Errorf("%s names no metric: %s", where, expr)
		}
		for _, s := range p.selectors {
			info, ok := series(known, s.metric)
			if !ok {
				t.Errorf("%s: metric %s is not registered by the code (nor the API server's)", where, s.metric)
				continue
			}
			used[s.metric] = true
			for _, m := range s.matchers {
				if !slices.Contains(info.labels, m.label) && !slices.Contains(targetLabels, m.label) {
					t.Errorf("%s: %s has no label %s (it has %v)", where, s.metric, m.label, info.labels)
				}
				values, enumerated := info.values[m.label]
				if !enumerated || m.op == "!=" || m.op == "!~" {
					continue
				}
				if m.op == "=" && !slices.Contains(values, m.value) {
					t.Errorf("%s: %s{%s=%q}: the code sets only %v", where, s.metric, m.label, m.value, values)
				}
				if m.op == "=~" {
					if re := regexp.MustCompile("^(?:" + m.value + ")$"); !slices.ContainsFunc(values, re.MatchString) {
						t.Errorf("%s: %s{%s=~%q} matches none of the values the code sets (%v)", where, s.metric, m.label, m.value, values)
					}
					for alt := range strings.SplitSeq(m.value, "|") {
						if regexp.QuoteMeta(alt) == alt && !slices.Contains(values, alt) {
							t.Errorf("%s: %s{%s=~%q}: %q is not a value the code sets (%v)", where, s.metric, m.label, m.value, alt, values)
						}
					}
				}
			}
		}
		for _, g := range p.groupings {
			info, _ := series(known, g.metric)
			for _, l := range g.labels {
				if !slices.Contains(info.labels, l) && !slices.Contains(targetLabels, l) {
					t.Errorf("%s: grouping by %s, which %s does not have (%v)", where, l, g.metric, info.labels)
				}
			}
		}
	}
	for _, must := range []string{"shutdown_manager_drains_total", "apiserver_admission_webhook_fail_open_count",
		"shutdown_manager_webhook_certificate_expiry_timestamp_seconds", "shutdown_manager_build_info", "shutdown_manager_webhook_uninjected_pods"} {
		if !used[must] {
			t.Errorf("no rule or panel uses %s", must)
		}
	}
}

// TestPromQLCheck: the expression check refuses what Prometheus would, for the mistakes a hand-written rule makes.
func TestPromQLCheck(t *testing.T) {
	good := []string{
		`sum by (namespace, pod, outcome) (increase(shutdown_manager_drains_total{outcome=~"timeout|error|misconfigured"}[15m])) > 0`,
		`histogram_quantile(0.99, sum by (le) (rate(x_bucket[$__rate_interval])))`,
		`min by (namespace, pod) (x) - time() < 1209600`,
		`sum(rate(x[5m])) without (pod) > bool 0 or vector(0)`,
		`count by (version) (shutdown_manager_build_info)`,
		`topk(3, x{a!="b", c!~"d.*"} offset 5m)`,
		`{__name__="x"}`,
		`-x ^ 2 ^ 3`,
	}
	bad := map[string]string{
		`sum by (pod) (rate(x[5m])`:             "want",
		`rate(x[5 m])`:                          "not a duration",
		`rat(x[5m])`:                            "unknown function",
		`x{a=~"("}`:                             "missing closing",
		`x{a="b"`:                               "label name",
		`increase(x[5m], 2)`:                    "arguments",
		`topk(x)`:                               "arguments",
		`sum by (pod) by (pod) (x)`:             "want",
		`x > > 0`:                               "unexpected",
		`x y`:                                   "after the expression",
		`x{a=b}`:                                "not a string",
		`sum(x) on (pod) group_left sum(y)`:     "after the expression",
		`x * on (pod) group_left y`:             "vector matching",
		`x{a="b"} offset 5`:                     "not a duration",
		`"unterminated`:                         "unterminated",
		`histogram_quantile(0.9)`:               "arguments",
		`sum by (pod,) (x)`:                     "label name",
		`sum by (namespace pod) (x)`:            "want , or )",
		`x{a="b",,c="d"}`:                       "label name",
		`label_values(shutdown_manager_x, pod)`: "unknown function",
	}
	for _, e := range good {
		if _, err := checkPromQL(e); err != nil {
			t.Errorf("checkPromQL(%s): %v, want none", e, err)
		}
	}
	for e, want := range bad {
		if _, err := checkPromQL(e); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("checkPromQL(%s) = %v, want an error saying %q", e, err, want)
		}
	}
}

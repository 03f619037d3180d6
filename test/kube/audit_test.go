package kube

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testpki"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/webhook"
)

// TestAuditUninjected: with the chart's MutatingWebhookConfiguration registered, failurePolicy Ignore and no
// webhook answering (its URL a closed port), the API server admits the pods that asked for injection unchanged.
// The audit (webhook.Auditor over events.Reader, as the webhook command runs it) finds exactly those the webhook
// would have injected — a pod in an opted-in namespace, a pod labelled in another one — and not a pod injected
// before it reached the API server (`shutdown-manager inject`), one opted out by annotation or label, one without
// Envoy opted in by its namespace only, the manager's own, or one no selector selects. It records one Warning
// Event ShutdownManagerMissing on each (regarding the pod by UID), and sets the gauge; a second pass, and a pass of
// a second Auditor (another replica, or the webhook restarted), record none again; a deleted pod leaves the gauge.
// Then the webhook command itself, started with the audit on, reports the same on its /metrics.
func TestAuditUninjected(t *testing.T) {
	api := kubetest.Start(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "https://" + closed.Addr().String() + webhook.Path
	closed.Close() // nothing listens there: every call fails, and Ignore admits the pod unchanged
	ca, err := testpki.NewCA("shutdown-manager audit test CA")
	if err != nil {
		t.Fatal(err)
	}
	hook := hookConfig{url: down, caBundle: ca.PEM, failurePolicy: admissionregistrationv1.Ignore}
	apply(t, api, hook.object())
	for _, ns := range []string{"opted", "plain"} {
		apply(t, api, namespaceList(ns))
	}
	api.Kubectl(t, "label", "namespace", "opted", inject.LabelInject+"="+inject.InjectEnabled)

	template := plainTemplate(t)
	envoy := func(ns, name string, edit func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: *template.ObjectMeta.DeepCopy(), Spec: *template.Spec.DeepCopy()}
		p.APIVersion, p.Kind = "v1", "Pod"
		p.Namespace, p.Name = ns, name
		delete(p.Labels, inject.LabelInject)
		if edit != nil {
			edit(p)
		}
		return p
	}
	injected := envoy("opted", "injected", nil)
	if err := inject.Inject(&injected.ObjectMeta, &injected.Spec, inject.Config{Image: testImage, Version: cli.Version}); err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	for _, p := range []*corev1.Pod{
		envoy("opted", "missed", nil),
		envoy("plain", "labelled-missed", func(p *corev1.Pod) { p.Labels[inject.LabelInject] = inject.InjectEnabled }),
		injected,
		envoy("opted", "opted-out", func(p *corev1.Pod) {
			p.Annotations = map[string]string{inject.AnnotationInject: inject.InjectFalse}
		}),
		envoy("opted", "opted-out-label", func(p *corev1.Pod) { p.Labels[inject.LabelInject] = inject.InjectFalse }),
		envoy("opted", "no-envoy", func(p *corev1.Pod) {
			p.Spec.Containers[0].Name, p.Spec.Containers[0].Image = "app", "nginx:1.29"
		}),
		envoy("opted", "own", func(p *corev1.Pod) { p.Labels[inject.LabelName] = inject.OwnName }),
		envoy("plain", "elsewhere", nil),
	} {
		got := decodePod(t, create(t, api, p).stdout)
		if inject.Injected(&got.ObjectMeta) != (p.Name == "injected") {
			t.Fatalf("pod %s stored with status annotation %t: the webhook must be down here", p.Name, inject.Injected(&got.ObjectMeta))
		}
		uids[p.Namespace+"/"+p.Name] = string(got.UID)
	}
	// The API server did call the configuration and failed open: this is the outage the audit is for.
	if metrics := api.Kubectl(t, "get", "--raw", "/metrics"); !strings.Contains(metrics, `apiserver_admission_webhook_fail_open_count{name="namespace.shutdown-manager.io",type="admit"}`) {
		t.Errorf("the API server counted no fail-open call of namespace.shutdown-manager.io")
	}

	api2, err := events.NewReader(api.Kubeconfig, "", "shutdown-manager-test")
	if err != nil {
		t.Fatal(err)
	}
	cfg := webhook.AuditConfig{Configuration: "shutdown-manager", Inject: inject.Config{Image: testImage, Version: cli.Version},
		Instance: "audit@test"}
	reg := prometheus.NewPedanticRegistry()
	a := webhook.NewAuditor(api2, cfg, slog.New(slog.DiscardHandler), reg)
	gauge := func(t *testing.T, reg *prometheus.Registry) float64 {
		t.Helper()
		n, err := testutil.GatherAndCount(reg, webhook.UninjectedMetric)
		if err != nil || n != 1 {
			t.Fatalf("gathering %s: %d series, %v", webhook.UninjectedMetric, n, err)
		}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == webhook.UninjectedMetric {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	if got := gauge(t, reg); got != 0 {
		t.Errorf("the gauge before any pass is %v, want 0", got)
	}
	wantMissing := []string{"opted/missed", "plain/labelled-missed"}
	// recordedEvents lists the ShutdownManagerMissing Events in the API server: "namespace/name type uid".
	recordedEvents := func(t *testing.T) []string {
		t.Helper()
		out := api.Kubectl(t, "get", "events", "-A", "--field-selector", "reason="+webhook.ReasonMissing, "-o",
			`jsonpath={range .items[*]}{.involvedObject.kind} {.involvedObject.namespace}/{.involvedObject.name} {.type} {.involvedObject.uid}{"\n"}{end}`)
		lines := slices.Collect(strings.Lines(out))
		slices.Sort(lines)
		return lines
	}
	wantEvents := []string{
		"Pod opted/missed Warning " + uids["opted/missed"] + "\n",
		"Pod plain/labelled-missed Warning " + uids["plain/labelled-missed"] + "\n",
	}

	t.Run("first pass: one Warning Event on each pod that asked and was admitted uninjected", func(t *testing.T) {
		res, err := a.Pass(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Missing, wantMissing) || res.Recorded != 2 {
			t.Errorf("pass found %v and recorded %d Events, want %v and 2", res.Missing, res.Recorded, wantMissing)
		}
		if got := gauge(t, reg); got != 2 {
			t.Errorf("%s = %v, want 2", webhook.UninjectedMetric, got)
		}
		if got := recordedEvents(t); !slices.Equal(got, wantEvents) {
			t.Errorf("%s Events:\n%s\nwant:\n%s", webhook.ReasonMissing, strings.Join(got, ""), strings.Join(wantEvents, ""))
		}
		// kubectl describe selects a pod's Events by its UID: the Event is where a person looks.
		if out := api.Kubectl(t, "describe", "pod", "missed", "-n", "opted"); !strings.Contains(out, webhook.ReasonMissing) {
			t.Errorf("kubectl describe pod opted/missed does not show %s:\n%s", webhook.ReasonMissing, out)
		}
	})

	t.Run("second pass, and a second auditor: no Event again", func(t *testing.T) {
		res, err := a.Pass(t.Context())
		if err != nil || res.Recorded != 0 || !slices.Equal(res.Missing, wantMissing) {
			t.Errorf("second pass: found %v, recorded %d, err %v; want %v, 0, nil", res.Missing, res.Recorded, err, wantMissing)
		}
		reg2 := prometheus.NewPedanticRegistry()
		other := webhook.NewAuditor(api2, cfg, slog.New(slog.DiscardHandler), reg2)
		res, err = other.Pass(t.Context())
		if err != nil || res.Recorded != 0 || !slices.Equal(res.Missing, wantMissing) {
			t.Errorf("another auditor's pass: found %v, recorded %d, err %v; want %v, 0, nil", res.Missing, res.Recorded, err, wantMissing)
		}
		if got := gauge(t, reg2); got != 2 {
			t.Errorf("the other auditor's %s = %v, want 2", webhook.UninjectedMetric, got)
		}
		if got := recordedEvents(t); !slices.Equal(got, wantEvents) {
			t.Errorf("%s Events after the second passes:\n%s\nwant still:\n%s", webhook.ReasonMissing, strings.Join(got, ""), strings.Join(wantEvents, ""))
		}
	})

	t.Run("a deleted pod leaves the gauge", func(t *testing.T) {
		api.Kubectl(t, "delete", "pod", "labelled-missed", "-n", "plain", "--grace-period=0", "--force")
		res, err := a.Pass(t.Context())
		if err != nil || !slices.Equal(res.Missing, []string{"opted/missed"}) {
			t.Errorf("pass after the delete: found %v, err %v; want [opted/missed]", res.Missing, err)
		}
		if got := gauge(t, reg); got != 1 {
			t.Errorf("%s = %v, want 1", webhook.UninjectedMetric, got)
		}
	})

	t.Run("no such configuration: the pass fails, is counted, and the gauge keeps its value", func(t *testing.T) {
		wrong := cfg
		wrong.Configuration = "not-there"
		reg := prometheus.NewPedanticRegistry()
		b := webhook.NewAuditor(api2, wrong, slog.New(slog.DiscardHandler), reg)
		_, err := b.Pass(t.Context())
		if err == nil || !events.NotFound(err) {
			t.Errorf("pass with configuration %q: err %v, want the API server's NotFound", wrong.Configuration, err)
		}
		if n, err := testutil.GatherAndCount(reg, "shutdown_manager_webhook_audits_total"); err != nil || n != 2 {
			t.Fatalf("audits_total: %d series, %v", n, err)
		}
		want := "# HELP shutdown_manager_webhook_audits_total Audit passes over the pods that asked for injection, by outcome (ok, error).\n" +
			"# TYPE shutdown_manager_webhook_audits_total counter\n" +
			"shutdown_manager_webhook_audits_total{outcome=\"error\"} 1\nshutdown_manager_webhook_audits_total{outcome=\"ok\"} 0\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "shutdown_manager_webhook_audits_total"); err != nil {
			t.Error(err)
		}
		if got := gauge(t, reg); got != 0 {
			t.Errorf("%s after a failed first pass = %v, want 0", webhook.UninjectedMetric, got)
		}
	})

	t.Run("the webhook command audits at start and serves the gauge", func(t *testing.T) {
		// Started on its own port with the configuration still pointing at the closed one, so that nothing it
		// serves changes the pods; an hour's interval: the pass at start is the one observed.
		wh := startWebhook(t, newCertDir(t, ca), api.Kubeconfig, "--audit-interval=1h", "--audit-configuration=shutdown-manager")
		ok := regexp.MustCompile(`(?m)^shutdown_manager_webhook_audits_total\{outcome="ok"\} 1$`)
		var body string
		for deadline := time.Now().Add(30 * time.Second); !ok.MatchString(body); {
			if time.Now().After(deadline) {
				t.Fatalf("no successful audit pass on /metrics within 30 s (log: %s):\n%s", wh.logPath, body)
			}
			resp, err := http.Get("http://" + wh.health + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			body = string(b)
			select {
			case <-t.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		if want := webhook.UninjectedMetric + " 1\n"; !strings.Contains(body, want) {
			t.Errorf("/metrics has no %q:\n%s", want, body)
		}
		if got := recordedEvents(t); len(got) != 2 {
			t.Errorf("the webhook recorded another Event: %v", got)
		}
	})
}

package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// The audit finds the pods that asked for the manager and run without it: with failurePolicy Ignore, a pod
// created while the webhook could not be called (all replicas down, a certificate the API server does not trust,
// a NetworkPolicy in the way) is admitted unchanged, and nothing else says so on a cluster whose API server
// metrics are out of reach (a managed control plane). Each pass lists what the webhook's own
// MutatingWebhookConfiguration selects, so the selection is the API server's, whatever the chart's selectors were
// set to.

// ReasonMissing is the reason of the Warning Event the audit records on a pod that asked for the manager and was
// admitted without it. Another reason than ReasonNotInjected: that one says the webhook saw the pod and could not
// inject it; this one, that the webhook never saw it.
const ReasonMissing = "ShutdownManagerMissing"

// UninjectedMetric is the name of the audit's gauge.
const UninjectedMetric = "shutdown_manager_webhook_uninjected_pods"

// DefaultAuditInterval is the time between audit passes: a pod admitted during an outage is reported within it,
// and a pass (a few lists, served from the API server's cache) costs the API server little at that rate.
const DefaultAuditInterval = time.Minute

// AuditOutcomes are the outcome label's values of shutdown_manager_webhook_audits_total.
var AuditOutcomes = []string{"ok", "error"}

// auditPage is the number of objects asked for per list request.
const auditPage = 500

// AuditAPI is what the audit asks of the API server (events.Reader): GETs of JSON and Events it waits for.
type AuditAPI interface {
	Get(ctx context.Context, path string, query url.Values) ([]byte, error)
	CreateEvent(ctx context.Context, e events.Event, instance string) error
}

var _ AuditAPI = (*events.Reader)(nil)

// AuditConfig is what the audit needs to know.
type AuditConfig struct {
	// Configuration is the name of the webhook's MutatingWebhookConfiguration: its entries' selectors say which
	// pods asked for the manager.
	Configuration string
	// Inject is the webhook's settings: a pod is missing the manager when Decide would inject it.
	Inject inject.Config
	// Instance is the Events' reportingInstance ("audit@<pod>").
	Instance string
}

// Auditor runs audit passes. It is used by one goroutine (Run's, or a test's calls of Pass).
type Auditor struct {
	api AuditAPI
	cfg AuditConfig
	log *slog.Logger
	// recorded holds the pods whose Event is known to be in the API server (recorded here or found there), so
	// that each pod gets one; pruned at every pass to the pods still missing the manager.
	recorded   map[types.UID]bool
	uninjected prometheus.Gauge
	passes     *prometheus.CounterVec
}

// AuditResult is what one pass found.
type AuditResult struct {
	// Missing are the pods that asked for the manager and run without it, as "namespace/name", sorted.
	Missing []string
	// Recorded is the number of Events this pass created (0 for pods that already have theirs).
	Recorded int
}

// NewAuditor returns an Auditor asking api, with its metrics registered on reg (nil: not registered). The gauge
// is created at 0 and the pass counter's outcomes at zero, so that an alert over them exists from the start.
func NewAuditor(api AuditAPI, cfg AuditConfig, log *slog.Logger, reg prometheus.Registerer) *Auditor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Auditor{api: api, cfg: cfg, log: log, recorded: map[types.UID]bool{},
		uninjected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: UninjectedMetric,
			Help: "Pods that asked for injection (the webhook's configuration selects them, and the webhook would inject them) and run without the manager, as of the last audit pass that could list them.",
		}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shutdown_manager_webhook_audits_total",
			Help: "Audit passes over the pods that asked for injection, by outcome (ok, error).",
		}, []string{"outcome"}),
	}
	for _, o := range AuditOutcomes {
		a.passes.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(a.uninjected, a.passes)
	}
	return a
}

// Run makes a pass at once, then every interval, until ctx is done. A failed pass is logged (at warn for the
// first of a series, then at debug until one succeeds) and counted; a pass that could not list the pods leaves the
// gauge as it was.
func (a *Auditor) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		// A pass is a few lists and one Event per newly found pod, each request bounded by its own timeout; the
		// pass as a whole by the interval, or a minute when that is shorter.
		pctx, cancel := context.WithTimeout(ctx, max(interval, time.Minute))
		res, err := a.Pass(pctx)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil && !failing:
			failing = true
			a.log.Warn("audit of uninjected pods failed; trying again at each interval", "configuration", a.cfg.Configuration, "err", err)
		case err != nil:
			a.log.Debug("audit of uninjected pods failed", "err", err)
		default:
			if failing {
				failing = false
				a.log.Info("audit of uninjected pods succeeded again")
			}
			a.log.Debug("audit pass", "uninjected", len(res.Missing), "events_recorded", res.Recorded)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass lists the pods the webhook's configuration selects, finds those that run without the manager though the
// webhook would inject them, records one Warning Event (ReasonMissing) on each that has none yet, and sets the
// gauge to how many there are. A pod is left out when it is injected (the status annotation), finished
// (Succeeded, Failed), a static pod's mirror, or when Decide would not inject it: opted out, kube-system, the
// manager's own, no Envoy container with only its namespace opted in, and a pod that asked for the manager but
// cannot have it (the webhook, when up, answers those with a warning and an Event on their owner). After an Event
// that could not be recorded, the pass records no more (an API server that refuses one, for want of RBAC, refuses
// them all); they are tried again at the next pass, and the error is returned after the gauge is set.
func (a *Auditor) Pass(ctx context.Context) (AuditResult, error) {
	pods, err := a.selected(ctx)
	if err != nil {
		a.passes.WithLabelValues("error").Inc()
		return AuditResult{}, err
	}
	var res AuditResult
	var firstErr error
	missing := map[types.UID]bool{}
	for _, pod := range pods {
		if !a.missing(pod) {
			continue
		}
		missing[pod.UID] = true
		res.Missing = append(res.Missing, pod.Namespace+"/"+pod.Name)
		if a.recorded[pod.UID] || firstErr != nil { // after a refusal, the next pass tries the rest: RBAC refuses them all
			continue
		}
		created, err := a.record(ctx, pod)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("recording the event on pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
			continue
		}
		a.recorded[pod.UID] = true
		if created {
			res.Recorded++
			a.log.Warn("pod admitted without the shutdown manager", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID, "reason", ReasonMissing)
		}
	}
	for uid := range a.recorded {
		if !missing[uid] {
			delete(a.recorded, uid)
		}
	}
	slices.Sort(res.Missing)
	a.uninjected.Set(float64(len(res.Missing)))
	if firstErr != nil {
		a.passes.WithLabelValues("error").Inc()
		return res, firstErr
	}
	a.passes.WithLabelValues("ok").Inc()
	return res, nil
}

// missing reports whether pod asked for the manager (it was selected) and runs without it, though the webhook
// would inject it.
func (a *Auditor) missing(pod *corev1.Pod) bool {
	switch {
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return false
	case pod.Annotations[corev1.MirrorPodAnnotationKey] != "": // its kubelet's static pod: no admission to redo
		return false
	case inject.Injected(&pod.ObjectMeta):
		return false
	}
	d := Decide(Review{Namespace: pod.Namespace, Operation: admissionv1.Create, Pod: pod}, a.cfg.Inject)
	return d.Outcome == OutcomeInjected
}

// record makes sure pod has its Event: created is false when the API server already holds one (recorded by
// another replica, or by this webhook before a restart, while the Event lives: an hour by default).
func (a *Auditor) record(ctx context.Context, pod *corev1.Pod) (created bool, err error) {
	q := url.Values{"fieldSelector": {"involvedObject.uid=" + string(pod.UID) + ",reason=" + ReasonMissing}, "limit": {"1"}}
	body, err := a.api.Get(ctx, "/api/v1/namespaces/"+url.PathEscape(pod.Namespace)+"/events", q)
	if err != nil {
		return false, fmt.Errorf("listing its events: %w", err)
	}
	var existing struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &existing); err != nil {
		return false, fmt.Errorf("decoding its events: %w", err)
	}
	if len(existing.Items) > 0 {
		return false, nil
	}
	note := "the pod asked for the shutdown manager (the MutatingWebhookConfiguration " + a.cfg.Configuration +
		" selects it) but was admitted without it: the webhook could not be called when the pod was created" +
		" (failurePolicy Ignore), or the pod predates the webhook. Envoy will stop without a drain;" +
		" delete the pod (or restart its workload) once the webhook answers, and its replacement is injected."
	err = a.api.CreateEvent(ctx, events.Event{
		Type:   events.TypeWarning,
		Reason: ReasonMissing,
		Note:   note,
		Action: "Audit",
		Regarding: &events.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name,
			UID: string(pod.UID)},
	}, a.cfg.Instance)
	if err != nil {
		return false, err
	}
	return true, nil
}

// selected lists the pods the configuration's entries select for a CREATE of a pod, once each.
func (a *Auditor) selected(ctx context.Context) ([]*corev1.Pod, error) {
	body, err := a.api.Get(ctx, "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"+url.PathEscape(a.cfg.Configuration), nil)
	if err != nil {
		return nil, fmt.Errorf("reading the MutatingWebhookConfiguration: %w", err)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := json.Unmarshal(body, &mwc); err != nil {
		return nil, fmt.Errorf("decoding the MutatingWebhookConfiguration %s: %w", a.cfg.Configuration, err)
	}
	var namespaces []corev1.Namespace
	if err := events.EachPage(ctx, a.api, "/api/v1/namespaces", pageQuery(""), func(items json.RawMessage) error {
		var page []corev1.Namespace
		err := json.Unmarshal(items, &page)
		namespaces = append(namespaces, page...)
		return err
	}); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	seen := map[types.UID]bool{}
	var pods []*corev1.Pod
	for _, wh := range mwc.Webhooks {
		if !createsPods(wh.Rules) {
			continue
		}
		nsSel, err := selector(wh.NamespaceSelector)
		if err != nil {
			return nil, fmt.Errorf("webhook %s: namespaceSelector: %w", wh.Name, err)
		}
		objSel, err := selector(wh.ObjectSelector)
		if err != nil {
			return nil, fmt.Errorf("webhook %s: objectSelector: %w", wh.Name, err)
		}
		in := map[string]bool{}
		for _, ns := range namespaces {
			if nsSel.Matches(labels.Set(ns.Labels)) {
				in[ns.Name] = true
			}
		}
		// Few namespaces selected (the namespace label): their pods, namespace by namespace; most of them (the
		// pod label, all namespaces but kube-system): one list of the cluster's pods the object selector selects.
		paths := []string{"/api/v1/pods"}
		if 2*len(in) < len(namespaces) {
			paths = paths[:0]
			for ns := range in {
				paths = append(paths, "/api/v1/namespaces/"+url.PathEscape(ns)+"/pods")
			}
			slices.Sort(paths)
		}
		for _, path := range paths {
			err := events.EachPage(ctx, a.api, path, pageQuery(objSel.String()), func(items json.RawMessage) error {
				var page []corev1.Pod
				if err := json.Unmarshal(items, &page); err != nil {
					return err
				}
				for i := range page {
					p := &page[i]
					if in[p.Namespace] && !seen[p.UID] {
						seen[p.UID] = true
						pods = append(pods, p)
					}
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("listing pods: %w", err)
			}
		}
	}
	return pods, nil
}

// pageQuery is a list's query: auditPage items a page, those labelSelector selects ("": all).
func pageQuery(labelSelector string) url.Values {
	q := url.Values{"limit": {fmt.Sprint(auditPage)}}
	if labelSelector != "" {
		q.Set("labelSelector", labelSelector)
	}
	return q
}

// createsPods reports whether rules send the API server's CREATE of a core/v1 pod to the webhook.
func createsPods(rules []admissionregistrationv1.RuleWithOperations) bool {
	has := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	for _, r := range rules {
		ops := make([]string, len(r.Operations))
		for i, op := range r.Operations {
			ops[i] = string(op)
		}
		if has(ops, string(admissionregistrationv1.Create)) && has(r.APIGroups, "") && has(r.APIVersions, "v1") &&
			(has(r.Resources, "pods") || slices.Contains(r.Resources, "*/*")) {
			return true
		}
	}
	return false
}

// selector is a webhook entry's selector; none selects everything, as the API server has it.
func selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

// AuditInstance is the audit's reportingInstance: "audit@" and the webhook's pod (its host name).
func AuditInstance() string {
	pod := os.Getenv(events.EnvPodName)
	if pod == "" {
		pod, _ = os.Hostname()
	}
	return "audit@" + pod
}

// Package kubectl is the kubectl plugin's view of a cluster: the pods of a workload, read through the API server,
// each with its drain state as the pod, its injection status annotation and the manager's Events say
// (`kubectl shutdown-manager status`: Status), or checked for being ready to drain (`check`: Check). It reads
// with GETs of JSON and asks reviews with POSTs (kubeapi.Client: client-go's kubeconfig loading and transport),
// and decodes into the k8s.io/api types the binary already carries for inject.
package kubectl

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// Getter GETs a path of the API server (kubeapi.Client).
type Getter = events.Getter

// Query is what to show: the pods of Target (KIND/NAME, as kubectl names objects), or those Selector matches,
// in Namespace.
type Query struct {
	Namespace string
	Target    string // deployment/NAME, daemonset/NAME, statefulset/NAME, replicaset/NAME, pod/NAME (or their short names)
	Selector  string // a label selector, as kubectl's -l; with Target: ANDed with the workload's
	// Live: also read each manager's own /status through the API server's pods/proxy (see Live).
	Live bool
}

// Drain states of a pod, from the manager's Events about it (the last drain's) and the pod itself.
const (
	StateNone       = "none"        // no drain recorded and the pod is not terminating
	StateNoEvent    = "no-event"    // terminating, and no drain recorded (not injected, Events disabled, or not yet)
	StateDraining   = "draining"    // DrainStarted, nothing after it yet
	StateDrained    = "drained"     // Drained
	StateTimedOut   = "timed-out"   // DrainTimedOut: released with work in flight
	StateEnvoyGone  = "envoy-gone"  // EnvoyGone
	StateFailed     = "failed"      // DrainFailed
	StateCanceled   = "canceled"    // DrainCanceled
	StateNotManaged = "not-managed" // not injected and no Events: nothing of the manager in this pod
)

// stateOf is the drain state each of the manager's reasons ends a drain in.
var stateOf = map[string]string{
	events.ReasonDrainStarted:  StateDraining,
	events.ReasonDrained:       StateDrained,
	events.ReasonDrainTimedOut: StateTimedOut,
	events.ReasonEnvoyGone:     StateEnvoyGone,
	events.ReasonDrainFailed:   StateFailed,
	events.ReasonDrainCanceled: StateCanceled,
}

// Report is the status of a workload's pods.
type Report struct {
	Namespace string      `json:"namespace"`
	Target    string      `json:"target,omitempty"`
	Selector  string      `json:"selector"`
	Pods      []PodStatus `json:"pods"`
}

// PodStatus is one pod's drain state and what it was read from.
type PodStatus struct {
	Name  string `json:"name"`
	Ready string `json:"ready"`  // ready containers / containers, as kubectl get pods
	Phase string `json:"status"` // Terminating when deleted, else the pod's phase
	Node  string `json:"node,omitempty"`
	IP    string `json:"ip,omitempty"`
	// Deleted is when the pod was deleted (its deletionTimestamp minus its grace period), if it was.
	Deleted *time.Time `json:"deleted,omitempty"`
	// Mode is the injected mode (hook, sidecar, agent) from the status annotation; empty: not injected.
	Mode string `json:"mode,omitempty"`
	// DrainTimeout is the drain timeout the injection recorded.
	DrainTimeout string `json:"drainTimeout,omitempty"`
	// Drain is the state of the last drain (the State constants).
	Drain string `json:"drain"`
	// Events are the manager's Events about this pod, oldest first.
	Events []Event `json:"events,omitempty"`
	// Live is the manager's own /status (Query.Live), when it has an API port.
	Live *Live `json:"live,omitempty"`
}

// Event is one of the manager's Events about a pod.
type Event struct {
	Time     time.Time `json:"time"`
	Type     string    `json:"type"`
	Reason   string    `json:"reason"`
	Note     string    `json:"note,omitempty"`
	Instance string    `json:"reportingInstance,omitempty"`
}

// Last is the pod's last Event, if any.
func (p PodStatus) Last() (Event, bool) {
	if len(p.Events) == 0 {
		return Event{}, false
	}
	return p.Events[len(p.Events)-1], true
}

// kinds maps the names kubectl accepts for a kind to its API path segment ("" group: core/v1).
var kinds = map[string]struct{ group, resource string }{}

func init() {
	for _, k := range []struct {
		names           []string
		group, resource string
	}{
		{[]string{"deployment", "deployments", "deploy"}, "apps/v1", "deployments"},
		{[]string{"daemonset", "daemonsets", "ds"}, "apps/v1", "daemonsets"},
		{[]string{"statefulset", "statefulsets", "sts"}, "apps/v1", "statefulsets"},
		{[]string{"replicaset", "replicasets", "rs"}, "apps/v1", "replicasets"},
		{[]string{"pod", "pods", "po"}, "", "pods"},
	} {
		for _, n := range k.names {
			kinds[n] = struct{ group, resource string }{k.group, k.resource}
		}
	}
}

// Kinds are the kind names a Target may start with, for help and completion.
func Kinds() []string {
	return []string{"deployment", "daemonset", "statefulset", "replicaset", "pod"}
}

// ParseTarget splits KIND/NAME, refusing a kind it does not know.
func ParseTarget(target string) (resource, group, name string, err error) {
	kind, name, ok := strings.Cut(target, "/")
	if !ok || name == "" || kind == "" {
		return "", "", "", fmt.Errorf("%q: want KIND/NAME, KIND one of %s", target, strings.Join(Kinds(), ", "))
	}
	k, ok := kinds[strings.ToLower(kind)]
	if !ok {
		return "", "", "", fmt.Errorf("%q: unknown kind %q (one of %s)", target, kind, strings.Join(Kinds(), ", "))
	}
	return k.resource, k.group, name, nil
}

// pageSize is the items a list asks for at a time (limit, continue), so that a large namespace's Events
// come in bounded answers.
const pageSize = 500

// Status reads the pods q names and the manager's Events about them, and says each one's drain state.
func Status(ctx context.Context, api Getter, q Query) (Report, error) {
	ns, selector, pods, err := podsOf(ctx, api, q)
	rep := Report{Namespace: ns, Target: q.Target, Selector: selector}
	if err != nil {
		return rep, err
	}
	byPod, err := managerEvents(ctx, api, ns, pods)
	if err != nil {
		return rep, err
	}
	for _, p := range pods {
		st := podStatus(p, byPod[p.Name])
		if q.Live {
			st.Live = live(ctx, api, p)
		}
		rep.Pods = append(rep.Pods, st)
	}
	slices.SortFunc(rep.Pods, func(a, b PodStatus) int { return strings.Compare(a.Name, b.Name) })
	return rep, nil
}

// podsOf reads the pods q names: its namespace (default: default), the label selector they were listed with
// (the workload's and q's), and the pods.
func podsOf(ctx context.Context, api Getter, q Query) (ns, selector string, pods []corev1.Pod, err error) {
	ns, selector = cmp.Or(q.Namespace, "default"), q.Selector
	switch resource, group, name, err := parseTargetOrNone(q.Target); {
	case err != nil:
		return ns, selector, nil, err
	case resource == "pods":
		var pod corev1.Pod
		if err := getJSON(ctx, api, "/api/v1/namespaces/"+url.PathEscape(ns)+"/pods/"+url.PathEscape(name), nil, &pod); err != nil {
			return ns, selector, nil, fmt.Errorf("reading pod %s/%s: %w", ns, name, err)
		}
		return ns, selector, []corev1.Pod{pod}, nil
	case resource != "":
		sel, err := workloadSelector(ctx, api, ns, group, resource, name)
		if err != nil {
			return ns, selector, nil, err
		}
		selector = joinSelectors(sel, q.Selector)
	}
	pods, err = listPods(ctx, api, ns, selector)
	return ns, selector, pods, err
}

func parseTargetOrNone(target string) (resource, group, name string, err error) {
	if target == "" {
		return "", "", "", nil
	}
	return ParseTarget(target)
}

// workloadSelector is the label selector of a workload's pods: its spec.selector.
func workloadSelector(ctx context.Context, api Getter, ns, group, resource, name string) (string, error) {
	var w struct {
		Spec struct {
			Selector *metav1.LabelSelector `json:"selector"`
		} `json:"spec"`
	}
	path := "/apis/" + group + "/namespaces/" + url.PathEscape(ns) + "/" + resource + "/" + url.PathEscape(name)
	if err := getJSON(ctx, api, path, nil, &w); err != nil {
		return "", fmt.Errorf("reading %s %s/%s: %w", resource, ns, name, err)
	}
	if w.Spec.Selector == nil {
		return "", fmt.Errorf("%s %s/%s has no spec.selector", resource, ns, name)
	}
	sel, err := metav1.LabelSelectorAsSelector(w.Spec.Selector)
	if err != nil {
		return "", fmt.Errorf("%s %s/%s: spec.selector: %w", resource, ns, name, err)
	}
	if sel.Empty() {
		return "", fmt.Errorf("%s %s/%s: spec.selector selects every pod", resource, ns, name)
	}
	return sel.String(), nil
}

func joinSelectors(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "," + b
}

// listPods lists the pods of ns that selector matches, page by page.
func listPods(ctx context.Context, api Getter, ns, selector string) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	q := url.Values{"limit": {fmt.Sprint(pageSize)}}
	if selector != "" {
		q.Set("labelSelector", selector)
	}
	err := events.EachPage(ctx, api, "/api/v1/namespaces/"+url.PathEscape(ns)+"/pods", q, func(raw json.RawMessage) error {
		var page []corev1.Pod
		if err := json.Unmarshal(raw, &page); err != nil {
			return err
		}
		pods = append(pods, page...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing pods in %s (%s): %w", ns, cmp.Or(selector, "every pod"), err)
	}
	return pods, nil
}

// managerEvents lists the Events about pods of ns (core/v1, which also shows those created as
// events.k8s.io/v1) and keeps the manager's about one of pods, by pod name, oldest first. An Event that names
// a pod's UID must name this pod's (a StatefulSet's pod recreated with the same name is another pod).
func managerEvents(ctx context.Context, api Getter, ns string, pods []corev1.Pod) (map[string][]Event, error) {
	byPod := map[string][]Event{}
	if len(pods) == 0 {
		return byPod, nil
	}
	uids := map[string]string{}
	for _, p := range pods {
		uids[p.Name] = string(p.UID)
	}
	q := url.Values{"limit": {fmt.Sprint(pageSize)}, "fieldSelector": {"involvedObject.kind=Pod"}}
	if len(pods) == 1 {
		q.Set("fieldSelector", "involvedObject.kind=Pod,involvedObject.name="+pods[0].Name)
	}
	err := events.EachPage(ctx, api, "/api/v1/namespaces/"+url.PathEscape(ns)+"/events", q, func(raw json.RawMessage) error {
		var page []corev1.Event
		if err := json.Unmarshal(raw, &page); err != nil {
			return err
		}
		for _, e := range page {
			uid, ok := uids[e.InvolvedObject.Name]
			if !ok || e.ReportingController != events.Controller || (e.InvolvedObject.UID != "" && uid != "" && string(e.InvolvedObject.UID) != uid) {
				continue
			}
			byPod[e.InvolvedObject.Name] = append(byPod[e.InvolvedObject.Name], Event{
				Time: eventTime(e), Type: e.Type, Reason: e.Reason, Note: e.Message, Instance: e.ReportingInstance})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing Events in %s: %w", ns, err)
	}
	for _, evs := range byPod {
		slices.SortStableFunc(evs, func(a, b Event) int { return a.Time.Compare(b.Time) })
	}
	return byPod, nil
}

// eventTime is when an Event happened: eventTime (events.k8s.io/v1, as the manager writes them), else its
// last or first timestamp, else its creation.
func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

func getJSON(ctx context.Context, api Getter, path string, q url.Values, v any) error {
	b, err := api.Get(ctx, path, q)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}

// podStatus is a pod's drain state: the last drain its Events tell of (from its last DrainStarted on), else,
// for a pod being deleted, that no drain was recorded.
func podStatus(p corev1.Pod, evs []Event) PodStatus {
	st := PodStatus{Name: p.Name, Phase: string(p.Status.Phase), Node: p.Spec.NodeName, IP: p.Status.PodIP, Events: evs}
	if st.Phase == "" {
		st.Phase = string(corev1.PodPending)
	}
	// READY counts as kubectl get pods does: the containers and the native sidecars (init containers that
	// restart always).
	ready, all := 0, len(p.Spec.Containers)
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			all++
		}
	}
	for _, c := range append(slices.Clone(p.Status.ContainerStatuses), p.Status.InitContainerStatuses...) {
		if c.Ready {
			ready++
		}
	}
	st.Ready = fmt.Sprintf("%d/%d", ready, all)
	if p.DeletionTimestamp != nil {
		st.Phase = "Terminating"
		deleted := p.DeletionTimestamp.Time
		if p.DeletionGracePeriodSeconds != nil {
			deleted = deleted.Add(-time.Duration(*p.DeletionGracePeriodSeconds) * time.Second)
		}
		st.Deleted = &deleted
	}
	if is, ok, err := inject.ParseStatus(&p.ObjectMeta); ok && err == nil {
		st.Mode, st.DrainTimeout = string(is.Mode), is.DrainTimeout
	} else if ok {
		st.Mode = "unreadable" // the annotation is there, but not inject's
	}
	st.Drain = drainState(evs)
	switch {
	case st.Drain != "":
	case p.DeletionTimestamp != nil:
		st.Drain = StateNoEvent
	case st.Mode == "":
		st.Drain = StateNotManaged
	default:
		st.Drain = StateNone
	}
	return st
}

// drainState is the state of the last drain evs (oldest first) tell of, or "" when they tell of none.
func drainState(evs []Event) string {
	for i := len(evs) - 1; i >= 0; i-- {
		if s, ok := stateOf[evs[i].Reason]; ok {
			return s
		}
	}
	return ""
}

package kubectl

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drainflag"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// API reads the API server (Getter) and POSTs reviews to it (kubeapi.Client): `check` asks whether a pod's
// ServiceAccount may create Events with a LocalSubjectAccessReview, whose answer is the review itself.
type API interface {
	Getter
	Post(ctx context.Context, path string, body []byte) ([]byte, error)
}

// Results of a check. Unknown is a check that could not be made (no kubelet status yet, no right to ask):
// never ok without the evidence.
const (
	ResultOK      = "ok"
	ResultWarn    = "warn"
	ResultFail    = "fail"
	ResultUnknown = "unknown"
)

// The checks, in the order of a pod's rows.
const (
	CheckInjected = "injected"     // the status annotation: version (skew against this CLI) and mode
	CheckGrace    = "grace-period" // terminationGracePeriodSeconds against the drain timeout written into the pod
	CheckAdmin    = "admin"        // Envoy's admin address reachable from the container that runs the drain
	CheckEvents   = "events"       // the drain's container has a token, and its ServiceAccount may create Events
	CheckImage    = "image"        // the manager's image pulled (kubelet's container statuses)
	// CheckDeregistration (with CheckOptions.DeregistrationDelay): the drain timeout holds new arrivals for as
	// long as the load balancer may still send them, and the quiet period's silence after.
	CheckDeregistration = "deregistration"
)

// CheckOptions are what Check compares pods with.
type CheckOptions struct {
	// Version is this CLI's: an injection by another is a version skew.
	Version string
	// Exec, with Query.Live, runs `shutdown-manager status` in the drain's container of each pod whose manager
	// has no API port (liveExec); nil: those pods are checked from their spec alone.
	Exec Execer
	// DeregistrationDelay, when > 0, is how long after the pod starts terminating a load balancer may still send
	// it new connections (issue 29: an AWS NLB for its deregistration delay, 30–120 s measured): the
	// deregistration check is added.
	DeregistrationDelay time.Duration
}

// Finding is one check's result on one pod, with a one-line reason that carries the numbers.
type Finding struct {
	Check  string `json:"check"`
	Result string `json:"result"`
	Reason string `json:"reason"`
}

// PodCheck is the findings on one pod, in the order of the checks.
type PodCheck struct {
	Name     string    `json:"name"`
	Findings []Finding `json:"checks"`
}

// CheckReport is `check`'s answer: every pod q named, each with its findings.
type CheckReport struct {
	Namespace string     `json:"namespace"`
	Target    string     `json:"target,omitempty"`
	Selector  string     `json:"selector"`
	Version   string     `json:"version"` // this CLI's, which the injected version is compared with
	Pods      []PodCheck `json:"pods"`
}

// Failed is how many findings failed.
func (r CheckReport) Failed() int {
	n := 0
	for _, p := range r.Pods {
		for _, f := range p.Findings {
			if f.Result == ResultFail {
				n++
			}
		}
	}
	return n
}

// Check verifies every pod q names as injected and ready to drain (the Check* constants), as opts say. With q.Live, the admin check also reads the manager's own /status where it has an API port (Live).
// One LocalSubjectAccessReview is asked per ServiceAccount. An error is a pod list that could not be read;
// what one check could not read is that check's unknown.
func Check(ctx context.Context, api API, q Query, opts CheckOptions) (CheckReport, error) {
	ns, selector, pods, err := podsOf(ctx, api, q)
	rep := CheckReport{Namespace: ns, Target: q.Target, Selector: selector, Version: opts.Version}
	if err != nil {
		return rep, err
	}
	reviews := map[string]Finding{} // by ServiceAccount
	for _, p := range pods {
		pc := PodCheck{Name: p.Name}
		in, injected := readInjection(p, opts.Version)
		pc.Findings = append(pc.Findings, injected)
		if in == nil {
			rest := []string{CheckGrace, CheckAdmin, CheckEvents, CheckImage}
			if opts.DeregistrationDelay > 0 {
				rest = append(rest, CheckDeregistration)
			}
			for _, c := range rest {
				pc.Findings = append(pc.Findings, Finding{c, ResultUnknown, "not injected"})
			}
			rep.Pods = append(rep.Pods, pc)
			continue
		}
		var l *Live
		if q.Live {
			if l = live(ctx, api, p); l == nil && opts.Exec != nil {
				l = liveExec(ctx, opts.Exec, in)
			}
		}
		ev := in.eventsToken()
		if ev.Result == ResultOK {
			sa := cmp.Or(p.Spec.ServiceAccountName, "default")
			r, ok := reviews[sa]
			if !ok {
				r = reviewEvents(ctx, api, ns, sa)
				reviews[sa] = r
			}
			ev = Finding{CheckEvents, r.Result, ev.Reason + "; " + r.Reason}
		}
		pc.Findings = append(pc.Findings, in.grace(), in.admin(l), ev, in.image())
		if lb := in.deregistrationDelay(opts.DeregistrationDelay); lb > 0 {
			pc.Findings = append(pc.Findings, in.deregistration(lb))
		}
		rep.Pods = append(rep.Pods, pc)
	}
	slices.SortFunc(rep.Pods, func(a, b PodCheck) int { return strings.Compare(a.Name, b.Name) })
	return rep, nil
}

// injection is what was injected into a pod, read back from it: the status annotation, Envoy's container,
// the container that runs the drain (Envoy's in hook and agent modes, the sidecar in sidecar mode) and the
// drain's command line there.
type injection struct {
	pod     corev1.Pod
	st      inject.Status
	envoy   *corev1.Container
	drainer *corev1.Container
	words   []string // the drain's command line (drain's exec hook, serve's, run's up to its "--")
}

// readInjection reads the status annotation and finds the containers it names. A pod that is not injected, or
// whose injection is not what the annotation says (a container it names is gone), is a failure and no injection.
func readInjection(p corev1.Pod, version string) (*injection, Finding) {
	fail := func(format string, a ...any) (*injection, Finding) {
		return nil, Finding{CheckInjected, ResultFail, fmt.Sprintf(format, a...)}
	}
	st, ok, err := inject.ParseStatus(&p.ObjectMeta)
	switch {
	case !ok:
		return fail("no %s annotation: not injected (was the pod admitted while the webhook was down, or not opted in?)", inject.AnnotationStatus)
	case err != nil:
		return fail("%v", err)
	}
	in := &injection{pod: p, st: st}
	find := func(name string, init bool) *corev1.Container {
		cs := p.Spec.Containers
		if init {
			cs = p.Spec.InitContainers
		}
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
		return nil
	}
	if in.envoy = find(st.EnvoyContainer, false); in.envoy == nil {
		in.envoy = find(st.EnvoyContainer, true)
	}
	if in.envoy == nil {
		return fail("the annotation names Envoy's container %q, which the pod lacks", st.EnvoyContainer)
	}
	for _, n := range st.InitContainers {
		if find(n, true) == nil {
			return fail("the annotation names init container %q, which the pod lacks: the injection was altered", n)
		}
	}
	for _, n := range st.Containers {
		if find(n, false) == nil {
			return fail("the annotation names container %q, which the pod lacks: the injection was altered", n)
		}
	}
	switch st.Mode {
	case inject.ModeHook:
		in.drainer = in.envoy
		if ps := in.envoy.Lifecycle; ps != nil && ps.PreStop != nil && ps.PreStop.Exec != nil {
			in.words = ps.PreStop.Exec.Command
		}
	case inject.ModeSidecar:
		if in.drainer = find(inject.SidecarContainer, true); in.drainer == nil {
			in.drainer = find(inject.SidecarContainer, false)
		}
		if in.drainer != nil {
			in.words = append(slices.Clone(in.drainer.Command), in.drainer.Args...)
		}
	case inject.ModeAgent:
		in.drainer, in.words = in.envoy, in.envoy.Command
	default:
		return fail("mode %q: not one this CLI knows (injected by %s, this CLI is %s)", st.Mode, st.Version, version)
	}
	if in.drainer == nil || !slices.ContainsFunc(in.words, func(w string) bool { return w == "drain" || w == "serve" || w == "run" }) {
		return fail("%s mode, but no container runs the manager's drain (no drain hook, serve or run): the injection was altered", st.Mode)
	}
	what := string(st.Mode) + " mode"
	switch {
	case st.Mode == inject.ModeSidecar:
		what += " (" + string(st.SidecarKind) + " sidecar, " + string(st.Hook) + " hook)"
	case st.BinaryFrom != "":
		what += " (binary " + string(st.BinaryFrom) + ")"
	}
	if st.Version != version {
		return in, Finding{CheckInjected, ResultWarn, fmt.Sprintf("%s, injected by %s; this CLI is %s: version skew (re-inject, or check with the CLI of %s)", what, st.Version, version, st.Version)}
	}
	return in, Finding{CheckInjected, ResultOK, fmt.Sprintf("%s, injected by %s, as this CLI", what, st.Version)}
}

// flag is the value of the drain's flag name on its command line (--name=V or --name V, one dash or two),
// up to a "--".
func (in *injection) flag(name string) (string, bool) {
	for i, w := range in.words {
		if w == "--" {
			break
		}
		w = strings.TrimPrefix(strings.TrimPrefix(w, "-"), "-")
		if v, ok := strings.CutPrefix(w, name+"="); ok {
			return v, true
		}
		if w == name && i+1 < len(in.words) {
			return in.words[i+1], true
		}
	}
	return "", false
}

// duration is the drain's duration flag name, or def when it is not given.
func (in *injection) duration(name string, def time.Duration) (time.Duration, error) {
	v, ok := in.flag(name)
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: %w", name, v, err)
	}
	return d, nil
}

// grace compares the pod's terminationGracePeriodSeconds with what the drain written into it needs
// (inject.GraceNeeded: the drain timeout plus the mode's margin), as inject sized it. Agent mode without
// --drain-timeout derives it from --termination-grace-period, as run does.
func (in *injection) grace() Finding {
	f := Finding{Check: CheckGrace}
	have := int64(inject.DefaultGrace / time.Second)
	if g := in.pod.Spec.TerminationGracePeriodSeconds; g != nil {
		have = *g
	}
	margin := inject.Margin(in.st.Mode)
	timeout, from, bad := in.drainTimeout()
	if bad != nil {
		bad.Check = CheckGrace
		return *bad
	}
	need := inject.GraceNeeded(in.st.Mode, timeout)
	floor, err := in.floor()
	if err != nil {
		f.Result, f.Reason = ResultFail, err.Error()
		return f
	}
	switch {
	case have < need:
		f.Result = ResultFail
		f.Reason = fmt.Sprintf("terminationGracePeriodSeconds %d < %d needed: drain timeout %s (%s) + %s %s margin; kubelet kills Envoy %ds into the drain (re-inject to raise it, or lower --drain-timeout)",
			have, need, timeout, from, margin, in.st.Mode, max(have-int64(margin/time.Second), 0))
	case timeout <= floor:
		f.Result = ResultFail
		f.Reason = fmt.Sprintf("drain timeout %s (%s) is not above --drain-delay + --min-drain-duration = %s: the drain refuses to start", timeout, from, floor)
	default:
		f.Result = ResultOK
		f.Reason = fmt.Sprintf("terminationGracePeriodSeconds %d >= %d needed: drain timeout %s (%s) + %s %s margin", have, need, timeout, from, margin, in.st.Mode)
	}
	return f
}

// drainTimeout is the drain's timeout as its command line sets it, and where from; agent mode without
// --drain-timeout derives it from --termination-grace-period, as run does. A finding (its Check unset) when it
// cannot be told.
func (in *injection) drainTimeout() (time.Duration, string, *Finding) {
	d, err := in.duration(drainflag.DrainTimeout.Name, -1)
	switch {
	case err != nil:
		return 0, "", &Finding{Result: ResultFail, Reason: err.Error()}
	case d >= 0:
		return d, "--drain-timeout " + d.String(), nil
	case in.st.Mode == inject.ModeAgent:
		margin := inject.Margin(in.st.Mode)
		tgp, err := in.duration("termination-grace-period", -1)
		if err != nil || tgp < 0 {
			return 0, "", &Finding{Result: ResultUnknown, Reason: "run has neither --drain-timeout nor --termination-grace-period: the drain timeout is run's default"}
		}
		return tgp - margin, "--termination-grace-period " + tgp.String() + " - " + margin.String(), nil
	}
	return 0, "", &Finding{Result: ResultUnknown, Reason: "the drain's command line sets no --drain-timeout: the drain uses its default"}
}

// deregistrationDelay is the load balancer's deregistration delay to check the pod against: --deregistration-delay
// when given, else the one inject was given for the pod (its status annotation's settings), else 0 (no check).
func (in *injection) deregistrationDelay(flag time.Duration) time.Duration {
	if flag > 0 {
		return flag
	}
	return inject.RecordedDeregistrationDelay(in.st)
}

// deregistration says whether the drain holds for a load balancer that may send new connections for lb after the
// pod starts terminating: past its floor the drain waits while arrivals continue, within its timeout, so the
// timeout must cover lb and then the quiet period's silence (a fixed --quiet-period, or auto's upper bound,
// drain.AdaptiveQuietMax: a sparse source can need it all). Short of lb it fails; short of the silence it warns.
func (in *injection) deregistration(lb time.Duration) Finding {
	f := Finding{Check: CheckDeregistration}
	timeout, from, bad := in.drainTimeout()
	if bad != nil {
		bad.Check = CheckDeregistration
		return *bad
	}
	var fixed *time.Duration
	what := "--quiet-period auto's upper bound"
	switch v, ok := in.flag(drainflag.QuietPeriod.Name); {
	case !ok || v == "auto":
	default:
		d, err := time.ParseDuration(v)
		if err != nil {
			f.Result, f.Reason = ResultFail, fmt.Sprintf("--quiet-period %q: %v", v, err)
			return f
		}
		fixed, what = &d, "--quiet-period "+v
	}
	var floor time.Duration
	if fixed != nil && *fixed == 0 { // the floor matters only without a quiet period
		var err error
		if floor, err = in.floor(); err != nil {
			f.Result, f.Reason = ResultFail, err.Error()
			return f
		}
	}
	need := inject.DeregistrationNeed(lb, fixed)
	quiet := need - lb
	fix := fmt.Sprintf("--drain-timeout %s and a grace period of %ds", need, inject.GraceNeeded(in.st.Mode, need))
	switch inject.DeregistrationFit(lb, timeout, floor, fixed) {
	case inject.GapFloor:
		f.Result = ResultFail
		f.Reason = fmt.Sprintf("--quiet-period 0: the drain does not wait for new connections to stop, and its floor (drain delay + minimum drain duration: %s) < %s the load balancer may keep sending: Envoy stops while they still come (want a quiet period, or a minimum drain duration that covers it)", floor, lb)
	case inject.GapTimeout:
		f.Result = ResultFail
		f.Reason = fmt.Sprintf("drain timeout %s (%s) < %s the load balancer may keep sending: the drain releases, and Envoy stops, while new connections still come (want %s)", timeout, from, lb, fix)
	case inject.GapSilence:
		f.Result = ResultWarn
		f.Reason = fmt.Sprintf("drain timeout %s (%s) leaves %s after the load balancer's %s, less than the %s of silence the quiet period may want (%s) (want %s)", timeout, from, timeout-lb, lb, quiet, what, fix)
	default:
		f.Result = ResultOK
		f.Reason = fmt.Sprintf("drain timeout %s (%s) >= %s the load balancer may keep sending + %s of silence (%s)", timeout, from, lb, quiet, what)
	}
	return f
}

// floor is the drain's --drain-delay plus --min-drain-duration (their defaults when not given).
func (in *injection) floor() (time.Duration, error) {
	delay, err := in.duration(drainflag.DrainDelay.Name, inject.DefaultDrainDelay)
	if err != nil {
		return 0, err
	}
	minimum, err := in.duration(drainflag.MinDrainDuration.Name, inject.DefaultMinDrainDuration)
	if err != nil {
		return 0, err
	}
	return delay + minimum, nil
}

// sidecarDefaultAdmin is serve's --admin-address when none is given.
const sidecarDefaultAdmin = "http://127.0.0.1:9901"

// admin says whether the drain's container can reach the admin address it will use: a unix socket must be in a
// volume both Envoy's container and the drain's mount at the same place (issue 27 N1: a sidecar without the
// socket's volume drains nothing); TCP is the pod's one network. l, the manager's own /status when it was
// read, adds what it saw: Envoy's state (the admin answered) or its error.
func (in *injection) admin(l *Live) Finding {
	f := Finding{Check: CheckAdmin}
	addr, given := in.flag("admin-address")
	sameContainer := in.drainer == in.envoy
	switch {
	case !given && sameContainer:
		f.Result, f.Reason = ResultOK, "the drain runs in Envoy's own container ("+in.envoy.Name+") and reads the admin address from Envoy's process at drain time"
	case !given:
		addr = sidecarDefaultAdmin
		f.Result, f.Reason = ResultUnknown, fmt.Sprintf("%s (serve's default: no --admin-address): the pod spec does not say Envoy's admin listens there (give --admin-address at inject; --live reads the sidecar's view)", addr)
	case !strings.HasPrefix(addr, "unix://"):
		f.Result, f.Reason = ResultOK, fmt.Sprintf("%s (TCP): the pod's containers share one network", addr)
	case sameContainer:
		f.Result, f.Reason = ResultOK, fmt.Sprintf("%s: in Envoy's own container (%s)", addr, in.envoy.Name)
	default:
		f = socketShared(in.envoy, in.drainer, addr)
	}
	switch {
	case l == nil:
	case l.Error != "":
		f.Reason += "; live: " + l.Error
	case l.Envoy != "" && l.Exec != nil:
		// The drain's own binary, in the drain's own container, reached Envoy: whatever the spec let us see.
		f.Result = ResultOK
		f.Reason += fmt.Sprintf("; live: `%s status`, run in container %s, read Envoy's state (%s) at %s", path.Base(l.Exec.Command[0]), l.Exec.Container, l.Envoy, l.Exec.Admin)
	case l.Envoy != "":
		if f.Result == ResultUnknown {
			f.Result = ResultOK
		}
		f.Reason += fmt.Sprintf("; live: the manager read Envoy's state (%s) there", l.Envoy)
	case l.LastError != "":
		f.Result = ResultFail
		f.Reason += "; live: the manager cannot read Envoy: " + l.LastError
	}
	return f
}

// socketShared says whether the unix socket addr that Envoy's container listens on is in a volume the drain's
// container mounts at the same path: the same volume, the same subPath, the same mount path.
func socketShared(envoy, drainer *corev1.Container, addr string) Finding {
	dir := path.Dir(path.Clean(strings.TrimPrefix(addr, "unix://")))
	fail := func(format string, a ...any) Finding {
		return Finding{CheckAdmin, ResultFail, fmt.Sprintf(format, a...)}
	}
	em, ok := mountOf(envoy, dir)
	if !ok {
		return fail("%s: in container %q's own filesystem (no volume mounted at %s or above): %q cannot reach it, the drain would find no Envoy (use hook mode, or an emptyDir for the socket, and re-inject)", addr, envoy.Name, dir, drainer.Name)
	}
	dm, ok := mountOf(drainer, dir)
	if !ok {
		return fail("%s: Envoy's container mounts volume %q at %s, container %q mounts nothing at %s: the drain would find no Envoy (re-inject: inject mounts it)", addr, em.Name, em.MountPath, drainer.Name, dir)
	}
	if dm.Name != em.Name || path.Clean(dm.MountPath) != path.Clean(em.MountPath) || dm.SubPath != em.SubPath || em.SubPathExpr != "" || dm.SubPathExpr != "" {
		return fail("%s: Envoy's container has volume %q at %s (subPath %q), container %q has volume %q at %s (subPath %q): not the same directory", addr,
			em.Name, em.MountPath, em.SubPath+em.SubPathExpr, drainer.Name, dm.Name, dm.MountPath, dm.SubPath+dm.SubPathExpr)
	}
	return Finding{CheckAdmin, ResultOK, fmt.Sprintf("%s: volume %q at %s in both Envoy's container and %q", addr, em.Name, em.MountPath, drainer.Name)}
}

// mountOf is the mount of c that holds dir: the one with the longest mount path at dir or above it.
func mountOf(c *corev1.Container, dir string) (corev1.VolumeMount, bool) {
	best, found := corev1.VolumeMount{}, false
	for _, m := range c.VolumeMounts {
		mp := path.Clean(m.MountPath)
		if !(dir == mp || mp == "/" || strings.HasPrefix(dir, mp+"/")) {
			continue
		}
		if !found || len(mp) > len(path.Clean(best.MountPath)) {
			best, found = m, true
		}
	}
	return best, found
}

// eventsToken says whether the drain's container can record Events at all: the variables naming its pod and
// a ServiceAccount token (the pod's, or the manager's own where the pod turns automount off). ok: then the
// ServiceAccount's right is asked (reviewEvents).
func (in *injection) eventsToken() Finding {
	f := Finding{Check: CheckEvents, Result: ResultFail}
	c := in.drainer
	for _, name := range []string{events.EnvPodName, events.EnvPodNamespace} {
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name }) {
			f.Reason = fmt.Sprintf("container %q has no %s: the manager cannot name its pod and records no Events (re-inject)", c.Name, name)
			return f
		}
	}
	for _, m := range c.VolumeMounts {
		switch path.Clean(m.MountPath) {
		case inject.APIAccessDir:
			f.Result, f.Reason = ResultOK, fmt.Sprintf("container %q has the manager's own token (%s)", c.Name, inject.APIAccessDir)
			return f
		case events.ServiceAccountDir:
			f.Result, f.Reason = ResultOK, fmt.Sprintf("container %q has the pod's ServiceAccount token", c.Name)
			return f
		}
	}
	f.Reason = fmt.Sprintf("container %q has no ServiceAccount token (automountServiceAccountToken is off and inject added none: --api-token=false?): Events are only logged", c.Name)
	return f
}

// reviewEvents asks the API server whether ServiceAccount sa of ns may create events.k8s.io Events in ns (the
// API the manager writes), with a LocalSubjectAccessReview: a namespaced review, which a Role in the namespace can
// allow its caller to make (a SubjectAccessReview would need a ClusterRole). The groups are those a
// ServiceAccount's token authenticates with, so a binding to system:serviceaccounts:NS counts.
func reviewEvents(ctx context.Context, api API, ns, sa string) Finding {
	user := "system:serviceaccount:" + ns + ":" + sa
	review := map[string]any{
		"apiVersion": "authorization.k8s.io/v1",
		"kind":       "LocalSubjectAccessReview",
		"metadata":   map[string]any{"namespace": ns},
		"spec": map[string]any{
			"user":   user,
			"groups": []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			"resourceAttributes": map[string]any{
				"namespace": ns, "verb": "create", "group": "events.k8s.io", "resource": "events",
			},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return Finding{CheckEvents, ResultUnknown, fmt.Sprintf("encoding the review: %v", err)}
	}
	answer, err := api.Post(ctx, "/apis/authorization.k8s.io/v1/namespaces/"+url.PathEscape(ns)+"/localsubjectaccessreviews", body)
	switch {
	case apierrors.IsForbidden(err):
		return Finding{CheckEvents, ResultUnknown, fmt.Sprintf("cannot ask whether %s may create Events: you may not create localsubjectaccessreviews (authorization.k8s.io) in %s", user, ns)}
	case err != nil:
		return Finding{CheckEvents, ResultUnknown, fmt.Sprintf("asking whether %s may create Events: %v", user, err)}
	}
	var r struct {
		Status struct {
			Allowed         bool   `json:"allowed"`
			Denied          bool   `json:"denied"`
			Reason          string `json:"reason"`
			EvaluationError string `json:"evaluationError"`
		} `json:"status"`
	}
	if err := json.Unmarshal(answer, &r); err != nil {
		return Finding{CheckEvents, ResultUnknown, fmt.Sprintf("decoding the review's answer: %v", err)}
	}
	return reviewFinding(user, ns, r.Status.Allowed, r.Status.Reason, r.Status.EvaluationError)
}

// reviewFinding is the events check for the API server's answer to the review.
func reviewFinding(user, ns string, allowed bool, reason, evalErr string) Finding {
	if allowed {
		return Finding{CheckEvents, ResultOK, fmt.Sprintf("%s may create events (events.k8s.io) in %s", user, ns)}
	}
	why := ""
	if reason != "" {
		why = " (" + reason + ")"
	}
	if evalErr != "" {
		why += " (evaluation error: " + evalErr + ")"
	}
	return Finding{CheckEvents, ResultFail, fmt.Sprintf("%s may not create events (events.k8s.io) in %s%s: the drain's Events are refused (bind it a Role like deploy/common/envoy-events-rbac.yaml's)", user, ns, why)}
}

// pullFailures are the reasons kubelet gives a container waiting for an image it could not pull.
var pullFailures = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable", "SignatureValidationFailed"}

// image says whether kubelet pulled the manager's image, from the statuses of the containers inject added
// (imageID set: pulled; waiting for a pull that failed: its message), and, for an image volume, from Envoy's
// container (it cannot start without its volumes).
func (in *injection) image() Finding {
	type one struct{ result, reason string }
	var all []one
	statuses := append(slices.Clone(in.pod.Status.InitContainerStatuses), in.pod.Status.ContainerStatuses...)
	status := func(name string) *corev1.ContainerStatus {
		for i := range statuses {
			if statuses[i].Name == name {
				return &statuses[i]
			}
		}
		return nil
	}
	for _, name := range append(slices.Clone(in.st.InitContainers), in.st.Containers...) {
		s := status(name)
		switch {
		case s == nil:
			all = append(all, one{ResultUnknown, fmt.Sprintf("%s: no status from kubelet yet", name)})
		case s.State.Waiting != nil && slices.Contains(pullFailures, s.State.Waiting.Reason):
			all = append(all, one{ResultFail, fmt.Sprintf("%s: %s: %s", name, s.State.Waiting.Reason, s.State.Waiting.Message)})
		case s.ImageID != "":
			all = append(all, one{ResultOK, fmt.Sprintf("%s: pulled (%s)", name, s.ImageID)})
		case s.State.Waiting != nil:
			all = append(all, one{ResultUnknown, fmt.Sprintf("%s: waiting (%s), no image yet", name, s.State.Waiting.Reason)})
		default:
			all = append(all, one{ResultUnknown, fmt.Sprintf("%s: no image ID in its status", name)})
		}
	}
	if in.st.BinaryFrom == inject.BinaryImageVolume {
		s := status(in.envoy.Name)
		switch {
		case s == nil:
			all = append(all, one{ResultUnknown, "image volume: Envoy's container has no status from kubelet yet"})
		case s.State.Running != nil || s.State.Terminated != nil:
			all = append(all, one{ResultOK, "image volume: mounted (Envoy's container started)"})
		case s.State.Waiting != nil && s.State.Waiting.Message != "":
			all = append(all, one{ResultUnknown, fmt.Sprintf("image volume: Envoy's container waits (%s: %s)", s.State.Waiting.Reason, s.State.Waiting.Message)})
		default:
			all = append(all, one{ResultUnknown, "image volume: Envoy's container has not started"})
		}
	}
	if len(all) == 0 {
		return Finding{CheckImage, ResultUnknown, "the annotation names no container or image volume of the manager"}
	}
	f := Finding{Check: CheckImage, Result: ResultOK}
	var reasons []string
	for _, o := range all {
		f.Result = worse(f.Result, o.result)
		reasons = append(reasons, o.reason)
	}
	f.Reason = strings.Join(reasons, "; ")
	return f
}

// worse is the worse of two results: fail, then unknown, then warn, then ok.
func worse(a, b string) string {
	rank := map[string]int{ResultOK: 0, ResultWarn: 1, ResultUnknown: 2, ResultFail: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

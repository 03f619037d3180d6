package webhook

import (
	"errors"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// Outcome is what became of one admission request; it labels the requests metric.
type Outcome string

const (
	// OutcomeInjected: the pod was changed (the response carries a patch).
	OutcomeInjected Outcome = "injected"
	// OutcomeUnchanged: the pod was already injected exactly as it would be (a reinvocation): no patch.
	OutcomeUnchanged Outcome = "unchanged"
	// OutcomeSkipped: not ours to mutate (opted out, kube-system, our own pod, not a CREATE, no Envoy in a pod
	// opted in only by its namespace); admitted unchanged, silently.
	OutcomeSkipped Outcome = "skipped"
	// OutcomeWarning: the pod asked for the manager but cannot have it (no Envoy container, a bad annotation);
	// admitted unchanged with a warning to the client and an Event on its owner. It never blocks the pod.
	OutcomeWarning Outcome = "warning"
	// OutcomeError: the request itself was bad (method, content type, size, decoding, kind) or the webhook
	// failed; answered with an HTTP error, so the API server applies the configuration's failurePolicy.
	OutcomeError Outcome = "error"
)

// Outcomes lists every Outcome, for metrics initialisation and tests.
var Outcomes = []Outcome{OutcomeInjected, OutcomeUnchanged, OutcomeSkipped, OutcomeWarning, OutcomeError}

// Review is what the policy sees of one admission request: already decoded and checked by the transport.
type Review struct {
	Namespace string // the request's namespace (a pod being created may not carry it yet)
	Operation admissionv1.Operation
	Pod       *corev1.Pod // not modified by Decide
}

// Decision is the policy's answer.
type Decision struct {
	Outcome Outcome
	// Pod is the pod to store when Outcome is OutcomeInjected (a modified copy); nil otherwise.
	Pod *corev1.Pod
	// Reason says why the pod was skipped, or what prevents its injection (OutcomeWarning); for a pod injected,
	// what the client is warned of (the AdmissionResponse's warnings: a drain timeout too short for the load
	// balancer's deregistration delay it was given), else "".
	Reason string
}

// Decide is the webhook's policy: a pure function of the request and the injection settings, safe for
// concurrent use. It injects the pod with inject.Inject unless the pod is not ours to touch:
//   - an operation other than CREATE (the configuration registers CREATE only);
//   - a pod in kube-system, or one of the shutdown manager's own pods (label inject.LabelName=inject.OwnName);
//   - a pod opted out with the annotation shutdown-manager.io/inject: "false", or the label
//     shutdown-manager.io/inject=false (or disabled).
//
// The selectors of the MutatingWebhookConfiguration (the chart's; names in internal/inject's optin.go) decide who
// is opted in; Decide repeats the two exclusions as a second line of defence, because a selector edited by hand
// must not make the webhook mutate the cluster's system pods or its own replicas (which it could then never
// start again when they all crash).
//
// A pod that cannot be injected is admitted unchanged (never blocked): with a warning when the pod itself asked
// for injection (the pod label, or the inject annotation "true") or carries a bad shutdown-manager.io/
// annotation; silently (skipped) when it has no Envoy container and was opted in only by its namespace, because
// a labelled namespace holds other pods too (jobs, databases) and a warning for each would be noise.
func Decide(r Review, cfg inject.Config) Decision {
	pod := r.Pod
	switch {
	case r.Operation != admissionv1.Create:
		return Decision{Outcome: OutcomeSkipped, Reason: fmt.Sprintf("operation %s: only CREATE is mutated", r.Operation)}
	case r.Namespace == metav1.NamespaceSystem:
		return Decision{Outcome: OutcomeSkipped, Reason: "namespace " + metav1.NamespaceSystem + " is never injected"}
	case pod.Labels[inject.LabelName] == inject.OwnName:
		return Decision{Outcome: OutcomeSkipped, Reason: fmt.Sprintf("the shutdown manager's own pod (label %s=%s)", inject.LabelName, inject.OwnName)}
	case pod.Labels[inject.LabelInject] == inject.InjectFalse || pod.Labels[inject.LabelInject] == inject.InjectDisabled:
		return Decision{Outcome: OutcomeSkipped, Reason: fmt.Sprintf("opted out by label %s=%s", inject.LabelInject, pod.Labels[inject.LabelInject])}
	}
	out := pod.DeepCopy()
	err := inject.Inject(&out.ObjectMeta, &out.Spec, cfg)
	switch {
	case err == nil:
		inject.MountServiceAccount(&out.Spec)
		d := Decision{Outcome: OutcomeInjected, Pod: out}
		if st, ok, err := inject.ParseStatus(&out.ObjectMeta); ok && err == nil {
			d.Reason = inject.DeregistrationShortfall(st)
		}
		return d
	case errors.Is(err, inject.ErrOptedOut):
		return Decision{Outcome: OutcomeSkipped, Reason: err.Error()}
	case errors.Is(err, inject.ErrNoEnvoy) && !askedFor(pod):
		return Decision{Outcome: OutcomeSkipped, Reason: err.Error()}
	default:
		return Decision{Outcome: OutcomeWarning, Reason: err.Error()}
	}
}

// askedFor reports whether the pod itself asked for the manager, rather than only its namespace.
func askedFor(pod *corev1.Pod) bool {
	return pod.Labels[inject.LabelInject] == inject.InjectEnabled || pod.Annotations[inject.AnnotationInject] == inject.InjectTrue
}

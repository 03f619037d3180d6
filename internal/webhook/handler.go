// Package webhook is the mutating admission webhook for Pods (admission.k8s.io/v1): the transport in this file
// (method, content type, size limit, decoding and checking the AdmissionReview, the JSONPatch, encoding, a
// recovered panic turned into an error answer) apart from the policy in decide.go (Decide: whether and how a
// pod is injected, a pure function over typed objects calling inject.Inject), plus the serving certificate
// reloaded from files (certs.go), the health endpoints (health.go), and the audit of the pods admitted without the
// manager while the webhook could not be called (audit.go).
//
// The webhook never rejects a pod itself: a pod it cannot or must not inject is admitted unchanged, and a
// request it cannot answer gets an HTTP error status, which the API server treats as a failed call and so
// resolves with the configuration's failurePolicy (Ignore: the pod is created without the manager).
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
)

// Path is where the API server sends pods (the MutatingWebhookConfiguration's service path or URL path).
const Path = "/mutate-pods"

// MaxRequestBytes bounds an AdmissionReview's body: 3 MiB, the API server's own limit on a request body
// (a pod, its old object and the review around them fit with room to spare; etcd refuses objects over 1.5 MiB).
const MaxRequestBytes = 3 << 20

// Decider is the policy: Decide with the injection settings bound. It must be safe for concurrent use and must
// not modify the pod it is given.
type Decider func(Review) Decision

// Owner names the object that owns a pod (its controller), or the pod itself when it has none.
type Owner struct {
	APIVersion, Kind, Namespace, Name string
	UID                               types.UID
}

// OwnerEvents records an Event on the owner of a pod the webhook could not inject, so that the team owning the
// workload sees it in `kubectl describe` and `kubectl get events`, not only the client that created the pod (the
// warning). It is called on the admission's path and must return at once (queue, never block on the API).
// It is not called for dry-run requests: the webhook declares sideEffects None.
type OwnerEvents interface {
	NotInjected(ctx context.Context, owner Owner, message string)
}

// ReasonNotInjected is the reason of the Event OwnerEvents records.
const ReasonNotInjected = "ShutdownManagerNotInjected"

var (
	_ OwnerEvents  = LogEvents{}
	_ http.Handler = (*Handler)(nil)
)

// LogEvents is an OwnerEvents that only logs (at warn), for a webhook without an Events client.
type LogEvents struct{ Log *slog.Logger }

// NotInjected logs the Event it would record.
func (l LogEvents) NotInjected(_ context.Context, owner Owner, message string) {
	l.Log.Warn("pod not injected", "reason", ReasonNotInjected, "owner_kind", owner.Kind, "owner_namespace", owner.Namespace,
		"owner_name", owner.Name, "message", message)
}

// Options configure the handler.
type Options struct {
	Decide Decider // required
	Events OwnerEvents
	Log    *slog.Logger
	// Registerer receives the webhook's metrics; nil: not registered.
	Registerer prometheus.Registerer
}

// Handler serves POST Path. Create it with New.
type Handler struct {
	decide  Decider
	events  OwnerEvents
	log     *slog.Logger
	metrics *metrics
}

// New returns the webhook's handler.
func New(opts Options) *Handler {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	events := opts.Events
	if events == nil {
		events = LogEvents{Log: log}
	}
	return &Handler{decide: opts.Decide, events: events, log: log, metrics: newMetrics(opts.Registerer)}
}

// Mux returns a private mux serving the handler at Path (every method reaches it, so that a wrong method gets
// the handler's own error answer).
func (h *Handler) Mux() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(Path, h)
	return mux
}

// requestError is an answer the handler gives instead of a review response: an HTTP status and a message.
// It is written by writeError and never travels as an error value, so it has no Error method.
type requestError struct {
	code int
	msg  string
}

func badRequest(format string, args ...any) *requestError {
	return &requestError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// ServeHTTP answers one AdmissionReview: 200 with an AdmissionReview admission.k8s.io/v1 whose response allows
// the pod (with a JSONPatch when it was injected, with warnings when it could not be), or an error status (400
// bad review, 405 method, 413 too large, 415 content type, 500 internal) with a metav1.Status whose message
// names the problem and, when one was read, the request's UID (also in its details): see writeError.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	var uid types.UID
	outcome := OutcomeError
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("webhook panic", "uid", uid, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			outcome = OutcomeError
			writeError(w, uid, &requestError{http.StatusInternalServerError, fmt.Sprintf("internal error: %v", p)})
		}
		h.metrics.observe(outcome, time.Since(began))
	}()

	review, reqErr := readReview(r)
	if review != nil && review.Request != nil {
		uid = review.Request.UID
	}
	if reqErr != nil {
		h.log.Warn("bad admission request", "uid", uid, "status", reqErr.code, "err", reqErr.msg)
		writeError(w, uid, reqErr)
		return
	}
	req := review.Request
	if req.Operation == admissionv1.Delete || req.Operation == admissionv1.Connect {
		// Only CREATE is registered; a rule edited by hand that sends these must not block them (an error
		// answer under failurePolicy Fail would refuse `kubectl delete pod` or `kubectl exec`): allowed as is.
		outcome = OutcomeSkipped
		h.log.Debug("admission", "uid", uid, "namespace", req.Namespace, "operation", string(req.Operation), "outcome", string(outcome),
			"reason", "only CREATE is mutated")
		writeReview(w, http.StatusOK, &admissionv1.AdmissionResponse{UID: uid, Allowed: true})
		return
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
		h.log.Warn("bad admission request", "uid", uid, "err", err)
		writeError(w, uid, badRequest("decoding the pod in request.object: %v", err))
		return
	}
	// managedFields are no business of the policy's, and the patch must not touch them: dropped before both.
	pod.ManagedFields = nil
	d := h.decide(Review{Namespace: req.Namespace, Operation: req.Operation, Pod: pod})
	resp := &admissionv1.AdmissionResponse{UID: uid, Allowed: true}
	switch d.Outcome {
	case OutcomeInjected:
		patch, err := diff(pod, d.Pod)
		if err != nil {
			h.log.Error("computing the patch", "uid", uid, "err", err)
			writeError(w, uid, &requestError{http.StatusInternalServerError, fmt.Sprintf("computing the patch: %v", err)})
			return
		}
		if patch == nil {
			d.Outcome = OutcomeUnchanged
			break
		}
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &pt
		if d.Reason != "" {
			resp.Warnings = []string{events.Note("shutdown-manager: " + d.Reason)}
		}
	case OutcomeWarning:
		// Bounded: the API server refuses an Event whose note is over events.MaxNote (the owner would never see
		// it), and a warning that long is noise to the client.
		msg := events.Note("shutdown-manager: pod not injected: " + d.Reason)
		resp.Warnings = []string{msg}
		if req.DryRun == nil || !*req.DryRun {
			h.events.NotInjected(r.Context(), ownerOf(pod, req.Namespace), msg)
		}
	}
	outcome = d.Outcome
	h.log.Debug("admission", "uid", uid, "namespace", req.Namespace, "pod", podName(pod), "outcome", string(outcome), "reason", d.Reason)
	writeReview(w, http.StatusOK, resp)
}

// readReview checks the HTTP request and decodes and checks the review. The review is returned, when decoded,
// even with an error, so that the error answer can carry its UID.
func readReview(r *http.Request) (*admissionv1.AdmissionReview, *requestError) {
	if r.Method != http.MethodPost {
		return nil, &requestError{http.StatusMethodNotAllowed, fmt.Sprintf("method %s: only POST is served at %s", r.Method, Path)}
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return nil, &requestError{http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q: want application/json", ct)}
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxRequestBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, &requestError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", MaxRequestBytes)}
	}
	if err != nil {
		return nil, badRequest("reading the request body: %v", err)
	}
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(body, review); err != nil {
		return nil, badRequest("decoding the AdmissionReview: %v", err)
	}
	if review.Request == nil {
		return review, badRequest("AdmissionReview without a request")
	}
	if gv := review.APIVersion; gv != admissionv1.SchemeGroupVersion.String() || review.Kind != "AdmissionReview" {
		return review, badRequest("got %s %q: only AdmissionReview admission.k8s.io/v1 is served (admissionReviewVersions: [v1])", orNone(review.Kind), gv)
	}
	req := review.Request
	if req.UID == "" {
		return review, badRequest("AdmissionReview request without a uid")
	}
	if req.Operation == admissionv1.Delete || req.Operation == admissionv1.Connect {
		return review, nil // allowed unchanged by ServeHTTP, whatever the object (none for DELETE, options for CONNECT)
	}
	if req.Kind != podKind || req.Resource != podResource || req.SubResource != "" {
		return review, badRequest("got kind %s, resource %s%s: only pods (v1 Pod) are mutated; check the rules of the MutatingWebhookConfiguration",
			gvkText(req.Kind), gvrText(req.Resource), subText(req.SubResource))
	}
	if len(req.Object.Raw) == 0 {
		return review, badRequest("AdmissionReview request without an object")
	}
	return review, nil
}

var (
	podKind     = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	podResource = metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
)

// diff is the JSONPatch from before to after, nil when they are the same. Both are marshalled from the typed
// Pod (without managedFields, which ServeHTTP drops first: the patch never touches them, and they are the bulk
// of a pod's metadata), so fields this version of k8s.io/api does not know, which a newer API server may send,
// are in neither, and no operation removes them.
func diff(before, after *corev1.Pod) ([]byte, error) {
	bj, err := json.Marshal(before)
	if err != nil {
		return nil, fmt.Errorf("encoding the pod: %w", err)
	}
	aj, err := json.Marshal(after)
	if err != nil {
		return nil, fmt.Errorf("encoding the injected pod: %w", err)
	}
	ops, err := jsonpatch.CreatePatch(bj, aj)
	if err != nil {
		return nil, fmt.Errorf("diffing the pod: %w", err)
	}
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}

// ownerOf is the pod's controller (else its first owner), else the pod itself.
func ownerOf(pod *corev1.Pod, namespace string) Owner {
	refs := pod.OwnerReferences
	for _, ref := range refs {
		if ref.Controller != nil && *ref.Controller {
			return Owner{ref.APIVersion, ref.Kind, namespace, ref.Name, ref.UID}
		}
	}
	if len(refs) > 0 {
		return Owner{refs[0].APIVersion, refs[0].Kind, namespace, refs[0].Name, refs[0].UID}
	}
	return Owner{"v1", "Pod", namespace, podName(pod), pod.UID}
}

// podName is the pod's name, or its generateName followed by "*" when the API server has yet to choose it.
func podName(pod *corev1.Pod) string {
	if pod.Name == "" && pod.GenerateName != "" {
		return pod.GenerateName + "*"
	}
	return pod.Name
}

// writeError answers a request the webhook cannot answer with a review: the error status and a metav1.Status
// naming the problem, with the request's UID in its details and message. The API server reads a Status in an
// error answer and quotes its message (`failed calling webhook "…": failed to call webhook: <message>`, in its
// log and, with failurePolicy Fail, to the client); any other body it reports as "the server rejected our
// request for an unknown reason" (both seen on the real 1.36 API server, test/kube).
func writeError(w http.ResponseWriter, uid types.UID, e *requestError) {
	msg := e.msg
	if uid != "" {
		msg += " (request uid " + string(uid) + ")"
	}
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure,
		Code:     int32(e.code),
		Reason:   statusReason(e.code),
		Message:  "shutdown-manager webhook: " + msg,
		Details:  &metav1.StatusDetails{UID: uid},
	}
	body, err := json.Marshal(st)
	if err != nil { // cannot happen for this type
		http.Error(w, st.Message, e.code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.code)
	_, _ = w.Write(body)
}

func statusReason(code int) metav1.StatusReason {
	switch code {
	case http.StatusMethodNotAllowed:
		return metav1.StatusReasonMethodNotAllowed
	case http.StatusRequestEntityTooLarge:
		return metav1.StatusReasonRequestEntityTooLarge
	case http.StatusUnsupportedMediaType:
		return metav1.StatusReasonUnsupportedMediaType
	case http.StatusInternalServerError:
		return metav1.StatusReasonInternalError
	default:
		return metav1.StatusReasonBadRequest
	}
}

func writeReview(w http.ResponseWriter, code int, resp *admissionv1.AdmissionResponse) {
	out := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: resp,
	}
	body, err := json.Marshal(out)
	if err != nil { // cannot happen for these types; answered so the API server still sees a failure
		http.Error(w, "encoding the response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func gvkText(k metav1.GroupVersionKind) string {
	return orNone(k.Kind) + " " + orNone(groupVersion(k.Group, k.Version))
}

func gvrText(r metav1.GroupVersionResource) string {
	return orNone(r.Resource) + " " + orNone(groupVersion(r.Group, r.Version))
}

func groupVersion(group, version string) string {
	if group == "" {
		return version
	}
	return group + "/" + version
}

func subText(s string) string {
	if s == "" {
		return ""
	}
	return " subresource " + s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

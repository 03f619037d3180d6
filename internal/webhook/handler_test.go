package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	kevents "github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

var testConfig = inject.Config{Image: "shutdown-manager:test", Version: "test"}

func envoyPod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "envoy-", Labels: map[string]string{"app": "envoy"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "envoy", Image: "envoyproxy/envoy:v1.40.0", Command: []string{"envoy"},
			Args: []string{"-c", "/etc/envoy/envoy.yaml"},
		}}},
	}
}

func appPod() *corev1.Pod {
	p := envoyPod()
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "nginx:1.29"}}
	return p
}

// review encodes an AdmissionReview v1 for pod; edit changes the request before encoding.
func review(t testing.TB, pod *corev1.Pod, edit func(*admissionv1.AdmissionReview)) []byte {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	r := &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "0f1e2d3c-uid",
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: "apps",
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: raw},
		},
	}
	if edit != nil {
		edit(r)
	}
	body, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// recordedEvents is a hand-written OwnerEvents that keeps what it was given.
type recordedEvents struct {
	mu     sync.Mutex
	owners []Owner
	msgs   []string
}

func (e *recordedEvents) NotInjected(_ context.Context, owner Owner, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.owners = append(e.owners, owner)
	e.msgs = append(e.msgs, message)
}

// served is an answer: a review (200) or a Status (an error).
type served struct {
	code   int
	review admissionv1.AdmissionReview
	status metav1.Status
}

func serve(t testing.TB, h http.Handler, method, contentType string, body []byte) served {
	t.Helper()
	req := httptest.NewRequest(method, Path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	out := served{code: rec.Code}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("answer's content type %q, want application/json", ct)
	}
	if rec.Code != http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &out.status); err != nil || out.status.Kind != "Status" || out.status.APIVersion != "v1" {
			t.Fatalf("error answer is not a v1 Status (%v): %q", err, rec.Body.String())
		}
		return out
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out.review); err != nil {
		t.Fatalf("answer is not JSON: %v: %q", err, rec.Body.String())
	}
	if out.review.Response == nil {
		t.Fatalf("answer without a response: %s", rec.Body.String())
	}
	if out.review.APIVersion != "admission.k8s.io/v1" || out.review.Kind != "AdmissionReview" {
		t.Fatalf("answer is %s %s, want AdmissionReview admission.k8s.io/v1", out.review.Kind, out.review.APIVersion)
	}
	return out
}

func newHandler(reg prometheus.Registerer, events OwnerEvents) *Handler {
	return New(Options{Decide: func(r Review) Decision { return Decide(r, testConfig) }, Events: events, Registerer: reg})
}

func TestServeHTTPErrors(t *testing.T) {
	tests := []struct {
		name        string
		method      string
		contentType string
		body        []byte
		wantCode    int
		wantUID     types.UID
		wantMsg     string
	}{
		{"method", http.MethodGet, "application/json", nil, 405, "", "method GET"},
		{"content type", http.MethodPost, "text/plain", review(t, envoyPod(), nil), 415, "", `content type "text/plain"`},
		{"no content type", http.MethodPost, "", review(t, envoyPod(), nil), 415, "", `content type ""`},
		{"too large", http.MethodPost, "application/json", bytes.Repeat([]byte(" "), MaxRequestBytes+1), 413, "", "over 3145728 bytes"},
		{"not JSON", http.MethodPost, "application/json", []byte("{"), 400, "", "decoding the AdmissionReview"},
		{"no request", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), 400, "", "without a request"},
		{"v1beta1", http.MethodPost, "application/json", review(t, envoyPod(), func(r *admissionv1.AdmissionReview) {
			r.APIVersion = "admission.k8s.io/v1beta1"
		}), 400, "0f1e2d3c-uid", `AdmissionReview "admission.k8s.io/v1beta1": only AdmissionReview admission.k8s.io/v1`},
		{"no uid", http.MethodPost, "application/json", review(t, envoyPod(), func(r *admissionv1.AdmissionReview) {
			r.Request.UID = ""
		}), 400, "", "without a uid"},
		{"wrong kind", http.MethodPost, "application/json", review(t, envoyPod(), func(r *admissionv1.AdmissionReview) {
			r.Request.Kind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
			r.Request.Resource = metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
		}), 400, "0f1e2d3c-uid", "got kind Deployment apps/v1, resource deployments apps/v1: only pods"},
		{"subresource", http.MethodPost, "application/json", review(t, envoyPod(), func(r *admissionv1.AdmissionReview) {
			r.Request.SubResource = "ephemeralcontainers"
		}), 400, "0f1e2d3c-uid", "subresource ephemeralcontainers"},
		{"no object", http.MethodPost, "application/json", review(t, envoyPod(), func(r *admissionv1.AdmissionReview) {
			r.Request.Object.Raw = nil
		}), 400, "0f1e2d3c-uid", "without an object"},
		{"object not a pod", http.MethodPost, "application/json", review(t, envoyPod(), func(r *admissionv1.AdmissionReview) {
			r.Request.Object.Raw = []byte(`{"spec":{"containers":"envoy"}}`)
		}), 400, "0f1e2d3c-uid", "decoding the pod in request.object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			got := serve(t, newHandler(reg, nil), tt.method, tt.contentType, tt.body)
			st := got.status
			if got.code != tt.wantCode || st.Code != int32(tt.wantCode) || st.Status != metav1.StatusFailure {
				t.Errorf("code %d, status %+v; want %d, Failure", got.code, st, tt.wantCode)
			}
			if !strings.Contains(st.Message, tt.wantMsg) {
				t.Errorf("message %q, want it to contain %q", st.Message, tt.wantMsg)
			}
			if tt.wantUID != "" && (st.Details == nil || st.Details.UID != tt.wantUID || !strings.Contains(st.Message, "(request uid "+string(tt.wantUID)+")")) ||
				tt.wantUID == "" && st.Details != nil && st.Details.UID != "" {
				t.Errorf("status %+v, want the uid %q in its details and message", st, tt.wantUID)
			}
			if n := requests(t, reg, OutcomeError); n != 1 {
				t.Errorf("requests{outcome=error} = %v, want 1", n)
			}
		})
	}
}

// requests reads shutdown_manager_webhook_requests_total{outcome} from reg.
func requests(t testing.TB, reg *prometheus.Registry, o Outcome) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "shutdown_manager_webhook_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == string(o) {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no requests counter for outcome %s", o)
	return 0
}

func TestServeHTTPPanicIsAnErrorWithTheUID(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := New(Options{Decide: func(Review) Decision { panic("policy bug") }, Registerer: reg})
	got := serve(t, h, http.MethodPost, "application/json", review(t, envoyPod(), nil))
	st := got.status
	if got.code != 500 || st.Details == nil || st.Details.UID != "0f1e2d3c-uid" || !strings.Contains(st.Message, "policy bug") {
		t.Errorf("code %d, status %+v; want 500, the uid, a message naming the panic", got.code, st)
	}
	if n := requests(t, reg, OutcomeError); n != 1 {
		t.Errorf("requests{outcome=error} = %v, want 1", n)
	}
}

func TestServeHTTPAnswers(t *testing.T) {
	injected := envoyPod()
	if err := inject.Inject(&injected.ObjectMeta, &injected.Spec, testConfig); err != nil {
		t.Fatal(err)
	}
	explicit := appPod()
	explicit.Labels[inject.LabelInject] = inject.InjectEnabled
	explicit.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d9", UID: "rs-uid", Controller: new(true)}}
	// So many containers that the reason naming them is over the API server's limit on an Event's note.
	crowded := explicit.DeepCopy()
	crowded.Spec.Containers = nil
	for i := range 100 {
		crowded.Spec.Containers = append(crowded.Spec.Containers, corev1.Container{Name: fmt.Sprintf("worker-with-a-long-name-%03d", i), Image: "busybox"})
	}
	optedOut := envoyPod()
	optedOut.Labels[inject.LabelInject] = inject.InjectFalse
	// Injected, with a drain timeout that cannot hold it through its load balancer's deregistration delay.
	shortDrain := envoyPod()
	shortDrain.Annotations = map[string]string{inject.AnnotationDeregistrationDelay: "2m", inject.Prefix + "drain-timeout": "1m"}
	deleteReview := func(r *admissionv1.AdmissionReview) {
		r.Request.Operation = admissionv1.Delete
		r.Request.OldObject, r.Request.Object = r.Request.Object, runtime.RawExtension{}
	}
	connectReview := func(r *admissionv1.AdmissionReview) {
		r.Request.Operation = admissionv1.Connect
		r.Request.Kind = metav1.GroupVersionKind{Version: "v1", Kind: "PodExecOptions"}
		r.Request.SubResource = "exec"
		r.Request.Object = runtime.RawExtension{Raw: []byte(`{"kind":"PodExecOptions","apiVersion":"v1","command":["sh"]}`)}
	}
	tests := []struct {
		name        string
		pod         *corev1.Pod
		edit        func(*admissionv1.AdmissionReview)
		dryRun      bool
		wantOutcome Outcome
		wantPatch   bool
		wantWarning string
		wantEvent   *Owner
	}{
		{name: "injected", pod: envoyPod(), wantOutcome: OutcomeInjected, wantPatch: true},
		{name: "injected, drain timeout short of the deregistration delay", pod: shortDrain, wantOutcome: OutcomeInjected, wantPatch: true,
			wantWarning: "shutdown-manager: drain timeout 1m0s < the load balancer's deregistration delay 2m0s"},
		{name: "already injected", pod: injected, wantOutcome: OutcomeUnchanged},
		{name: "namespace opt-in, no Envoy", pod: appPod(), wantOutcome: OutcomeSkipped},
		{name: "pod opt-in, no Envoy", pod: explicit, wantOutcome: OutcomeWarning, wantWarning: "shutdown-manager: pod not injected: no Envoy container",
			wantEvent: &Owner{"apps/v1", "ReplicaSet", "apps", "web-5d9", "rs-uid"}},
		{name: "pod opt-in, no Envoy, dry run", pod: explicit, dryRun: true, wantOutcome: OutcomeWarning, wantWarning: "no Envoy container"},
		{name: "pod opt-in, no Envoy, 100 containers", pod: crowded, wantOutcome: OutcomeWarning, wantWarning: "worker-with-a-long-name-000",
			wantEvent: &Owner{"apps/v1", "ReplicaSet", "apps", "web-5d9", "rs-uid"}},
		{name: "opted out by label", pod: optedOut, wantOutcome: OutcomeSkipped},
		{name: "DELETE (a rule edited by hand)", pod: envoyPod(), edit: deleteReview, wantOutcome: OutcomeSkipped},
		{name: "CONNECT (a rule edited by hand)", pod: envoyPod(), edit: connectReview, wantOutcome: OutcomeSkipped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			events := &recordedEvents{}
			got := serve(t, newHandler(reg, events), http.MethodPost, "application/json; charset=utf-8", review(t, tt.pod, func(r *admissionv1.AdmissionReview) {
				r.Request.DryRun = &tt.dryRun
				if tt.edit != nil {
					tt.edit(r)
				}
			}))
			resp := got.review.Response
			if got.code != 200 || !resp.Allowed || resp.UID != "0f1e2d3c-uid" {
				t.Fatalf("code %d, response %+v; want 200, allowed, the uid", got.code, resp)
			}
			if gotPatch := resp.Patch != nil; gotPatch != tt.wantPatch || gotPatch != (resp.PatchType != nil) {
				t.Errorf("patch %s (type %v), want a patch: %v", resp.Patch, resp.PatchType, tt.wantPatch)
			}
			if tt.wantPatch && !bytes.Contains(resp.Patch, []byte(`"path":"/metadata/annotations/shutdown-manager.io~1status"`)) &&
				!bytes.Contains(resp.Patch, []byte(`"path":"/metadata/annotations"`)) {
				t.Errorf("patch %s does not add the status annotation", resp.Patch)
			}
			if tt.wantWarning == "" && len(resp.Warnings) > 0 || tt.wantWarning != "" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], tt.wantWarning)) {
				t.Errorf("warnings %q, want one containing %q", resp.Warnings, tt.wantWarning)
			}
			for _, w := range resp.Warnings {
				if len(w) > kevents.MaxNote || !utf8.ValidString(w) {
					t.Errorf("warning of %d bytes (valid UTF-8: %v), want at most %d: the API server refuses a longer Event", len(w), utf8.ValidString(w), kevents.MaxNote)
				}
			}
			switch {
			case tt.wantEvent == nil && len(events.owners) > 0:
				t.Errorf("events on %+v, want none", events.owners)
			case tt.wantEvent != nil && (len(events.owners) != 1 || events.owners[0] != *tt.wantEvent || events.msgs[0] != resp.Warnings[0]):
				t.Errorf("events on %+v (%q), want one on %+v saying the warning", events.owners, events.msgs, *tt.wantEvent)
			}
			for _, o := range Outcomes {
				want := 0.0
				if o == tt.wantOutcome {
					want = 1
				}
				if n := requests(t, reg, o); n != want {
					t.Errorf("requests{outcome=%s} = %v, want %v", o, n, want)
				}
			}
		})
	}
}

// TestDiffKeepsWhatItDoesNotKnow: the patch is computed over typed pods without managedFields, so it never
// touches managedFields nor fields the pod's JSON has that this version of k8s.io/api does not know.
func TestDiffKeepsWhatItDoesNotKnow(t *testing.T) {
	pod := envoyPod()
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	raw = bytes.Replace(raw, []byte(`"spec":{`), []byte(`"spec":{"futureField":{"x":1},`), 1)
	got := serve(t, newHandler(nil, nil), http.MethodPost, "application/json", review(t, pod, func(r *admissionv1.AdmissionReview) {
		r.Request.Object.Raw = raw
	}))
	patch := got.review.Response.Patch
	if len(patch) == 0 {
		t.Fatalf("no patch: %+v", got.review.Response)
	}
	for _, s := range []string{"managedFields", "futureField"} {
		if bytes.Contains(patch, []byte(s)) {
			t.Errorf("patch touches %s: %s", s, patch)
		}
	}
}

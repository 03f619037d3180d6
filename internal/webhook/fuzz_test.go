package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzServeHTTP: whatever the body, the handler answers (an AdmissionReview v1, or a Status), never panics
// (a recovered panic is a 500: a failure here too), and every error answer is a Status that names the problem
// and carries the request's UID when the body held one in a review the handler could decode.
func FuzzServeHTTP(f *testing.F) {
	f.Add(review(f, envoyPod(), nil))
	f.Add(review(f, appPod(), nil))
	f.Add(review(f, envoyPod(), func(r *admissionv1.AdmissionReview) { r.APIVersion = "admission.k8s.io/v1beta1" }))
	f.Add(review(f, envoyPod(), func(r *admissionv1.AdmissionReview) {
		r.Request.Kind = metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	}))
	f.Add(review(f, envoyPod(), func(r *admissionv1.AdmissionReview) { r.Request.Object.Raw = []byte(`{"spec":[]}`) }))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}`))
	f.Add([]byte(`null`))
	f.Add([]byte{})
	h := newHandler(nil, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == http.StatusInternalServerError {
			t.Fatalf("internal error: %s", rec.Body.String())
		}
		var in struct {
			Request *struct {
				UID string `json:"uid"`
			} `json:"request"`
		}
		decoded := json.Unmarshal(body, &in) == nil && json.Unmarshal(body, &admissionv1.AdmissionReview{}) == nil
		uid := ""
		if decoded && in.Request != nil {
			uid = in.Request.UID
		}
		if rec.Code == http.StatusOK {
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("answer %q is not an AdmissionReview with a response (%v)", rec.Body.String(), err)
			}
			if !out.Response.Allowed || string(out.Response.UID) != uid {
				t.Errorf("200 answer: allowed %v, uid %q; want allowed, the request's uid %q", out.Response.Allowed, out.Response.UID, uid)
			}
			return
		}
		var st metav1.Status
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Kind != "Status" {
			t.Fatalf("error answer %q is not a Status (%v)", rec.Body.String(), err)
		}
		if st.Message == "" || st.Code != int32(rec.Code) || st.Details == nil || string(st.Details.UID) != uid {
			t.Errorf("error answer %d: %+v; want a message, the code, the request's uid %q", rec.Code, st, uid)
		}
	})
}

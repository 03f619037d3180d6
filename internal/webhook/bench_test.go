package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkServeHTTP is the handler's own cost per admission (no TLS, no network): an Envoy pod injected.
// The benchmark of the whole webhook at a rate is bench/webhookload.
func BenchmarkServeHTTP(b *testing.B) {
	h := newHandler(nil, nil)
	body := review(b, envoyPod(), nil)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Body.String())
		}
	}
}

package webhook

import (
	"bytes"
	"io"
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

// BenchmarkServeTLS is the handler behind a real TLS server over HTTP/2 on loopback, with concurrent callers:
// what the webhook process spends per admission, transport included.
func BenchmarkServeTLS(b *testing.B) {
	srv := httptest.NewUnstartedServer(newHandler(nil, nil).Mux())
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	client := srv.Client()
	body := review(b, envoyPod(), nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(srv.URL+Path, "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatal(resp.Status)
			}
		}
	})
}

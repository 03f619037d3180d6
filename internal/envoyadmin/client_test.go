package envoyadmin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A redirect is never followed and never success: a 302 on POST /healthcheck/fail, followed as a GET to a
// page answering 200, would tell the drain that Envoy fails its health checks when it does not.
func TestClientNeverFollowsRedirects(t *testing.T) {
	var followed bool
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck/fail", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) { followed = true })
	mux.HandleFunc("/healthcheck/ok", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	addr, err := ParseAddress(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := New(addr, Options{Timeout: time.Second})
	if err := c.HealthcheckFail(context.Background()); err == nil {
		t.Error("a 302 answer was taken as success")
	}
	if followed {
		t.Error("the redirect was followed")
	}
	// Any 2xx is success.
	if err := c.HealthcheckOK(context.Background()); err != nil {
		t.Errorf("204 answer: %v", err)
	}
}

package manager

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/server"
)

// joinSidecar's decision for every kind of answer: the sidecar's result when it drained or failed, a
// fallback (joined false) whenever it gave no usable answer.
func TestJoinSidecar(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	answer := func(code int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || r.URL.Path != "/shutdown" || r.Header.Get("Authorization") != "Bearer tok" {
				http.Error(w, "unexpected request", http.StatusTeapot)
				return
			}
			if code == 200 || code == 503 {
				w.Header().Set(server.OutcomeHeader, "x")
			}
			w.WriteHeader(code)
			io.WriteString(w, body+"\n")
		}
	}
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		wantJoined bool
		wantErr    error
	}{
		{"drained", answer(200, "drained: 0 in flight after 1s"), true, nil},
		{"timeout", answer(503, "timeout: deadline 60s reached with 1 in flight"), true, ErrReported},
		{"unauthorized", answer(401, "unauthorized"), false, nil},
		{"busy", answer(429, "busy"), false, nil},
		{"sidecar stopping", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "shutdown manager stopping: drain engine stopped", http.StatusServiceUnavailable)
		}, false, nil},
		{"connection broken", func(w http.ResponseWriter, r *http.Request) {
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
		}, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			c := newViaClient(mustAddress(t, srv.URL), "tok", "test")
			joined, err := joinSidecar(context.Background(), c, 10*time.Second, log)
			if joined != tt.wantJoined || !errors.Is(err, tt.wantErr) {
				t.Errorf("joined %v, err %v; want %v, %v", joined, err, tt.wantJoined, tt.wantErr)
			}
		})
	}
	t.Run("no socket", func(t *testing.T) {
		c := newViaClient(mustAddress(t, "unix://"+filepath.Join(t.TempDir(), "absent.sock")), "", "test")
		if joined, err := joinSidecar(context.Background(), c, 10*time.Second, log); joined || err != nil {
			t.Errorf("joined %v, err %v; want a fallback", joined, err)
		}
	})
	t.Run("no answer within the wait", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
		defer srv.Close()
		c := newViaClient(mustAddress(t, srv.URL), "tok", "test")
		if joined, err := joinSidecar(context.Background(), c, 200*time.Millisecond, log); !joined || !errors.Is(err, ErrReported) {
			t.Errorf("joined %v, err %v; want a failure: the wait is bounded", joined, err)
		}
	})
}

func mustAddress(t *testing.T, s string) envoyadmin.Address {
	t.Helper()
	a, err := envoyadmin.ParseAddress(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

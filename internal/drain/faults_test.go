package drain

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// Faults a real Envoy cannot produce, served by a fake admin API over a real socket and driven through the
// real client: the drain must release at its deadline, with the right outcome, and leave no goroutine behind.
func TestFaultyAdminHonoursDeadline(t *testing.T) {
	hang := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	status500 := func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) }
	garbageStats := func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/stats") {
			w.Write([]byte(`{"stats":[{"name":"listener.x.downstream_cx_active","value":`)) // cut short
			return
		}
		w.Write([]byte("OK\n"))
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		outcome Outcome
	}{
		{"accepts and never answers", hang, OutcomeError},
		{"answers 500", status500, OutcomeError},
		{"stats answer garbage", garbageStats, OutcomeError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			srv := httptest.NewServer(tt.handler)
			addr, err := envoyadmin.ParseAddress(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			client := envoyadmin.New(addr, envoyadmin.Options{Timeout: 200 * time.Millisecond})
			cfg := Config{MinDuration: 100 * time.Millisecond, Timeout: time.Second, Interval: 50 * time.Millisecond,
				Mode: ModeInflight, ListenerDrain: ListenerDrainNone}
			res, took := drainOnce(t, cfg, client)
			srv.CloseClientConnections()
			srv.Close()
			if res.Outcome != tt.outcome {
				t.Errorf("outcome = %s (%s), want %s", res.Outcome, res.Reason, tt.outcome)
			}
			// The deadline is a promise: not before it, and not later than it plus one admin request.
			if took < cfg.Timeout || took > cfg.Timeout+time.Second {
				t.Errorf("released after %s, want at the deadline %s", took, cfg.Timeout)
			}
			waitNoLeak(t, before)
		})
	}
}

func TestUnixSocketAdminAndEnvoyGone(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	calls := make(chan string, 100)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls <- r.Method + " " + r.URL.Path
		if r.URL.Path == "/stats" {
			w.Write([]byte(`{"stats":[{"name":"listener.x.downstream_cx_active","value":2}]}`))
			return
		}
		w.Write([]byte("OK\n"))
	})}
	go srv.Serve(ln)
	addr, _ := envoyadmin.ParseAddress("unix://" + sock)
	client := envoyadmin.New(addr, envoyadmin.Options{Timeout: 200 * time.Millisecond})
	cfg := Config{Timeout: 30 * time.Second, Interval: 20 * time.Millisecond, Mode: ModeInflight, ListenerDrain: ListenerDrainNone}

	e, _ := New(cfg, client, discard(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Run(ctx)
	d, _ := e.Trigger(ctx, testCaller)
	if got := <-calls; got != "POST /healthcheck/fail" {
		t.Fatalf("first call = %q, want POST /healthcheck/fail", got)
	}
	if got := <-calls; got != "GET /stats" {
		t.Fatalf("second call = %q, want GET /stats", got)
	}
	// Envoy dies: its socket goes away.
	srv.Close()
	<-d.Done()
	if r := d.Result(); r.Outcome != OutcomeEnvoyGone {
		t.Errorf("outcome = %s (%s), want envoy_gone", r.Outcome, r.Reason)
	}
}

func drainOnce(t *testing.T, cfg Config, admin Admin) (Result, time.Duration) {
	t.Helper()
	e, err := New(cfg, admin, discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = e.Run(ctx) }()
	defer func() { cancel(); <-stopped }()
	start := time.Now()
	d, err := e.Trigger(ctx, testCaller)
	if err != nil {
		t.Fatal(err)
	}
	<-d.Done()
	return d.Result(), time.Since(start)
}

// waitNoLeak fails if the number of goroutines does not come back to before within 5s (idle connections
// and timers take a moment to wind down; this is the check goleak makes).
func waitNoLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
}

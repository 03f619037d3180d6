package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// stuckAdmin is an Envoy whose one request never finishes, or that cannot be reached at all.
type stuckAdmin struct{ unreachable bool }

func (s stuckAdmin) HealthcheckFail(context.Context) error {
	if s.unreachable {
		return errors.New("POST /healthcheck/fail: connection refused")
	}
	return nil
}
func (stuckAdmin) DrainListeners(context.Context, bool) error { return nil }
func (stuckAdmin) Stats(context.Context) (envoyadmin.Snapshot, error) {
	return envoyadmin.Snapshot{HTTP: map[string]envoyadmin.HTTPGauges{"http.ingress": {Connections: 1, Requests: 1}}}, nil
}
func (stuckAdmin) ListenerConfig(context.Context) (envoyadmin.Topology, error) {
	return envoyadmin.Topology{}, nil
}
func (stuckAdmin) ServerState(context.Context) (envoyadmin.ServerState, error) {
	return envoyadmin.StateDraining, nil
}

func newServer(t *testing.T, admin drain.Admin) *httptest.Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := drain.Config{MinDuration: 0, Timeout: 300 * time.Millisecond, Interval: 20 * time.Millisecond,
		Mode: drain.ModeInflight, ListenerDrain: drain.ListenerDrainNone}
	e, err := drain.New(cfg, admin, log, drain.NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go e.Run(ctx)
	srv := httptest.NewServer(New(e, reg, log))
	t.Cleanup(func() { srv.Close(); cancel() })
	return srv
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestShutdownAnswers503OnTimeoutAndError(t *testing.T) {
	for name, tt := range map[string]struct {
		admin   drain.Admin
		outcome string
	}{
		"work never finishes": {stuckAdmin{}, "timeout: "},
		"envoy unreachable":   {stuckAdmin{unreachable: true}, "error: "},
	} {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, tt.admin)
			code, body := get(t, srv.URL+"/shutdown")
			if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, tt.outcome) {
				t.Errorf("/shutdown = %d %q, want 503 %q…", code, body, tt.outcome)
			}
			code, body = get(t, srv.URL+"/status")
			var st struct {
				State, Outcome string
				Open           int64
				Listeners      []drain.ScopeCount
			}
			if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 {
				t.Fatalf("/status = %d %q: %v", code, body, err)
			}
			if st.State != "released" || st.Outcome+": " != tt.outcome {
				t.Errorf("/status = %+v, want released with outcome %q", st, tt.outcome)
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	srv := newServer(t, stuckAdmin{})
	if code, body := get(t, srv.URL+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, srv.URL+"/status"); code != 200 || !strings.Contains(body, `"state": "idle"`) {
		t.Errorf("/status before any drain = %d %q, want idle", code, body)
	}
	if code, body := get(t, srv.URL+"/metrics"); code != 200 || !strings.Contains(body, `shutdown_manager_drain_phase{phase="idle"} 1`) {
		t.Errorf("/metrics = %d, want the idle phase set", code)
	}
	resp, err := http.Post(srv.URL+"/healthz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz = %d, want 405", resp.StatusCode)
	}
}

package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
func (stuckAdmin) HealthcheckOK(context.Context) error        { return nil }
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
	srv, _, _ := newServerWith(t, admin, 300*time.Millisecond, Options{})
	return srv
}

// newServerWith serves the API of a real engine over admin, with opts (Log, Gatherer and Registerer are
// filled in unless opts.Gatherer is explicitly left out with noMetrics).
func newServerWith(t *testing.T, admin drain.Admin, timeout time.Duration, opts Options) (*httptest.Server, *drain.Engine, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := drain.Config{MinDuration: 0, Timeout: timeout, Interval: 20 * time.Millisecond,
		Mode: drain.ModeInflight, ListenerDrain: drain.ListenerDrainNone}
	e, err := drain.New(cfg, admin, log, drain.NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	opts.Log, opts.Registerer = log, reg
	if opts.Gatherer == nil {
		opts.Gatherer = reg
	}
	srv := httptest.NewServer(New(e, opts))
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	return srv, e, reg
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

// drainedAdmin is an Envoy with nothing in flight: a drain releases as soon as it may.
type drainedAdmin struct{ stuckAdmin }

func (drainedAdmin) Stats(context.Context) (envoyadmin.Snapshot, error) {
	return envoyadmin.Snapshot{}, nil
}

func do(t *testing.T, method, url string, header http.Header) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// Only GET (kubelet's httpGet) and POST trigger: HEAD, which Go's mux lets match GET patterns, does not.
func TestShutdownMethods(t *testing.T) {
	srv, e, _ := newServerWith(t, drainedAdmin{}, time.Minute, Options{})
	for _, method := range []string{http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions} {
		code, _, h := do(t, method, srv.URL+"/shutdown", nil)
		if code != http.StatusMethodNotAllowed || h.Get("Allow") != "GET, POST" {
			t.Errorf("%s /shutdown = %d (Allow %q), want 405 (Allow \"GET, POST\")", method, code, h.Get("Allow"))
		}
	}
	if st := e.Status(); st.Phase != drain.PhaseIdle {
		t.Fatalf("after HEAD, PUT, DELETE, OPTIONS the engine is %s, want idle", st.Phase)
	}
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		if code, body, h := do(t, method, srv.URL+"/shutdown", nil); code != 200 || !strings.HasPrefix(body, "drained") || h.Get(OutcomeHeader) != "drained" {
			t.Errorf("%s /shutdown = %d %q (%s %q), want 200 drained", method, code, body, OutcomeHeader, h.Get(OutcomeHeader))
		}
	}
	if code, _, _ := do(t, http.MethodGet, srv.URL+"/resume", nil); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /resume = %d, want 405", code)
	}
}

func TestToken(t *testing.T) {
	srv, e, reg := newServerWith(t, drainedAdmin{}, time.Minute, Options{Token: "s3cret"})
	tests := []struct {
		name   string
		header string
		want   int
	}{
		{"no header", "", http.StatusUnauthorized},
		{"wrong token", "Bearer s3cre", http.StatusUnauthorized},
		{"not bearer", "Basic s3cret", http.StatusUnauthorized},
		{"right token", "Bearer s3cret", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.header != "" {
				h.Set("Authorization", tt.header)
			}
			before := e.Status().Phase
			code, body, _ := do(t, http.MethodPost, srv.URL+"/shutdown", h)
			if code != tt.want {
				t.Errorf("/shutdown with %q = %d %q, want %d", tt.header, code, body, tt.want)
			}
			if code == http.StatusUnauthorized && e.Status().Phase != before {
				t.Errorf("an unauthorized call changed the engine's phase from %s to %s", before, e.Status().Phase)
			}
			if code, _, _ := do(t, http.MethodPost, srv.URL+"/resume", h); tt.want == http.StatusUnauthorized && code != http.StatusUnauthorized {
				t.Errorf("/resume with %q = %d, want 401", tt.header, code)
			}
		})
	}
	// Probes and the status stay open.
	if code, _ := get(t, srv.URL+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d with a token set, want 200", code)
	}
	if got := testutil.ToFloat64(counterOf(t, reg, "shutdown_manager_api_refused_total", "/shutdown", "unauthorized")); got != 3 {
		t.Errorf("refused unauthorized = %v, want 3", got)
	}
}

// counterOf finds one series of a counter vector by gathering reg.
func counterOf(t *testing.T, reg *prometheus.Registry, name string, labels ...string) prometheus.Collector {
	t.Helper()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i, lp := range m.GetLabel() {
				if i >= len(labels) || lp.GetValue() != labels[i] {
					continue metric
				}
			}
			c.Add(m.GetCounter().GetValue())
		}
	}
	return c
}

// waitFor polls cond (a state of the engine the test cannot be told of) until it holds, for at most 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Over the cap, a caller is answered at once with 429 and does not count as a waiter.
func TestMaxWaiters(t *testing.T) {
	srv, e, reg := newServerWith(t, stuckAdmin{}, time.Minute, Options{MaxWaiters: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answers := make(chan int, 2)
	for range 2 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/shutdown", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- 0
				return
			}
			resp.Body.Close()
			answers <- resp.StatusCode
		}()
	}
	waitFor(t, "two callers waiting", func() bool {
		return testutil.ToFloat64(gaugeOf(t, reg, "shutdown_manager_shutdown_waiters")) == 2 && e.Status().Joined == 1
	})
	code, body, _ := do(t, http.MethodGet, srv.URL+"/shutdown", nil)
	if code != http.StatusTooManyRequests || !strings.HasPrefix(body, "busy: 2 callers already wait") {
		t.Errorf("third caller = %d %q, want 429 busy", code, body)
	}
	if j := e.Status().Joined; j != 1 {
		t.Errorf("joined = %d after a refused caller, want 1", j)
	}
	// A forced resume releases the waiters with the true reason.
	code, body, _ = do(t, http.MethodPost, srv.URL+"/resume", nil)
	if code != http.StatusConflict || !strings.Contains(body, "a drain is running") {
		t.Errorf("POST /resume during the drain = %d %q, want 409", code, body)
	}
	code, body, _ = do(t, http.MethodPost, srv.URL+"/resume?force=1", nil)
	if code != 200 || !strings.Contains(body, "the running drain was canceled") {
		t.Errorf("POST /resume?force=1 = %d %q, want 200", code, body)
	}
	for range 2 {
		if got := <-answers; got != http.StatusServiceUnavailable {
			t.Errorf("waiter released by a forced resume got %d, want 503", got)
		}
	}
	if st := e.Status(); st.Outcome != drain.OutcomeCanceled || !strings.HasPrefix(st.Reason, "canceled by resume after") || st.Resumed == nil {
		t.Errorf("status after forced resume: outcome %s reason %q resumed %v", st.Outcome, st.Reason, st.Resumed)
	}
}

// slowStateAdmin is a drained Envoy whose /server_info, once armed, answers only when the test lets it: the
// callers of a finished drain then all wait for the one shared state check at the same time.
type slowStateAdmin struct {
	drainedAdmin
	armed   *atomic.Bool
	release chan struct{}
}

func (s slowStateAdmin) ServerState(ctx context.Context) (envoyadmin.ServerState, error) {
	if s.armed.Load() {
		select {
		case <-s.release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return envoyadmin.StateDraining, nil
}

// The waiter cap applies to waiters: callers of a finished drain, however many at once, get its result and
// never 429, even while they all wait for the shared read of Envoy's state.
func TestMaxWaitersNotForFinishedDrain(t *testing.T) {
	admin := slowStateAdmin{armed: new(atomic.Bool), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := drain.New(drain.Config{Timeout: time.Minute, Interval: 20 * time.Millisecond,
		Mode: drain.ModeInflight, ListenerDrain: drain.ListenerDrainNone}, admin, log, drain.NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	engine := &countingEngine{Engine: e}
	srv := httptest.NewServer(New(engine, Options{Log: log, Registerer: reg, MaxWaiters: 2}))
	defer func() { cancel(); <-done; srv.Close() }()

	if code, body, _ := do(t, http.MethodGet, srv.URL+"/shutdown", nil); code != 200 || !strings.HasPrefix(body, "drained: ") {
		t.Fatalf("first /shutdown = %d %q, want 200 drained", code, body)
	}
	admin.armed.Store(true)
	const callers = 6
	type answer struct {
		code int
		body string
	}
	answers := make(chan answer, callers)
	for range callers {
		go func() {
			resp, err := http.Get(srv.URL + "/shutdown")
			if err != nil {
				answers <- answer{body: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- answer{resp.StatusCode, string(b)}
		}()
	}
	busy := func() float64 {
		return testutil.ToFloat64(counterOf(t, reg, "shutdown_manager_api_refused_total", "/shutdown", "busy"))
	}
	// Every caller is in the engine (waiting for the one /server_info read) at once, or some were refused.
	waitFor(t, "all callers triggering, or one refused", func() bool {
		return engine.triggers.Load() == 1+callers || busy() > 0
	})
	close(admin.release)
	for range callers {
		if a := <-answers; a.code != 200 || !strings.HasPrefix(a.body, "drained: ") {
			t.Errorf("caller after the drain = %d %q, want 200 with the finished drain's result", a.code, a.body)
		}
	}
	if n := busy(); n != 0 {
		t.Errorf("%v callers refused busy after the drain, want 0", n)
	}
}

// countingEngine counts the calls of Trigger, made before the engine answers them.
type countingEngine struct {
	*drain.Engine
	triggers atomic.Int64
}

func (c *countingEngine) Trigger(ctx context.Context, by drain.Caller) (*drain.Drain, error) {
	c.triggers.Add(1)
	return c.Engine.Trigger(ctx, by)
}

func gaugeOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				g.Add(m.GetGauge().GetValue())
			}
		}
	}
	return g
}

// /status says who triggered the drain and how many joined it.
func TestStatusTriggeredBy(t *testing.T) {
	srv, _, _ := newServerWith(t, drainedAdmin{}, time.Minute, Options{})
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/shutdown", nil)
	req.Header.Set("User-Agent", "kube-lifecycle/1.33")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, body := get(t, srv.URL+"/status")
	var st struct {
		TriggeredBy struct{ Remote, Method, UserAgent string } `json:"triggered_by"`
		Joined      *int64                                     `json:"joined"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	var raw struct {
		TriggeredBy map[string]string `json:"triggered_by"`
	}
	_ = json.Unmarshal([]byte(body), &raw)
	if raw.TriggeredBy["method"] != "GET" || raw.TriggeredBy["user_agent"] != "kube-lifecycle/1.33" ||
		!strings.HasPrefix(raw.TriggeredBy["remote"], "127.0.0.1:") || st.Joined == nil {
		t.Errorf("/status triggered_by = %v joined %v, want GET from 127.0.0.1 by kube-lifecycle/1.33", raw.TriggeredBy, st.Joined)
	}
}

// Without a gatherer (metrics on their own listener), the API has no /metrics.
func TestMetricsElsewhere(t *testing.T) {
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := drain.New(drain.Config{Timeout: time.Second, Interval: time.Second, Mode: drain.ModeInflight, ListenerDrain: drain.ListenerDrainNone},
		stuckAdmin{}, log, drain.NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(New(e, Options{Log: log, Registerer: reg}))
	defer api.Close()
	metrics := httptest.NewServer(NewMetricsMux(reg))
	defer metrics.Close()
	if code, _ := get(t, api.URL+"/metrics"); code != http.StatusNotFound {
		t.Errorf("API /metrics = %d, want 404 when metrics have their own listener", code)
	}
	if code, body := get(t, metrics.URL+"/metrics"); code != 200 || !strings.Contains(body, "shutdown_manager_shutdown_waiters 0") {
		t.Errorf("metrics listener /metrics = %d, want 200 with the API's metrics", code)
	}
}

// LimitListener keeps at most n connections open: the next one is accepted only when one closes.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := LimitListener(inner, 2)
	defer ln.Close()
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String()) // the kernel completes the handshake: queued
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	first, second := <-accepted, <-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted while two were open")
	case <-time.After(100 * time.Millisecond): // proving an absence: no event to wait for
	}
	first.Close()
	third := <-accepted
	if third == nil {
		t.Fatal("listener closed")
	}
	second.Close()
	third.Close()
	ln.Close()
	for range accepted {
	}
}

// A drain that ends misconfigured (the admin address refused while Envoy ran) is no success: 503, with its
// outcome in the header and the /status, and the evidence in the answer.
func TestShutdownAnswers503WhenMisconfigured(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := drain.Config{Timeout: 500 * time.Millisecond, Interval: 20 * time.Millisecond, GoneAfter: 50 * time.Millisecond,
		Mode: drain.ModeInflight, ListenerDrain: drain.ListenerDrainNone,
		Witness: drain.WitnessFunc(func(context.Context) drain.Evidence {
			return drain.Evidence{Verdict: drain.VerdictMisconfigured, Text: "envoy pid 12 is running"}
		})}
	refused := refusingAdmin{}
	e, err := drain.New(cfg, refused, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	srv := httptest.NewServer(New(e, Options{Log: log}))
	t.Cleanup(func() { cancel(); <-done; srv.Close() })

	code, body, h := do(t, http.MethodPost, srv.URL+"/shutdown", nil)
	if code != http.StatusServiceUnavailable || h.Get(OutcomeHeader) != "misconfigured" ||
		!strings.HasPrefix(body, "misconfigured: ") || !strings.Contains(body, "envoy pid 12 is running") {
		t.Errorf("/shutdown = %d %q (%s %q), want 503 misconfigured with the evidence", code, body, OutcomeHeader, h.Get(OutcomeHeader))
	}
	if _, body := get(t, srv.URL+"/status"); !strings.Contains(body, `"outcome": "misconfigured"`) || !strings.Contains(body, `"misconfigured": "configuration error`) {
		t.Errorf("/status = %s, want outcome misconfigured and why", body)
	}
}

// refusingAdmin is an admin address nothing listens at.
type refusingAdmin struct{ stuckAdmin }

func (refusingAdmin) HealthcheckFail(context.Context) error {
	return fmt.Errorf("POST /healthcheck/fail: %w: connection refused", envoyadmin.ErrUnreachable)
}

package drain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// fakeAdmin is an Envoy admin API in memory, for the faults a real Envoy cannot show. Its work in flight is
// set by the test; every call is recorded in order.
type fakeAdmin struct {
	mu        sync.Mutex
	events    []string
	inflight  int64
	state     envoyadmin.ServerState
	failErrs  int           // the next failErrs /healthcheck/fail calls fail
	statsErr  error         // returned by Stats when set
	hang      bool          // every call blocks until its context ends
	slowState time.Duration // ServerState takes this long
	states    atomic.Int32  // ServerState calls
	fails     atomic.Int32
	statsCall atomic.Int32
	topoErr   error // returned by ListenerConfig when set
	topoCall  int
	added     string // a listener scope Stats shows and ListenerConfig does not
	// New traffic and kinds, for the quiet period (quiet_test.go): counters of the ingress listener and
	// manager, upgraded connections among the requests in flight, and a readiness listener ("listener.ready",
	// "http.ready", running the health_check filter) whose probes count up probes.
	cxTotal, rqTotal, upgrades int64
	readiness                  bool
	probes                     int64
	// Counters of work the client cut (cut_test.go): the ingress manager's downstream_rq_rx_reset and
	// downstream_cx_destroy_remote_active_rq, and the readiness manager's rx resets.
	rxReset, cxCut, probeResets int64
}

func newFake(inflight int64) *fakeAdmin {
	return &fakeAdmin{inflight: inflight, state: envoyadmin.StateLive}
}

func (f *fakeAdmin) record(ctx context.Context, ev string) error {
	f.mu.Lock()
	f.events = append(f.events, ev)
	hang := f.hang
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return fmt.Errorf("%s: %w", ev, ctx.Err())
	}
	return nil
}

func (f *fakeAdmin) HealthcheckFail(ctx context.Context) error {
	if err := f.record(ctx, "healthcheck_fail"); err != nil {
		return err
	}
	f.fails.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failErrs > 0 {
		f.failErrs--
		return errors.New("POST /healthcheck/fail: status 500")
	}
	f.state = envoyadmin.StateDraining
	return nil
}

func (f *fakeAdmin) HealthcheckOK(ctx context.Context) error {
	if err := f.record(ctx, "healthcheck_ok"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = envoyadmin.StateLive
	return nil
}

func (f *fakeAdmin) DrainListeners(ctx context.Context, inboundOnly bool) error {
	return f.record(ctx, fmt.Sprintf("drain_listeners inbound=%v", inboundOnly))
}

func (f *fakeAdmin) Stats(ctx context.Context) (envoyadmin.Snapshot, error) {
	if err := f.record(ctx, "stats"); err != nil {
		return envoyadmin.Snapshot{}, err
	}
	f.statsCall.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.statsErr != nil {
		return envoyadmin.Snapshot{}, f.statsErr
	}
	snap := envoyadmin.Snapshot{
		Listeners: map[string]int64{"listener.0.0.0.0_8080": f.inflight + 7, "listener.admin": 1},
		HTTP:      map[string]envoyadmin.HTTPGauges{"http.ingress": {Connections: f.inflight + 7, Requests: f.inflight}},
	}
	if f.added != "" {
		snap.Listeners[f.added] = 0
	}
	snap.ListenerTotals = map[string]int64{"listener.0.0.0.0_8080": f.cxTotal, "listener.admin": int64(f.statsCall.Load())}
	g := snap.HTTP["http.ingress"]
	g.Upgrades, g.RequestsTotal = f.upgrades, f.rqTotal
	g.RequestsRxReset, g.ConnectionsCutActive = f.rxReset, f.cxCut
	snap.HTTP["http.ingress"] = g
	if f.readiness {
		snap.Listeners["listener.ready"], snap.ListenerTotals["listener.ready"] = 0, f.probes
		snap.HTTP["http.ready"] = envoyadmin.HTTPGauges{RequestsTotal: f.probes, RequestsRxReset: f.probeResets}
	}
	return snap, nil
}

// ListenerConfig says the one listener of Stats owns the one HTTP manager; it is not recorded as an event.
func (f *fakeAdmin) ListenerConfig(ctx context.Context) (envoyadmin.Topology, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.topoCall++
	if f.topoErr != nil {
		return envoyadmin.Topology{}, f.topoErr
	}
	topo := envoyadmin.Topology{Listeners: []envoyadmin.Listener{{Scope: "listener.0.0.0.0_8080", HTTP: []string{"http.ingress"}}}}
	if f.readiness {
		topo.Listeners = append(topo.Listeners, envoyadmin.Listener{Scope: "listener.ready", HTTP: []string{"http.ready"}, HealthCheck: []string{"http.ready"}})
	}
	return topo, nil
}

func (f *fakeAdmin) ServerState(ctx context.Context) (envoyadmin.ServerState, error) {
	if err := f.record(ctx, "server_info"); err != nil {
		return "", err
	}
	f.states.Add(1)
	f.mu.Lock()
	slow := f.slowState
	f.mu.Unlock()
	if slow > 0 {
		select {
		case <-time.After(slow):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state, nil
}

func (f *fakeAdmin) set(fn func(f *fakeAdmin)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func testConfig() Config {
	return Config{
		Delay: 2 * time.Second, MinDuration: 5 * time.Second, Timeout: 60 * time.Second,
		Interval: 250 * time.Millisecond, Mode: ModeInflight, ListenerDrain: ListenerDrainNone,
	}
}

var testCaller = Caller{Method: "test"}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startEngine runs an engine inside the synctest bubble; it is stopped at the end of the bubble's test.
func startEngine(t *testing.T, cfg Config, admin Admin, reg prometheus.Registerer) *Engine {
	t.Helper()
	e, err := New(cfg, admin, discard(), NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

func TestDrainOrderAndRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(3)
		reg := prometheus.NewRegistry()
		e := startEngine(t, testConfig(), fake, reg)
		start := time.Now()
		d, err := e.Trigger(context.Background(), testCaller)
		if err != nil {
			t.Fatal(err)
		}

		// The delay: Envoy is not touched.
		time.Sleep(2*time.Second - time.Millisecond)
		synctest.Wait()
		if n := fake.fails.Load(); n != 0 {
			t.Fatalf("health checks failed during the drain delay (%d calls)", n)
		}
		// The minimum duration: polled, never released, even at zero.
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := fake.fails.Load(); n != 1 {
			t.Fatalf("healthcheck/fail calls after the delay = %d, want 1", n)
		}
		fake.set(func(f *fakeAdmin) { f.inflight = 0 })
		time.Sleep(5*time.Second - time.Millisecond)
		synctest.Wait()
		select {
		case <-d.Done():
			t.Fatalf("released during the minimum drain duration, after %s", time.Since(start))
		default:
		}
		if got := e.Status().Phase; got != PhaseMinDuration {
			t.Fatalf("phase = %s, want %s", got, PhaseMinDuration)
		}
		// The first poll at the end of the minimum duration releases.
		time.Sleep(time.Millisecond)
		synctest.Wait()
		select {
		case <-d.Done():
		default:
			t.Fatalf("not released when the minimum duration ended with nothing in flight")
		}
		if got, want := time.Since(start), 7*time.Second; got != want {
			t.Errorf("released after %s, want %s", got, want)
		}
		r := d.Result()
		if r.Outcome != OutcomeDrained || r.Open != 0 {
			t.Errorf("result = %+v, want drained with 0 open", r)
		}
		if got := testutil.ToFloat64(e.metrics.drains.WithLabelValues("drained")); got != 1 {
			t.Errorf("drains_total{outcome=drained} = %v, want 1", got)
		}
		if got := testutil.ToFloat64(e.metrics.phase.WithLabelValues(string(PhaseReleased))); got != 1 {
			t.Errorf("drain_phase{phase=released} = %v, want 1", got)
		}
	})
}

func TestReleaseWithinOneIntervalOfLastRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(2)
		cfg := testConfig()
		cfg.Delay = 0
		e := startEngine(t, cfg, fake, nil)
		d, _ := e.Trigger(context.Background(), testCaller)
		time.Sleep(10 * time.Second) // long past the minimum duration, work still in flight
		synctest.Wait()
		if e.Status().Phase != PhaseWaiting {
			t.Fatalf("phase = %s, want waiting", e.Status().Phase)
		}
		fake.set(func(f *fakeAdmin) { f.inflight = 0 })
		finished := time.Now()
		<-d.Done()
		if got := time.Since(finished); got > cfg.Interval {
			t.Errorf("released %s after the last request finished, want within one interval (%s)", got, cfg.Interval)
		}
	})
}

func TestConcurrentTriggersShareOneDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		e := startEngine(t, testConfig(), fake, nil)
		var wg sync.WaitGroup
		drains := make([]*Drain, 100)
		for i := range drains {
			wg.Go(func() {
				d, err := e.Trigger(context.Background(), testCaller)
				if err != nil {
					t.Error(err)
					return
				}
				drains[i] = d
				<-d.Done()
			})
		}
		wg.Wait()
		for i, d := range drains {
			if d != drains[0] {
				t.Fatalf("trigger %d got a different drain", i)
			}
		}
		if n := fake.fails.Load(); n != 1 {
			t.Errorf("healthcheck/fail calls = %d, want exactly 1", n)
		}
		// A trigger after the release, Envoy still DRAINING: the same finished drain, nothing sent.
		again, _ := e.Trigger(context.Background(), testCaller)
		if again != drains[0] {
			t.Errorf("a trigger after release started a new drain while envoy is still draining")
		}
		if n := fake.fails.Load(); n != 1 {
			t.Errorf("healthcheck/fail calls after a late trigger = %d, want 1", n)
		}
	})
}

func TestRedrainAfterEnvoyRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		e := startEngine(t, testConfig(), fake, nil)
		first, _ := e.Trigger(context.Background(), testCaller)
		<-first.Done()
		fake.set(func(f *fakeAdmin) { f.state = envoyadmin.StateLive }) // Envoy's container restarted
		second, _ := e.Trigger(context.Background(), testCaller)
		if second == first {
			t.Fatal("a live Envoy after a finished drain was not drained again")
		}
		<-second.Done()
		if n := fake.fails.Load(); n != 2 {
			t.Errorf("healthcheck/fail calls = %d, want 2", n)
		}
	})
}

func TestDeadlines(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(f *fakeAdmin)
		outcome Outcome
	}{
		{"work never finishes", func(f *fakeAdmin) { f.inflight = 5 }, OutcomeTimeout},
		{"admin hangs on every call", func(f *fakeAdmin) { f.hang = true }, OutcomeError},
		{"healthcheck/fail answers 500 forever", func(f *fakeAdmin) { f.failErrs = 1 << 30 }, OutcomeError},
		{"stats answer garbage", func(f *fakeAdmin) { f.statsErr = errors.New("decoding stats: invalid character") }, OutcomeError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake(0)
				fake.set(tt.setup)
				cfg := testConfig()
				e := startEngine(t, cfg, fake, nil)
				start := time.Now()
				d, _ := e.Trigger(context.Background(), testCaller)
				<-d.Done()
				if got := time.Since(start); got != cfg.Timeout {
					t.Errorf("released after %s, want at the deadline %s", got, cfg.Timeout)
				}
				if r := d.Result(); r.Outcome != tt.outcome {
					t.Errorf("outcome = %s (%s), want %s", r.Outcome, r.Reason, tt.outcome)
				}
			})
		})
	}
}

func TestHealthcheckFailRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		fake.set(func(f *fakeAdmin) { f.failErrs = 3 })
		e := startEngine(t, testConfig(), fake, nil)
		d, _ := e.Trigger(context.Background(), testCaller)
		<-d.Done()
		if r := d.Result(); r.Outcome != OutcomeDrained {
			t.Errorf("outcome = %s (%s), want drained", r.Outcome, r.Reason)
		}
		if n := fake.fails.Load(); n != 4 {
			t.Errorf("healthcheck/fail attempts = %d, want 4 (3 failures, then success)", n)
		}
	})
}

func TestEnvoyGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(4)
		cfg := testConfig()
		e := startEngine(t, cfg, fake, nil)
		d, _ := e.Trigger(context.Background(), testCaller)
		time.Sleep(20 * time.Second)
		fake.set(func(f *fakeAdmin) {
			f.statsErr = fmt.Errorf("GET /stats: %w: connection refused", envoyadmin.ErrUnreachable)
		})
		killed := time.Now()
		<-d.Done()
		if got := time.Since(killed); got > cfg.Interval {
			t.Errorf("released %s after envoy died, want within one interval (%s)", got, cfg.Interval)
		}
		if r := d.Result(); r.Outcome != OutcomeEnvoyGone || !r.OK() {
			t.Errorf("result = %+v, want envoy_gone", r)
		}
	})
}

func TestEnvoyExitedSignal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(4)
		exited := make(chan struct{})
		cfg := testConfig()
		cfg.EnvoyExited = exited
		e := startEngine(t, cfg, fake, nil)
		d, _ := e.Trigger(context.Background(), testCaller)
		time.Sleep(time.Second) // during the delay
		close(exited)
		synctest.Wait()
		select {
		case <-d.Done():
		default:
			t.Fatal("not released at once when envoy's process exited")
		}
		if r := d.Result(); r.Outcome != OutcomeEnvoyGone {
			t.Errorf("outcome = %s, want envoy_gone", r.Outcome)
		}
	})
}

// Nothing listens at the admin address from the start (a crashed Envoy) and the Witness shows Envoy gone:
// after the gone window the drain releases as envoy_gone (exit 0 for the hook), not at the deadline.
func TestRefusedFromTheStartIsEnvoyGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		unreachable := &unreachableAdmin{fakeAdmin: fake}
		cfg := testConfig()
		cfg.Witness = WitnessFunc(func(context.Context) Evidence {
			return Evidence{Verdict: VerdictGone, Text: "no envoy process runs in this container"}
		})
		e := startEngine(t, cfg, unreachable, nil)
		start := time.Now()
		d, _ := e.Trigger(context.Background(), testCaller)
		<-d.Done()
		if got, want := time.Since(start), cfg.Delay+DefaultGoneAfter; got != want {
			t.Errorf("released after %s, want after the delay plus the gone window (%s)", got, want)
		}
		r := d.Result()
		if r.Outcome != OutcomeEnvoyGone || !r.OK() {
			t.Errorf("outcome = %s (%s), want envoy_gone", r.Outcome, r.Reason)
		}
		for _, want := range []string{"refused every connection for 1s", "connection refused", "no envoy process runs"} {
			if !strings.Contains(r.Reason, want) {
				t.Errorf("reason %q does not give the evidence %q", r.Reason, want)
			}
		}
		if n := unreachable.calls.Load(); n < 3 {
			t.Errorf("%d attempts in the gone window, want several", n)
		}
	})
}

// Envoy (re)starting inside the gone window is not mistaken for gone: the drain goes on normally.
func TestEnvoyStartingInsideTheGoneWindowIsDrained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		unreachable := &unreachableAdmin{fakeAdmin: fake, refuseFor: 800 * time.Millisecond}
		cfg := testConfig()
		cfg.Delay = 0
		e := startEngine(t, cfg, unreachable, nil)
		d, _ := e.Trigger(context.Background(), testCaller)
		<-d.Done()
		if r := d.Result(); r.Outcome != OutcomeDrained {
			t.Errorf("outcome = %s (%s), want drained", r.Outcome, r.Reason)
		}
	})
}

// Refusals broken by another failure (a timeout: something listens) restart the window: only refusals for
// the whole window mean gone. A refusal-timeout-refusal admin API holds the drain to its deadline.
func TestOtherFailuresRestartTheGoneWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		unreachable := &unreachableAdmin{fakeAdmin: fake, refuseFor: time.Hour, timeoutEvery: 3}
		cfg := testConfig()
		cfg.Delay = 0
		e := startEngine(t, cfg, unreachable, nil)
		start := time.Now()
		d, _ := e.Trigger(context.Background(), testCaller)
		<-d.Done()
		if r := d.Result(); r.Outcome != OutcomeError || time.Since(start) != cfg.Timeout {
			t.Errorf("outcome = %s after %s (%s), want error at the deadline", r.Outcome, time.Since(start), r.Reason)
		}
	})
}

// unreachableAdmin refuses /healthcheck/fail for refuseFor after its first call (always, if 0), answering
// every timeoutEvery-th call with a timeout instead; then it is the fake.
type unreachableAdmin struct {
	*fakeAdmin
	refuseFor    time.Duration
	timeoutEvery int32
	first        time.Time
	calls        atomic.Int32
}

func (u *unreachableAdmin) HealthcheckFail(ctx context.Context) error {
	n := u.calls.Add(1)
	if n == 1 {
		u.first = time.Now()
	}
	if u.refuseFor > 0 && time.Since(u.first) >= u.refuseFor {
		return u.fakeAdmin.HealthcheckFail(ctx)
	}
	if u.timeoutEvery > 0 && n%u.timeoutEvery == 0 {
		return fmt.Errorf("POST /healthcheck/fail: %w", context.DeadlineExceeded)
	}
	return fmt.Errorf("POST /healthcheck/fail: %w: connection refused", envoyadmin.ErrUnreachable)
}

func TestListenerDrainOption(t *testing.T) {
	for _, ld := range []ListenerDrain{ListenerDrainNone, ListenerDrainInbound, ListenerDrainAll} {
		t.Run(string(ld), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake(0)
				cfg := testConfig()
				cfg.ListenerDrain = ld
				e := startEngine(t, cfg, fake, nil)
				d, _ := e.Trigger(context.Background(), testCaller)
				<-d.Done()
				fake.mu.Lock()
				defer fake.mu.Unlock()
				want := map[ListenerDrain]string{ListenerDrainInbound: "drain_listeners inbound=true", ListenerDrainAll: "drain_listeners inbound=false"}[ld]
				got := ""
				if len(fake.events) > 1 && fake.events[1] != "stats" {
					got = fake.events[1]
				}
				if fake.events[0] != "healthcheck_fail" || got != want {
					t.Errorf("events = %v, want healthcheck_fail then %q", fake.events, want)
				}
			})
		})
	}
}

func TestCanceledEngineReleasesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(9)
		e, _ := New(testConfig(), fake, discard(), nil)
		ctx, cancel := context.WithCancelCause(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = e.Run(ctx) }()
		d, _ := e.Trigger(context.Background(), testCaller)
		time.Sleep(10 * time.Second)
		cancel(errors.New("signal interrupt"))
		<-d.Done()
		<-done
		// The reason says who stopped it, when, and what was left; not "deadline reached", never doubled.
		want := "canceled by signal interrupt after 10s with 9 in flight"
		if r := d.Result(); r.Outcome != OutcomeCanceled || r.Reason != want {
			t.Errorf("result = %s %q, want canceled %q", r.Outcome, r.Reason, want)
		}
		if _, err := e.Trigger(context.Background(), testCaller); !errors.Is(err, ErrStopped) {
			t.Errorf("trigger after stop: err = %v, want ErrStopped", err)
		}
	})
}

// After a drain has finished, a flood of triggers costs Envoy one /server_info request, answered to all of
// them together (not one after the other, as when every trigger read the state itself), and the answer
// is reused for stateCacheTTL.
func TestTriggersAfterFinishShareOneStateCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		e := startEngine(t, testConfig(), fake, nil)
		first, _ := e.Trigger(context.Background(), testCaller)
		<-first.Done()
		const slow = 800 * time.Millisecond
		fake.set(func(f *fakeAdmin) { f.slowState = slow })

		start := time.Now()
		var wg sync.WaitGroup
		for range 1000 {
			wg.Go(func() {
				d, err := e.Trigger(context.Background(), testCaller)
				if err != nil || d != first {
					t.Errorf("trigger after the drain = %p, %v; want the finished drain", d, err)
				}
			})
		}
		wg.Wait()
		if got := time.Since(start); got > slow {
			t.Errorf("1000 triggers answered after %s, want all together after one state check (%s)", got, slow)
		}
		if n := fake.states.Load(); n != 1 {
			t.Errorf("/server_info requests = %d for 1000 triggers, want 1", n)
		}

		// Within stateCacheTTL of the check: answered at once, no request.
		fake.set(func(f *fakeAdmin) { f.slowState = 0 })
		time.Sleep(stateCacheTTL - time.Millisecond) // the answer came at the end of the check, just now
		if d, _ := e.Trigger(context.Background(), testCaller); d != first || fake.states.Load() != 1 {
			t.Errorf("trigger within the cache: %d requests, want 1", fake.states.Load())
		}
		// After it: Envoy is asked again.
		time.Sleep(time.Millisecond)
		if d, _ := e.Trigger(context.Background(), testCaller); d != first || fake.states.Load() != 2 {
			t.Errorf("trigger after the cache: %d requests, want 2", fake.states.Load())
		}
		if got := e.Status().Joined; got != 0 {
			t.Errorf("joined = %d, want 0: triggers after the release did not join it", got)
		}
	})
}

// A trigger that gives up while the state check is slow returns with its context; the check goes on
// for the others.
func TestTriggerContextBoundsTheStateCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		e := startEngine(t, testConfig(), fake, nil)
		first, _ := e.Trigger(context.Background(), testCaller)
		<-first.Done()
		fake.set(func(f *fakeAdmin) { f.slowState = 10 * time.Second })
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		if _, err := e.Trigger(ctx, testCaller); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want the caller's deadline", err)
		}
		if got := time.Since(start); got != time.Second {
			t.Errorf("returned after %s, want at the caller's deadline (1s)", got)
		}
	})
}

func TestStatusShowsWhoTriggered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startEngine(t, testConfig(), newFake(0), nil)
		by := NewHTTPCaller("10.0.0.7:5123", "GET", "kube-lifecycle/1.33")
		d, _ := e.Trigger(context.Background(), by)
		for range 3 {
			if j, _ := e.Trigger(context.Background(), NewHTTPCaller("@", "POST", "curl")); j != d {
				t.Fatal("a trigger during the drain did not join it")
			}
		}
		<-d.Done()
		st := e.Status()
		if st.TriggeredBy == nil || *st.TriggeredBy != by || st.Joined != 3 {
			t.Errorf("status triggered_by = %+v joined %d, want %+v joined 3", st.TriggeredBy, st.Joined, by)
		}
	})
}

// No poll ever comes sooner than minPollGap after the last one began, in any phase, whatever the flags.
func TestPollGapFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(1)
		timed := &timedAdmin{fakeAdmin: fake}
		cfg := testConfig()
		cfg.Delay, cfg.Interval = 0, time.Nanosecond
		e := startEngine(t, cfg, timed, nil)
		d, _ := e.Trigger(context.Background(), testCaller)
		time.Sleep(cfg.MinDuration + 2*time.Second)
		fake.set(func(f *fakeAdmin) { f.inflight = 0 })
		<-d.Done()
		timed.mu.Lock()
		defer timed.mu.Unlock()
		if len(timed.polls) < 10 {
			t.Fatalf("only %d polls", len(timed.polls))
		}
		for i := 1; i < len(timed.polls); i++ {
			if gap := timed.polls[i].Sub(timed.polls[i-1]); gap < minPollGap {
				t.Fatalf("poll %d came %s after the one before, want at least %s", i, gap, minPollGap)
			}
		}
		// And not much slower either: the floor is the gap, not a sleep added on top.
		if max := int((cfg.MinDuration+2*time.Second)/minPollGap) + 2; len(timed.polls) > max {
			t.Errorf("%d polls, want at most %d", len(timed.polls), max)
		}
	})
}

func TestResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(3) // work that never finishes
		e := startEngine(t, testConfig(), fake, nil)
		human := Caller{Remote: "unix", Method: "POST", UserAgent: "curl"}
		d, _ := e.Trigger(context.Background(), testCaller)
		time.Sleep(10 * time.Second)

		// While the drain holds its callers: refused, nothing sent to Envoy.
		if _, err := e.Resume(context.Background(), ResumeRequest{By: human}); !errors.Is(err, ErrDrainRunning) {
			t.Fatalf("resume during a drain: err = %v, want ErrDrainRunning", err)
		}
		if isDone(d) {
			t.Fatal("a refused resume ended the drain")
		}
		// Forced: the drain ends canceled with a true reason, Envoy is LIVE again.
		res, err := e.Resume(context.Background(), ResumeRequest{By: human, Force: true})
		if err != nil || !res.Canceled || res.EnvoyState != envoyadmin.StateLive {
			t.Fatalf("forced resume = %+v, %v; want the drain canceled and envoy LIVE", res, err)
		}
		r := d.Result()
		if r.Outcome != OutcomeCanceled || !strings.HasPrefix(r.Reason, "canceled by resume after 10s with 3 in flight") {
			t.Errorf("canceled drain: %s %q, want canceled by resume", r.Outcome, r.Reason)
		}
		if st := e.Status(); st.Resumed == nil || st.Resumed.By != human {
			t.Errorf("status resumed = %+v, want by %+v", st.Resumed, human)
		}

		// The next trigger drains again, although the resume came within the state cache's lifetime.
		fake.set(func(f *fakeAdmin) { f.inflight = 0 })
		again, _ := e.Trigger(context.Background(), testCaller)
		if again == d {
			t.Fatal("a trigger after a resume did not start a new drain")
		}
		<-again.Done()
		if again.Result().Outcome != OutcomeDrained || fake.fails.Load() != 2 {
			t.Errorf("second drain %s, healthcheck/fail calls %d; want drained and 2", again.Result().Outcome, fake.fails.Load())
		}
		// After a finished drain a resume needs no force; a cached DRAINING does not survive it.
		if _, err := e.Trigger(context.Background(), testCaller); err != nil { // caches DRAINING
			t.Fatal(err)
		}
		if _, err := e.Resume(context.Background(), ResumeRequest{By: human}); err != nil {
			t.Fatalf("resume after the drain: %v", err)
		}
		third, _ := e.Trigger(context.Background(), testCaller)
		if third == again {
			t.Error("a trigger right after a resume got the cached state and did not drain")
		}
	})
}

type timedAdmin struct {
	*fakeAdmin
	mu    sync.Mutex
	polls []time.Time
}

func (a *timedAdmin) Stats(ctx context.Context) (envoyadmin.Snapshot, error) {
	a.mu.Lock()
	a.polls = append(a.polls, time.Now())
	a.mu.Unlock()
	return a.fakeAdmin.Stats(ctx)
}

func TestAddDurationsSaturates(t *testing.T) {
	const maxD, minD = time.Duration(math.MaxInt64), time.Duration(math.MinInt64)
	tests := []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{[]time.Duration{time.Second, 2 * time.Second}, 3 * time.Second},
		{[]time.Duration{maxD, time.Nanosecond}, maxD},
		{[]time.Duration{maxD - 5, maxD - 5}, maxD},
		{[]time.Duration{minD, -time.Nanosecond}, minD},
	}
	for _, tt := range tests {
		if got := AddDurations(tt.in...); got != tt.want {
			t.Errorf("AddDurations(%v) = %d, want %d", tt.in, got, tt.want)
		}
	}
	// The sum of two huge flags is checked against the timeout, not wrapped below it.
	cfg := testConfig()
	cfg.Delay, cfg.MinDuration = maxD/2+1, maxD/2+1
	if err := cfg.Validate(); err == nil {
		t.Error("Validate accepted --drain-delay + --min-drain-duration past the int64 limit")
	}
}

// Before any poll, the count is unknown (JSON null, no gauge); listeners is [] not null.
func TestStatusBeforeFirstPoll(t *testing.T) {
	reg := prometheus.NewRegistry()
	e, err := New(testConfig(), newFake(0), discard(), NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(e.Status())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"open":null`, `"listeners":[]`, `"groups":[]`, `"state":"idle"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("status %s lacks %s", b, want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "shutdown_manager_in_flight"); err != nil || n != 0 {
		t.Errorf("in_flight gauge before any poll: %d series (err %v), want none", n, err)
	}
	e.metrics.setOpen(3)
	for _, name := range []string{"shutdown_manager_in_flight", "shutdown_manager_open_connections"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 1 {
			t.Errorf("%s after a poll: %d series (err %v), want 1", name, n, err)
		}
	}
}

func TestSecondsAreMilliseconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1234567891 * time.Nanosecond: "1.235",
		2 * time.Second:              "2",
		999 * time.Microsecond:       "0.001",
		0:                            "0",
	} {
		if got, _ := json.Marshal(Seconds(d)); string(got) != want {
			t.Errorf("Seconds(%s) = %s, want %s", d, got, want)
		}
	}
}

// The log says "drain trigger" before the drain it started says "drain started", every time: the owner
// goroutine logs the trigger before it starts the drain's goroutine.
func TestTriggerLoggedBeforeDrainStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		cfg := testConfig()
		cfg.Delay, cfg.MinDuration = 0, 0
		e, err := New(cfg, newFake(0), slog.New(slog.NewTextHandler(&buf, nil)), nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = e.Run(ctx) }()
		defer func() { cancel(); <-done }()
		d, err := e.Trigger(context.Background(), testCaller)
		if err != nil {
			t.Fatal(err)
		}
		<-d.Done()
		log := buf.String()
		trigger, started := strings.Index(log, `msg="drain trigger"`), strings.Index(log, `msg="drain started"`)
		if trigger < 0 || started < 0 || trigger > started {
			t.Errorf("want drain trigger before drain started; log:\n%s", log)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for the engine's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

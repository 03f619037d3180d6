package drain

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// witnessSays is a Witness whose verdict the test sets; it counts the calls.
type witnessSays struct {
	verdict atomic.Int32
	calls   atomic.Int32
}

func (w *witnessSays) Gone(context.Context) Evidence {
	w.calls.Add(1)
	switch v := Verdict(w.verdict.Load()); v {
	case VerdictGone:
		return Evidence{Verdict: v, Text: "no envoy process runs in this container"}
	case VerdictMisconfigured:
		return Evidence{Verdict: v, Text: "envoy pid 12 is running"}
	}
	return Evidence{Verdict: VerdictUnknown, Text: "cannot list processes"}
}

func says(v Verdict) *witnessSays {
	w := &witnessSays{}
	w.verdict.Store(int32(v))
	return w
}

// A refusing address while Envoy runs (wrong port, family or socket path) is a configuration error: told at
// once (Misconfigured, Status), held to the deadline, then outcome misconfigured, never a success.
func TestRefusedWhileEnvoyRunsIsMisconfigured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unreachable := &unreachableAdmin{fakeAdmin: newFake(0)}
		cfg := testConfig()
		w := says(VerdictMisconfigured)
		cfg.Witness = w
		reg := prometheus.NewRegistry()
		e := startEngine(t, cfg, unreachable, reg)
		start := time.Now()
		d, _ := e.Trigger(context.Background(), testCaller)
		<-d.Misconfigured()
		if got, want := time.Since(start), cfg.Delay+DefaultGoneAfter; got != want {
			t.Errorf("misconfiguration told after %s, want after the delay plus the gone window (%s)", got, want)
		}
		if d.Released() {
			t.Fatal("released when the misconfiguration was found; want held to the deadline")
		}
		if st := e.Status(); !strings.Contains(st.Misconfigured, "but envoy pid 12 is running") {
			t.Errorf("status misconfigured = %q, want the evidence", st.Misconfigured)
		}
		<-d.Done()
		r := d.Result()
		if r.Outcome != OutcomeMisconfigured || r.OK() {
			t.Errorf("outcome = %s (ok %v), want misconfigured, not ok", r.Outcome, r.OK())
		}
		if got := time.Since(start); got != cfg.Timeout {
			t.Errorf("released after %s, want at the deadline %s", got, cfg.Timeout)
		}
		for _, want := range []string{"configuration error", "refused every connection", "envoy pid 12 is running", "connection refused"} {
			if !strings.Contains(r.Reason, want) {
				t.Errorf("reason %q lacks %q", r.Reason, want)
			}
		}
		if n := w.calls.Load(); n < 10 {
			t.Errorf("witness asked %d times, want once per gone window to the deadline", n)
		}
		if last := r.Phases[len(r.Phases)-1]; last.Phase != PhaseFailHealthChecks || last.Cause != CauseMisconfigured {
			t.Errorf("last phase end = %+v, want fail_healthchecks ended misconfigured", last)
		}
		if n := testutil.ToFloat64(e.metrics.drains.WithLabelValues(string(OutcomeMisconfigured))); n != 1 {
			t.Errorf("drains_total{outcome=misconfigured} = %v, want 1", n)
		}
	})
}

// Without a Witness (or one that cannot tell) a refusing address is no evidence of anything: the drain
// retries to its deadline and fails (outcome error). This is what a wrong address did before: envoy_gone, OK.
func TestRefusedWithoutEvidenceIsNoSuccess(t *testing.T) {
	for name, w := range map[string]Witness{"no witness": nil, "unknown": says(VerdictUnknown)} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := testConfig()
				cfg.Witness = w
				e := startEngine(t, cfg, &unreachableAdmin{fakeAdmin: newFake(0)}, nil)
				start := time.Now()
				d, _ := e.Trigger(context.Background(), testCaller)
				<-d.Done()
				r := d.Result()
				if r.Outcome != OutcomeError || r.OK() || time.Since(start) != cfg.Timeout {
					t.Errorf("outcome = %s after %s (%s), want error at the deadline", r.Outcome, time.Since(start), r.Reason)
				}
				select {
				case <-d.Misconfigured():
					t.Error("misconfiguration told without evidence")
				default:
				}
			})
		})
	}
}

// A slow Envoy that binds its admin address after the misconfiguration was told is drained normally.
func TestMisconfiguredThenAnsweringDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unreachable := &unreachableAdmin{fakeAdmin: newFake(0), refuseFor: 5 * time.Second}
		cfg := testConfig()
		cfg.Witness = says(VerdictMisconfigured)
		e := startEngine(t, cfg, unreachable, nil)
		d, _ := e.Trigger(context.Background(), testCaller)
		<-d.Misconfigured()
		<-d.Done()
		if r := d.Result(); r.Outcome != OutcomeDrained {
			t.Errorf("outcome = %s (%s), want drained", r.Outcome, r.Reason)
		}
		if st := e.Status(); st.Misconfigured != "" {
			t.Errorf("status misconfigured = %q after the admin answered, want none", st.Misconfigured)
		}
	})
}

// Envoy's process exiting while the drain holds on a misconfiguration is then gone: the Witness is asked
// once per gone window, and its new evidence releases at once.
func TestMisconfiguredThenGoneIsEnvoyGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		w := says(VerdictMisconfigured)
		cfg.Witness = w
		e := startEngine(t, cfg, &unreachableAdmin{fakeAdmin: newFake(0)}, nil)
		d, _ := e.Trigger(context.Background(), testCaller)
		<-d.Misconfigured()
		time.Sleep(10 * time.Second)
		w.verdict.Store(int32(VerdictGone))
		exited := time.Now()
		<-d.Done()
		if got := time.Since(exited); got > DefaultGoneAfter {
			t.Errorf("released %s after envoy exited, want within the gone window", got)
		}
		if r := d.Result(); r.Outcome != OutcomeEnvoyGone || !r.OK() {
			t.Errorf("outcome = %s (%s), want envoy_gone", r.Outcome, r.Reason)
		}
	})
}

// The engine's own earlier answer stays evidence: Envoy failed its health checks, then its admin API
// refuses the polls: gone, whatever the Witness would say (it is not asked).
func TestRefusedAfterAnsweringIsGoneWithoutWitness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(4)
		cfg := testConfig()
		w := says(VerdictMisconfigured)
		cfg.Witness = w
		e := startEngine(t, cfg, fake, nil)
		d, _ := e.Trigger(context.Background(), testCaller)
		time.Sleep(20 * time.Second)
		fake.set(func(f *fakeAdmin) { f.statsErr = refusedErr("GET /stats") })
		<-d.Done()
		if r := d.Result(); r.Outcome != OutcomeEnvoyGone || !r.OK() {
			t.Errorf("outcome = %s (%s), want envoy_gone", r.Outcome, r.Reason)
		}
		if n := w.calls.Load(); n != 0 {
			t.Errorf("witness asked %d times, want 0: envoy's own answer is the evidence", n)
		}
	})
}

// A drain canceled while it holds on a misconfiguration ends canceled, as any other.
func TestMisconfiguredCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		cfg.Witness = says(VerdictMisconfigured)
		e, err := New(cfg, &unreachableAdmin{fakeAdmin: newFake(0)}, discard(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = e.Run(ctx) }()
		d, _ := e.Trigger(ctx, testCaller)
		<-d.Misconfigured()
		cancel()
		<-done
		if r := d.Result(); r.Outcome != OutcomeCanceled {
			t.Errorf("outcome = %s (%s), want canceled", r.Outcome, r.Reason)
		}
	})
}

func refusedErr(what string) error {
	return fmt.Errorf("%s: %w: connection refused", what, envoyadmin.ErrUnreachable)
}

// identifying is a Witness that is an Identifier too: Identify says whether the admin API is another Envoy's.
type identifying struct {
	*witnessSays
	another bool
	asked   atomic.Int32
}

func (i *identifying) Identify(context.Context) Evidence {
	i.asked.Add(1)
	if i.another {
		return Evidence{Verdict: VerdictMisconfigured, Text: `for another envoy: its -c "/b.yaml" is not on the command line of envoy pid 12 here`}
	}
	return Evidence{Verdict: VerdictUnknown}
}

// An admin API that answers for another Envoy than the one the front end sees: its health checks are never
// failed; the drain holds to its deadline and ends misconfigured. The same Envoy drains as usual.
func TestAnotherEnvoysAdminIsMisconfigured(t *testing.T) {
	for _, another := range []bool{true, false} {
		t.Run(map[bool]string{true: "another envoy", false: "its own"}[another], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := newFake(0)
				cfg := testConfig()
				id := &identifying{witnessSays: says(VerdictMisconfigured), another: another}
				cfg.Witness = id
				e := startEngine(t, cfg, fake, nil)
				start := time.Now()
				d, _ := e.Trigger(context.Background(), testCaller)
				<-d.Done()
				r := d.Result()
				if !another {
					if r.Outcome != OutcomeDrained || id.asked.Load() != 1 {
						t.Errorf("outcome = %s (%s), asked %d; want drained, asked once", r.Outcome, r.Reason, id.asked.Load())
					}
					return
				}
				if r.Outcome != OutcomeMisconfigured || time.Since(start) != cfg.Timeout {
					t.Errorf("outcome = %s after %s (%s), want misconfigured at the deadline", r.Outcome, time.Since(start), r.Reason)
				}
				if n := fake.fails.Load(); n != 0 {
					t.Errorf("another envoy's health checks failed %d times, want never", n)
				}
				if !strings.Contains(r.Reason, "for another envoy") || !strings.Contains(r.Reason, "health checks were not failed") {
					t.Errorf("reason %q does not say why", r.Reason)
				}
				select {
				case <-d.Misconfigured():
				default:
					t.Error("the misconfiguration was not told while holding")
				}
			})
		})
	}
}

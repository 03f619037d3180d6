package drain

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// quietConfig is a drain with a 1 s floor and a 2 s quiet period, nothing in flight to wait for.
func quietConfig() Config {
	c := testConfig()
	c.Delay, c.MinDuration, c.QuietPeriod, c.Timeout = 0, time.Second, 2*time.Second, 30*time.Second
	return c
}

// trafficUntil adds traffic (what) every gap until the drain has run for stop, or the test ends.
func trafficUntil(t *testing.T, fake *fakeAdmin, gap, stop time.Duration, what func(f *fakeAdmin)) {
	ended := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(ended); <-done })
	go func() {
		defer close(done)
		for start := time.Now(); time.Since(start) < stop; {
			fake.set(what)
			select {
			case <-time.After(gap):
			case <-ended:
				return
			}
		}
	}()
	// The first arrival is in place before the caller goes on (a drain triggered next reads it in its baseline):
	// without this, which of the two runs first at the same instant is up to the scheduler.
	synctest.Wait()
}

func newConnAndRequest(f *fakeAdmin) { f.cxTotal++; f.rqTotal++ }

func released(t *testing.T, d *Drain) Result {
	t.Helper()
	<-d.Done()
	return d.Result()
}

// With nothing new arriving, the drain releases at the later of the floor and the quiet period, both
// counted from the moment health checks failed, and says why each phase ended.
func TestQuietPeriodNoTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		reg := prometheus.NewRegistry()
		e := startEngine(t, quietConfig(), fake, reg)
		start := time.Now()
		d, err := e.Trigger(context.Background(), testCaller)
		if err != nil {
			t.Fatal(err)
		}
		r := released(t, d)
		if got := time.Since(start); got != 2*time.Second {
			t.Errorf("released after %s, want 2s (the quiet period, longer than the 1s floor)", got)
		}
		if r.Outcome != OutcomeDrained {
			t.Fatalf("result = %+v, want drained", r)
		}
		var phases []string
		for _, p := range r.Phases {
			phases = append(phases, string(p.Phase)+"/"+string(p.Cause))
		}
		want := "delay/elapsed fail_healthchecks/done min_duration/elapsed quiet/quiet waiting/drained"
		if got := strings.Join(phases, " "); got != want {
			t.Errorf("phases = %s, want %s", got, want)
		}
		if got, want := r.Phases[3].Reason, "no new connection or request for 2s, 2s after health checks failed"; got != want {
			t.Errorf("quiet phase ended: %q, want %q", got, want)
		}
		if got := testutil.ToFloat64(e.metrics.phaseEnds.WithLabelValues("quiet", "quiet")); got != 1 {
			t.Errorf("phase_ends_total{phase=quiet,cause=quiet} = %v, want 1", got)
		}
		st := e.Status()
		if st.Quiet == nil || !st.Quiet.Watched || st.Quiet.NewRequests != 0 || st.HealthChecksFailed == nil {
			t.Errorf("status quiet = %+v, health checks failed %v", st.Quiet, st.HealthChecksFailed)
		}
	})
}

// Requests that keep arriving past the floor hold the drain until none has arrived for the quiet period.
func TestQuietPeriodHoldsWhileTrafficArrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		reg := prometheus.NewRegistry()
		e := startEngine(t, quietConfig(), fake, reg)
		start := time.Now()
		trafficUntil(t, fake, 500*time.Millisecond, 5*time.Second, newConnAndRequest)
		d, err := e.Trigger(context.Background(), testCaller)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		if got := e.Status().Phase; got != PhaseQuiet {
			t.Errorf("phase at 3s = %s, want %s", got, PhaseQuiet)
		}
		r := released(t, d)
		// The last traffic arrives at 4.5s, the poll after it (every 25ms while quiet polls are cheap) sees it.
		if got := time.Since(start); got < 6500*time.Millisecond || got > 6600*time.Millisecond {
			t.Errorf("released after %s, want the last arrival (4.5s) plus the quiet period (2s) plus at most a poll", got)
		}
		q := r.Phases[3]
		// The fake's listeners are HTTP managers only: their new connections are not traffic until they carry
		// a request (Counts.Watched), so only the requests show.
		if q.Phase != PhaseQuiet || !strings.HasPrefix(q.Reason, "no new request for 2s, 6.5") ||
			!strings.Contains(q.Reason, "0 new connections and 9 new requests since they failed") {
			t.Errorf("quiet phase ended: %+v", q)
		}
		if got := testutil.ToFloat64(e.metrics.newTrafficRq); got != 9 {
			t.Errorf("new_requests_total = %v, want 9 (at 0.5, 1, ..., 4.5s: the one at 0 is before the first poll)", got)
		}
	})
}

// Probes and load balancers' health checks on a readiness listener (its HTTP manager runs the health_check
// filter) never hold the drain, however often they come.
func TestQuietPeriodIgnoresReadinessProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		fake.readiness = true
		e := startEngine(t, quietConfig(), fake, nil)
		start := time.Now()
		trafficUntil(t, fake, 100*time.Millisecond, time.Minute, func(f *fakeAdmin) { f.probes++ })
		d, err := e.Trigger(context.Background(), testCaller)
		if err != nil {
			t.Fatal(err)
		}
		r := released(t, d)
		if got := time.Since(start); got != 2*time.Second || r.Outcome != OutcomeDrained {
			t.Errorf("released after %s (%s), want 2s, drained: probes are not traffic", got, r.Reason)
		}
	})
}

// Traffic that never stops holds the drain to its deadline, which says so.
func TestQuietPeriodDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		cfg := quietConfig()
		cfg.Timeout = 10 * time.Second
		e := startEngine(t, cfg, fake, nil)
		trafficUntil(t, fake, time.Second, time.Minute, func(f *fakeAdmin) { f.rqTotal++ })
		d, err := e.Trigger(context.Background(), testCaller)
		if err != nil {
			t.Fatal(err)
		}
		r := released(t, d)
		if r.Outcome != OutcomeTimeout || !strings.HasPrefix(r.Reason, "deadline 10s reached while new traffic still arrived (last new request ") {
			t.Errorf("result = %+v, want a timeout saying traffic still arrived", r)
		}
	})
}

// Without Envoy's listener configuration, probes cannot be told from traffic: the quiet period is not
// applied (the floor is), and the phase says why.
func TestQuietPeriodWithoutListenerConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		fake.topoErr = errors.New("config_dump: status 500")
		e := startEngine(t, quietConfig(), fake, nil)
		start := time.Now()
		trafficUntil(t, fake, 100*time.Millisecond, time.Minute, newConnAndRequest)
		d, err := e.Trigger(context.Background(), testCaller)
		if err != nil {
			t.Fatal(err)
		}
		r := released(t, d)
		if got := time.Since(start); got != time.Second {
			t.Errorf("released after %s, want the 1s floor", got)
		}
		if q := r.Phases[3]; q.Phase != PhaseQuiet || !strings.HasPrefix(q.Reason, "quiet period not applied") {
			t.Errorf("quiet phase ended: %+v", q)
		}
	})
}

// A quiet period of 0 keeps the drain as it was: released at the floor, no quiet phase.
func TestQuietPeriodOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		cfg := quietConfig()
		cfg.QuietPeriod = 0
		e := startEngine(t, cfg, fake, nil)
		start := time.Now()
		trafficUntil(t, fake, 100*time.Millisecond, time.Minute, newConnAndRequest)
		d, err := e.Trigger(context.Background(), testCaller)
		if err != nil {
			t.Fatal(err)
		}
		r := released(t, d)
		if got := time.Since(start); got != time.Second {
			t.Errorf("released after %s, want the 1s floor", got)
		}
		for _, p := range r.Phases {
			if p.Phase == PhaseQuiet {
				t.Errorf("a quiet phase with the quiet period off: %+v", p)
			}
		}
		if e.Status().Quiet != nil {
			t.Errorf("status quiet = %+v, want none", e.Status().Quiet)
		}
	})
}

// Upgraded connections (WebSockets) are work in flight, shown by kind, and named in the timeout reason.
func TestUpgradedConnectionsNamedAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(3)
		fake.upgrades = 2
		cfg := quietConfig()
		cfg.QuietPeriod, cfg.Timeout = 0, 5*time.Second
		reg := prometheus.NewRegistry()
		e := startEngine(t, cfg, fake, reg)
		d, err := e.Trigger(context.Background(), testCaller)
		if err != nil {
			t.Fatal(err)
		}
		r := released(t, d)
		want := "deadline 5s reached with 3 in flight: 2 WebSocket/upgraded connections still open, 1 request (or stream)"
		if r.Outcome != OutcomeTimeout || r.Reason != want {
			t.Errorf("result = %+v, want reason %q", r, want)
		}
		if k := e.Status().InFlight; k == nil || *k != (Kinds{Upgraded: 2, Requests: 1}) {
			t.Errorf("status in_flight = %+v", k)
		}
		if got := testutil.ToFloat64(e.metrics.inFlightKind.WithLabelValues("upgraded_connections")); got != 2 {
			t.Errorf("in_flight_by_kind{kind=upgraded_connections} = %v, want 2", got)
		}
	})
}

func TestQuietPeriodValidate(t *testing.T) {
	c := quietConfig()
	c.QuietPeriod = -time.Second
	var ce *ConfigError
	if err := c.Validate(); !errors.As(err, &ce) || ce.Setting != SettingQuietPeriod {
		t.Errorf("Validate = %v, want a QuietPeriod error", err)
	}
	c.QuietPeriod, c.AdaptiveQuiet = time.Second, true
	if err := c.Validate(); !errors.As(err, &ce) || ce.Setting != SettingQuietPeriod {
		t.Errorf("Validate = %v, want a QuietPeriod error: a fixed quiet period and the adaptive one", err)
	}
	c.QuietPeriod, c.MinDuration, c.Timeout = 0, 0, AdaptiveQuietMin
	if err := c.Validate(); !errors.As(err, &ce) || ce.Setting != SettingTimeout || !strings.Contains(err.Error(), "lower bound") {
		t.Errorf("Validate = %v, want a Timeout error naming the adaptive quiet period's lower bound", err)
	}
	c = quietConfig()
	c.QuietPeriod = c.Timeout
	if err := c.Validate(); !errors.As(err, &ce) || ce.Setting != SettingTimeout || !strings.Contains(err.Error(), "QuietPeriod") {
		t.Errorf("Validate = %v, want a Timeout error naming QuietPeriod", err)
	}
}

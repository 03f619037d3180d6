package integration

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// A load balancer's pool of idle keep-alive connections does not hold the default drain: it is released
// while every one of them is still open. When Envoy then exits, each one sees a clean close (FIN), no reset.
func TestIdleKeepAliveDoesNotHoldDrain(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		pool, err := testbed.IdlePool(ctx, e.HTTPAddr, 50)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()

		p := start(t, append([]string{"drain", "--admin-address", e.AdminURL}, fast()...)...)
		f := p.finished(t, 30*time.Second)
		if code := p.wait(t, 5*time.Second); code != 0 {
			t.Fatalf("exit code %d, want 0", code)
		}
		if f.Outcome != "drained" {
			t.Fatalf("outcome %q (%s), want drained", f.Outcome, f.Reason)
		}
		if c := pool.Counts(); c.Open != 50 {
			t.Fatalf("at release: %s; want all 50 idle connections still open (they must not hold the drain)", c)
		}
		// Released by the floor (1s): the idle connections were never counted. (This asserted a duration of at
		// most 2.1 s, which a cold make test at load 12 missed by a late poll: 2.158 s, nothing in flight.)
		releasedAtFloor(t, p)

		stopEnvoy(t, e)
		if err := pool.WaitEnded(ctx, 50); err != nil {
			t.Fatalf("idle connections after envoy exited: %s: %v", pool.Counts(), err)
		}
		if c := pool.Counts(); c.FIN != 50 {
			t.Errorf("idle connections after envoy exited: %s; want 50 clean closes (FIN)", c)
		}
	})
}

// In `connections` mode, idle keep-alive connections hold the drain until they close.
func TestConnectionsModeWaitsForIdleConnections(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		pool, err := testbed.IdlePool(ctx, e.HTTPAddr, 50)
		if err != nil {
			t.Fatal(err)
		}
		p, a := serve(t, e, fast("--count", "connections")...)
		shutdown := make(chan int, 1)
		go func() { code, _, _ := a.get(ctx, "/shutdown"); shutdown <- code }()

		st := a.waitStatus(t, 20*time.Second, func(s status) bool { return s.State == "waiting" })
		if st.Open != 50 {
			t.Errorf("open in connections mode = %d, want the 50 idle connections", st.Open)
		}
		select {
		case code := <-shutdown:
			t.Fatalf("/shutdown answered %d while 50 connections were open", code)
		default:
		}
		pool.Close() // the load balancer lets go
		closed := time.Now()
		if code := <-shutdown; code != http.StatusOK {
			t.Fatalf("/shutdown = %d, want 200", code)
		}
		f := p.finished(t, 10*time.Second)
		if f.Outcome != "drained" || time.Since(closed) > 10*time.Second {
			t.Errorf("outcome %q (%s), want drained after the pool closed", f.Outcome, f.Reason)
		}
	})
}

// Clients that keep sending on keep-alive connections get `Connection: close` on every response once the
// drain has begun, none of them fails, and the drain releases only after the last request has finished.
func TestActiveKeepAliveClients(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		// Ten clients, each with one request of 1 s in flight at any time: the work never pauses. (With
		// 200 ms requests a starved machine could leave all ten between a response and the next request —
		// each response closes its connection — and the drain would rightly release then. A starved machine
		// did so with 1 s requests too, 100 ms polls and no quiet period: a quiet period holds the drain across
		// such a gap, as it would for real clients. 3 s of it: a cold make test at load 12 starved the clients for
		// more than 1 s — no request reached Envoy from 0.02 s to 1.24 s into the drain, which released then.)
		loadCtx, stopLoad := context.WithCancel(ctx)
		load := testbed.KeepAlive(loadCtx, e.HTTPAddr, 10, 0, "/sleep?d=1s")
		_, a := serve(t, e, fast("--quiet-period", "3s")...)
		waitSent(t, load, 20)

		shutdown := make(chan time.Time, 1)
		go func() { a.get(ctx, "/shutdown"); shutdown <- time.Now() }()
		a.waitStatus(t, 20*time.Second, failingHealthChecks)
		before := load.Snapshot()
		// Past the floor: held by the new requests (quiet) or by those in flight (waiting).
		a.waitStatus(t, 20*time.Second, func(s status) bool { return s.State == "quiet" || s.State == "waiting" })
		select {
		case <-shutdown:
			t.Fatal("released while requests were in flight")
		default:
		}
		load.Drain() // the clients stop sending; requests in flight finish
		res := load.Wait()
		lastDone := time.Now()
		stopLoad()
		released := <-shutdown
		if res.Failed != 0 {
			t.Errorf("client errors: %s", res)
		}
		if !released.After(lastDone.Add(-50 * time.Millisecond)) {
			t.Errorf("released at %s, before the last request finished at %s", released, lastDone)
		}
		if n := res.ConnectionClose - before.ConnectionClose; n < res.OK-before.OK-10 || n == 0 {
			t.Errorf("%d of %d responses during the drain carried Connection: close; want all but at most one per client in flight when it began",
				n, res.OK-before.OK)
		}
	})
}

// Long requests started before the drain and after Envoy fails its health checks all complete with 200, the
// drain releases after the last of them, and a new connection opened at any time from the trigger to the
// release (the drain delay, the floor, the wait) is served.
//
// The test never has to catch a phase while it lasts: twice a make test stalled for seconds (the 2 s drain delay
// once took 5.3 s) and a test that waited to see "delay", then sent into it, found the drain past it. New
// connections run from before the trigger to the release, and which phase each began in is read afterwards from
// the drain's own timeline (/status: started, health_checks_failed, phases). The second long requests start
// once health checks are seen failing, in any phase up to the release; the first ones (10 s) hold the drain in
// its wait until well after the 3 s floor, so a stall that long still leaves them time.
func TestLongRequestsAndNewConnectionsComplete(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		first := testbed.Long(ctx, e.HTTPAddr, 5, 10*time.Second)
		waitInFlight(t, e, 5)
		p, a := serve(t, e, "--drain-delay", "2s", "--min-drain-duration", "3s", "--quiet-period", "0s", "--check-interval", "100ms", "--drain-timeout", "30s")
		fresh := testbed.ConnPerRequest(ctx, e.HTTPAddr, 2, 20*time.Millisecond, "/")
		waitSent(t, fresh, 10)
		shutdown := make(chan int, 1)
		var releasedAt time.Time
		go func() { code, _, _ := a.get(ctx, "/shutdown"); releasedAt = time.Now(); shutdown <- code }()

		seen := a.waitStatus(t, 20*time.Second, func(s status) bool { return failingHealthChecks(s) || s.State == "released" })
		if seen.State == "released" {
			t.Fatalf("the drain released before the test saw health checks failing (%+v); the first long requests should hold it 10 s", seen)
		}
		second := testbed.Long(ctx, e.HTTPAddr, 5, 3*time.Second) // new connections, health checks failing
		r1, r2 := first.Wait(), second.Wait()
		allDone := time.Now()
		code := <-shutdown
		fresh.Drain()
		f := p.finished(t, 5*time.Second)
		for name, r := range map[string]testbed.Result{"before the drain": r1, "during the drain": r2} {
			if r.OK != 5 || r.Failed != 0 {
				t.Errorf("long requests %s: %s; want 5 OK", name, r)
			}
		}
		if code != http.StatusOK || f.Outcome != "drained" {
			t.Errorf("/shutdown = %d, outcome %q (%s); want 200 drained", code, f.Outcome, f.Reason)
		}
		// Envoy counts a request in flight from its arrival, after the client began it, to its response, d later.
		last := lastBegan(first).Add(10 * time.Second)
		if l := lastBegan(second).Add(3 * time.Second); l.After(last) {
			last = l
		}
		if releasedAt.Before(last) {
			t.Errorf("released at %s, before the last long request could finish (%s)", releasedAt.Format(time.StampMilli), last.Format(time.StampMilli))
		}
		if time.Since(allDone) > 5*time.Second {
			t.Errorf("released %s after the long requests finished; want at most 5s (check interval 100ms)", time.Since(allDone))
		}

		res := fresh.Wait()
		if res.Failed != 0 || res.OK == 0 || res.Conns < res.OK {
			t.Errorf("new connections from before the trigger to the release: %s; want every one served, each on its own connection", res)
		}
		st := a.waitStatus(t, 5*time.Second, func(s status) bool { return s.State == "released" })
		delayEnd, delayOK := st.phaseEnd(drain.PhaseDelay)
		floorEnd, floorOK := st.phaseEnd(drain.PhaseMinDuration)
		if st.Started == nil || st.HealthChecksFailed == nil || !delayOK || !floorOK {
			t.Fatalf("/status after the release lacks the drain's timeline: %+v", st)
		}
		windows := []struct {
			name     string
			from, to time.Time
		}{
			{"drain delay", *st.Started, delayEnd},
			{"floor (health checks failing)", *st.HealthChecksFailed, floorEnd},
		}
		began := fresh.Began()
		for _, w := range windows {
			n := 0
			for _, b := range began {
				if !b.Before(w.from) && b.Before(w.to) {
					n++
				}
			}
			t.Logf("new connections begun in the %s (%s to %s): %d", w.name, w.from.Format(time.StampMilli), w.to.Format(time.StampMilli), n)
			if n == 0 {
				t.Errorf("no new connection began in the %s; the test shows nothing of it", w.name)
			}
		}
		stopEnvoy(t, e)
	})
}

// An HTTP/2 connection with streams in flight when the drain begins: the streams complete with 200, the
// drain releases after them, and Envoy sends GOAWAY and closes the connection.
func TestHTTP2StreamsCompleteAndGoAway(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		begun := time.Now()
		load := testbed.HTTP2(ctx, e.HTTPAddr, 4, "/sleep?d=2s")
		waitInFlight(t, e, 4)
		p, a := serve(t, e, fast()...)
		shutdown := make(chan int, 1)
		var releasedAt time.Time
		go func() { code, _, _ := a.get(ctx, "/shutdown"); releasedAt = time.Now(); shutdown <- code }()
		a.waitStatus(t, 10*time.Second, failingHealthChecks)
		load.Drain() // the client sends no new stream; the 4 in flight go on
		res := load.Wait()
		finished := time.Now()
		if code := <-shutdown; code != http.StatusOK {
			t.Errorf("/shutdown = %d, want 200", code)
		}
		f := p.finished(t, 5*time.Second)
		if f.Outcome != "drained" || releasedAt.Sub(begun) < 2*time.Second {
			t.Errorf("outcome %q %s after the streams began (%s); want drained after the 2s streams", f.Outcome, releasedAt.Sub(begun), f.Reason)
		}
		if res.Failed != 0 || res.OK < 4 {
			t.Errorf("HTTP/2 streams: %s; want the 4 in flight to complete", res)
		}
		// Envoy sends GOAWAY with the streams' responses and closes the connection after its drain_timeout (5s).
		waitStat(t, e, "http.ingress_http.downstream_cx_drain_close", 1)
		waitStatBelow(t, e, "http.ingress_http.downstream_cx_http2_active", 1, 15*time.Second)
		t.Logf("HTTP/2 connection closed by envoy %s after its streams finished", time.Since(finished).Round(time.Millisecond))
	})
}

// A TCP proxy connection is counted (no HTTP manager owns it) and holds the drain until it closes; one that
// outlives the deadline releases the drain at the deadline with outcome timeout.
func TestTCPProxyConnectionHoldsDrain(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)

		t.Run("until it closes", func(t *testing.T) {
			hold := holdTCP(ctx, t, e, 3*time.Second)
			p := start(t, append([]string{"drain", "--admin-address", e.AdminURL}, fast()...)...)
			res := hold.Wait()
			closed := time.Now()
			f := p.finished(t, 30*time.Second)
			p.wait(t, 5*time.Second)
			if res.Failed != 0 {
				t.Errorf("TCP connection: %s", res)
			}
			if f.Outcome != "drained" || p.exitAt.Before(closed) {
				t.Errorf("outcome %q (%s) at %s; want drained after the TCP connection closed at %s", f.Outcome, f.Reason, p.exitAt, closed)
			}
		})
		t.Run("past the deadline", func(t *testing.T) {
			holdTCP(ctx, t, e, 30*time.Second)
			p := start(t, "drain", "--admin-address", e.AdminURL, "--min-drain-duration", "500ms", "--quiet-period", "0s", "--check-interval", "100ms", "--drain-timeout", "2s")
			f := p.finished(t, 10*time.Second)
			if code := p.wait(t, 5*time.Second); code != 1 {
				t.Errorf("exit code %d, want 1 (timed out)", code)
			}
			if f.Outcome != "timeout" || f.Open != 1 {
				t.Errorf("outcome %q open %v (%s); want timeout with 1 open", f.Outcome, f.Open, f.Reason)
			}
			releasedByDeadline(t, p, f, 2*time.Second, time.Second, p.begun)
		})
	})
}

// Envoy killed mid-drain: the drain releases within one interval, outcome envoy_gone (exit 0).
func TestEnvoyKilledMidDrain(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		for _, unix := range []bool{false, true} {
			name := map[bool]string{false: "tcp admin", true: "unix admin"}[unix]
			t.Run(name, func(t *testing.T) {
				e := startEnvoy(t, bin, testbed.Options{AdminUnix: unix})
				ctx := testContext(t)
				long := testbed.Long(ctx, e.HTTPAddr, 2, 20*time.Second)
				defer long.Stop()
				waitInFlight(t, e, 2)
				p, a := serve(t, e, fast("--check-interval", "250ms")...)
				go a.get(ctx, "/shutdown")
				a.waitStatus(t, 20*time.Second, func(s status) bool { return s.State == "waiting" && s.Open == 2 })
				if err := e.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				<-e.Exited()
				killed, m := time.Now(), p.mark()
				f := p.finished(t, 10*time.Second)
				if f.Outcome != "envoy_gone" {
					t.Errorf("outcome %q (%s), want envoy_gone", f.Outcome, f.Reason)
				}
				if took, stall := time.Since(killed), p.stalledSince(m); took > time.Second+stall {
					t.Errorf("released %s after envoy died (kept from running %s), want within about one interval (250ms)", took, stall)
				}
			})
		}
	})
}

// --drain-listeners on a real Envoy: the graceful listener drain is accepted, and because it is sent with
// skip_exit, Envoy's listeners keep accepting new connections past its --drain-time-s (1s here), until the
// process exits: late connections during endpoint propagation are served, not refused.
func TestDrainListenersKeepAccepting(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		for _, mode := range []string{"all", "inbound"} {
			t.Run(mode, func(t *testing.T) {
				e := startEnvoy(t, bin, testbed.Options{DrainTime: time.Second})
				ctx := testContext(t)
				p := start(t, append([]string{"drain", "--admin-address", e.AdminURL, "--drain-listeners", mode}, fast()...)...)
				f := p.finished(t, 30*time.Second)
				if f.Outcome != "drained" {
					t.Fatalf("outcome %q (%s), want drained", f.Outcome, f.Reason)
				}
				if strings.Contains(p.log(), "could not start envoy's listener drain") {
					t.Fatalf("envoy refused the listener drain:\n%s", p.log())
				}
				// Past Envoy's drain time (1s) after the drain began: new connections are still served.
				late := testbed.Long(ctx, e.HTTPAddr, 1, 1500*time.Millisecond)
				if r := late.Wait(); r.OK != 1 {
					t.Errorf("a new connection after the listener drain: %s; want served", r)
				}
				after := testbed.KeepAlive(ctx, e.HTTPAddr, 1, 0, "/")
				waitSent(t, after, 5)
				after.Stop()
				if r := after.Wait(); r.Failed != 0 {
					t.Errorf("new connections after envoy's drain time: %s; want served", r)
				}
			})
		}
	})
}

// waitSent waits until a load has sent n requests.
func waitSent(t *testing.T, l *testbed.Load, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Snapshot().Sent < n {
		if time.Now().After(deadline) {
			t.Fatalf("load sent %s, want %d requests", l.Snapshot(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lastBegan is when the last request of l began.
func lastBegan(l *testbed.Load) time.Time { return slices.MaxFunc(l.Began(), time.Time.Compare) }

// waitInFlight waits until Envoy's HTTP manager has n requests in flight.
func waitInFlight(t *testing.T, e *testbed.Envoy, n int64) {
	t.Helper()
	waitStat(t, e, "http.ingress_http.downstream_rq_active", n)
}

// waitStatBelow waits until Envoy's stat name is below n, for at most d.
func waitStatBelow(t *testing.T, e *testbed.Envoy, name string, n int64, d time.Duration) {
	t.Helper()
	waitStatCond(t, e, name, d, func(v int64) bool { return v < n })
}

// waitStat waits until Envoy's stat name is at least n.
func waitStat(t *testing.T, e *testbed.Envoy, name string, n int64) {
	t.Helper()
	waitStatCond(t, e, name, 10*time.Second, func(v int64) bool { return v >= n })
}

func waitStatCond(t *testing.T, e *testbed.Envoy, name string, d time.Duration, cond func(int64) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	for {
		stats, err := e.Stats(ctx, "^"+strings.ReplaceAll(name, ".", `\.`)+"$")
		if _, ok := stats[name]; ok && err == nil && cond(stats[name]) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: condition not met within %s: %v %v", name, d, stats, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// An Envoy whose admin API stops answering after it has answered (SIGSTOP: the process is there, its sockets
// accept, nothing answers): the drain holds to its deadline and then says that the admin API stopped
// answering, since when and what its last count was, never "0 in flight" as if it had been read then; the
// first failure and the recovery are warnings.
func TestAdminStopsAnswering(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		t.Run("until the deadline", func(t *testing.T) {
			e := startEnvoy(t, bin, testbed.Options{})
			t.Cleanup(func() { _ = e.Signal(syscall.SIGCONT) }) // before Stop: a stopped Envoy ignores SIGTERM
			p := start(t, "drain", "--admin-address", e.AdminURL, "--min-drain-duration", "2s", "--quiet-period", "0s", "--check-interval", "100ms",
				"--drain-timeout", "5s", "--admin-timeout", "300ms", "--log-level", "debug")
			first := p.waitLog(t, "work in flight", 10*time.Second) // the first count read, during the minimum duration
			if open, _ := first["open"].(float64); open != 0 {
				t.Fatalf("first count %v, want 0 (nothing in flight)", first["open"])
			}
			if err := e.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			stalled := p.waitLog(t, "envoy admin API stopped answering; holding the drain until it answers or the deadline", 10*time.Second)
			if stalled.str("level") != "WARN" || stalled.str("last_answer") == "" || stalled["last_open"] != float64(0) {
				t.Errorf("first failure logged as %v, want a warning with the last answer's time and its count 0", stalled)
			}
			f := p.finished(t, 15*time.Second)
			if code := p.wait(t, 5*time.Second); code != 1 {
				t.Errorf("exit code %d, want 1 (timeout)", code)
			}
			if f.Outcome != "timeout" || !strings.Contains(f.Reason, "admin API stopped answering") ||
				!strings.Contains(f.Reason, "which counted 0 in flight") || strings.Contains(f.Reason, "reached with 0 in flight") {
				t.Errorf("outcome %q reason %q; want timeout saying the admin API stopped answering, with the last count 0", f.Outcome, f.Reason)
			}
			if f.Duration < 5*time.Second {
				t.Errorf("released after %s, before the 5s deadline", f.Duration)
			}
		})
		t.Run("and answers again", func(t *testing.T) {
			e := startEnvoy(t, bin, testbed.Options{})
			t.Cleanup(func() { _ = e.Signal(syscall.SIGCONT) })
			p := start(t, "drain", "--admin-address", e.AdminURL, "--min-drain-duration", "2s", "--quiet-period", "0s", "--check-interval", "100ms",
				"--drain-timeout", "30s", "--admin-timeout", "300ms", "--log-level", "debug")
			p.waitLog(t, "work in flight", 10*time.Second)
			if err := e.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			p.waitLog(t, "envoy admin API stopped answering; holding the drain until it answers or the deadline", 10*time.Second)
			if err := e.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			again := p.waitLog(t, "envoy admin API answers again", 10*time.Second)
			if again.str("level") != "WARN" || again["failed_polls"] == float64(0) || again.str("unanswered_for") == "" {
				t.Errorf("recovery logged as %v, want a warning with the failed polls and for how long", again)
			}
			f := p.finished(t, 30*time.Second)
			if code := p.wait(t, 5*time.Second); code != 0 || f.Outcome != "drained" {
				t.Errorf("exit %d outcome %q (%s); want 0 drained once the admin API answers again", code, f.Outcome, f.Reason)
			}
		})
	})
}

package integration

import (
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// 100 concurrent /shutdown calls share one drain: exactly one /healthcheck/fail, all released together
// with the same answer.
func TestConcurrentShutdownCalls(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		long := testbed.Long(ctx, e.HTTPAddr, 1, 2*time.Second)
		waitInFlight(t, e, 1)
		_, a := serve(t, e, fast()...)

		type answer struct {
			code int
			body string
			at   time.Time
		}
		answers := make([]answer, 100)
		var wg sync.WaitGroup
		for i := range answers {
			wg.Go(func() {
				code, body, err := a.get(ctx, "/shutdown")
				if err != nil {
					t.Error(err)
				}
				answers[i] = answer{code, body, time.Now()}
			})
		}
		wg.Wait()
		long.Wait()
		first, last := answers[0].at, answers[0].at
		for _, ans := range answers {
			if ans.code != http.StatusOK || ans.body != answers[0].body {
				t.Fatalf("answer %d %q, want 200 and the same reason as the others (%q)", ans.code, ans.body, answers[0].body)
			}
			first, last = minTime(first, ans.at), maxTime(last, ans.at)
		}
		if spread := last.Sub(first); spread > 500*time.Millisecond {
			t.Errorf("answers spread over %s, want them released together", spread)
		}
		_, metrics, err := a.get(ctx, "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			`shutdown_manager_admin_requests_total{endpoint="/healthcheck/fail",result="ok"} 1`,
			`shutdown_manager_drains_total{outcome="drained"} 1`,
			`shutdown_manager_drain_phase{phase="released"} 1`,
			`shutdown_manager_drain_duration_seconds_count 1`,
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})
}

// SIGTERM to serve mid-drain: it keeps serving, the pending /shutdown is answered, then it exits 0.
// Kill and restart of serve: Envoy stays LIVE (the manager never drains on its own start, restart or signal).
func TestServeLifecycle(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)

		t.Run("restart keeps envoy live", func(t *testing.T) {
			p, _ := serve(t, e, fast()...)
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			p.wait(t, 5*time.Second)
			p2, _ := serve(t, e, fast("--trigger-wait", "200ms")...)
			if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil { // and a plain stop with no trigger
				t.Fatal(err)
			}
			if code := p2.wait(t, 10*time.Second); code != 0 {
				t.Errorf("serve exit code %d after SIGTERM with no drain, want 0", code)
			}
			if st := envoyState(t, e); st != "LIVE" {
				t.Errorf("envoy state %s after the manager was killed, restarted and stopped, want LIVE", st)
			}
		})

		t.Run("drains again once envoy is live again", func(t *testing.T) {
			_, a := serve(t, e, fast("--min-drain-duration", "0s")...)
			for i := range 2 {
				if code, body, err := a.get(ctx, "/shutdown"); err != nil || code != 200 {
					t.Fatalf("/shutdown %d = %d %q %v", i, code, body, err)
				}
				if st := envoyState(t, e); st != "DRAINING" {
					t.Fatalf("after /shutdown %d envoy is %s, want DRAINING", i, st)
				}
				// Envoy's container restarting looks like this to the manager: the same admin address, LIVE.
				if _, err := e.AdminPost(ctx, "/healthcheck/ok"); err != nil {
					t.Fatal(err)
				}
			}
			_, metrics, _ := a.get(ctx, "/metrics")
			if !strings.Contains(metrics, `shutdown_manager_admin_requests_total{endpoint="/healthcheck/fail",result="ok"} 2`) {
				t.Errorf("want two drains of a live envoy, metrics say otherwise")
			}
		})

		t.Run("sigterm mid-drain", func(t *testing.T) {
			long := testbed.Long(ctx, e.HTTPAddr, 1, 3*time.Second)
			waitInFlight(t, e, 1)
			p, a := serve(t, e, fast()...)
			shutdown := make(chan string, 1)
			go func() { code, body, _ := a.get(ctx, "/shutdown"); shutdown <- http.StatusText(code) + " " + body }()
			a.waitStatus(t, 10*time.Second, failingHealthChecks)
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			p.waitLog(t, "waiting for the drain to release", 5*time.Second)
			if !p.running() {
				t.Fatal("serve exited on SIGTERM while a drain was running")
			}
			res := long.Wait()
			got := <-shutdown
			if !strings.HasPrefix(got, "OK drained") {
				t.Errorf("pending /shutdown answered %q, want 200 drained", got)
			}
			if code := p.wait(t, 10*time.Second); code != 0 {
				t.Errorf("serve exit code %d, want 0", code)
			}
			if res.Failed != 0 || res.OK != 1 {
				t.Errorf("long request: %s", res)
			}
		})
	})
}

// A /shutdown that arrives just after serve's SIGTERM (kubelet sends both at about the same moment) is
// still served within --trigger-wait.
func TestTriggerJustAfterSIGTERM(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		p, a := serve(t, e, fast("--trigger-wait", "5s")...)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		p.waitLog(t, "signal received; exiting once any drain has released", 5*time.Second)
		code, body, err := a.get(ctx, "/shutdown")
		if err != nil || code != http.StatusOK {
			t.Fatalf("/shutdown after SIGTERM = %d %q %v, want 200", code, body, err)
		}
		if code := p.wait(t, 10*time.Second); code != 0 {
			t.Errorf("exit code %d, want 0", code)
		}
		if st := envoyState(t, e); st != "DRAINING" {
			t.Errorf("envoy state %s, want DRAINING", st)
		}
	})
}

// The API on a unix socket, Envoy's admin on a unix socket.
func TestUnixSockets(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{AdminUnix: true})
		ctx := testContext(t)
		sock := "unix://" + filepath.Join(shortTempDir(t), "sm.sock")
		p := start(t, append([]string{"serve", "--listen", sock, "--admin-address", e.AdminURL, "--trigger-wait", "1m"}, fast()...)...)
		l := p.waitLog(t, "serving", 10*time.Second)
		if l.str("listen") != sock {
			t.Fatalf("serving on %q, want %q", l.str("listen"), sock)
		}
		a := newAPI(sock)
		if code, body, err := a.get(ctx, "/healthz"); err != nil || code != 200 {
			t.Fatalf("/healthz = %d %q %v", code, body, err)
		}
		code, body, err := a.get(ctx, "/shutdown")
		if err != nil || code != http.StatusOK || !strings.HasPrefix(body, "drained") {
			t.Fatalf("/shutdown = %d %q %v, want 200 drained", code, body, err)
		}
		if st := envoyState(t, e); st != "DRAINING" {
			t.Errorf("envoy state %s, want DRAINING", st)
		}
		// The pod's drain is over: SIGTERM exits at once, without waiting --trigger-wait for another trigger.
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 10*time.Second); code != 0 {
			t.Errorf("exit code %d, want 0", code)
		}
	})
}

// `status` prints the per-group table from a real Envoy.
func TestStatusCommand(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		holdTCP(ctx, t, e, 20*time.Second)
		out, err := runStatus(ctx, e.AdminURL)
		if err != nil {
			t.Fatalf("status: %v\n%s", err, out)
		}
		for _, want := range []string{"envoy LIVE", "listener.ingress_tcp", "http.ingress_http", "in flight (--count inflight): 1"} {
			if !strings.Contains(out, want) {
				t.Errorf("status output lacks %q:\n%s", want, out)
			}
		}
		// The table shows every group, the admin's too, with whether it counts.
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "listener.admin ") && !strings.Contains(line, "no: envoy's own") {
				t.Errorf("status counts the admin listener:\n%s", out)
			}
		}
	})
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// do sends method path with the given headers and returns the status and the body.
func (a api) do(ctx context.Context, method, path string, header http.Header) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, nil)
	if err != nil {
		return 0, "", err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// adminRequests reads shutdown_manager_admin_requests_total for one endpoint and result from /metrics.
func adminRequests(t *testing.T, ctx context.Context, a api, endpoint string) string {
	t.Helper()
	_, metrics, err := a.get(ctx, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	prefix := `shutdown_manager_admin_requests_total{endpoint="` + endpoint + `",result="ok"} `
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return v
		}
	}
	return "0"
}

// HEAD /shutdown (a link checker, curl -I) must not drain: 405, and Envoy stays LIVE.
func TestHeadDoesNotDrain(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		_, a := serve(t, e, fast()...)
		code, _, err := a.do(ctx, http.MethodHead, "/shutdown", nil)
		if err != nil || code != http.StatusMethodNotAllowed {
			t.Fatalf("HEAD /shutdown = %d %v, want 405", code, err)
		}
		if st := envoyState(t, e); st != "LIVE" {
			t.Errorf("envoy %s after HEAD /shutdown, want LIVE", st)
		}
		a.waitStatus(t, 10*time.Second, func(s status) bool { return s.State == "idle" })
	})
}

// With --token-file, a trigger without the token gets 401 and Envoy stays LIVE; kubelet's httpGet with
// httpHeaders (Authorization: Bearer …) drains. The drain's caller is logged and shown in /status.
func TestTokenFile(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		tokenFile := filepath.Join(shortTempDir(t), "token")
		if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p, a := serve(t, e, fast("--min-drain-duration", "0s", "--token-file", tokenFile)...)
		for _, h := range []http.Header{{}, {"Authorization": {"Bearer wrong"}}} {
			if code, body, err := a.do(ctx, http.MethodGet, "/shutdown", h); err != nil || code != http.StatusUnauthorized {
				t.Fatalf("/shutdown with %v = %d %q %v, want 401", h, code, body, err)
			}
		}
		if code, _, _ := a.do(ctx, http.MethodPost, "/resume", nil); code != http.StatusUnauthorized {
			t.Errorf("/resume without the token = %d, want 401", code)
		}
		if st := envoyState(t, e); st != "LIVE" {
			t.Fatalf("envoy %s after unauthorized triggers, want LIVE", st)
		}
		h := http.Header{"Authorization": {"Bearer s3cret"}, "User-Agent": {"kube-lifecycle/1.33"}}
		if code, body, err := a.do(ctx, http.MethodGet, "/shutdown", h); err != nil || code != 200 || !strings.HasPrefix(body, "drained") {
			t.Fatalf("/shutdown with the token = %d %q %v, want 200 drained", code, body, err)
		}
		if st := envoyState(t, e); st != "DRAINING" {
			t.Errorf("envoy %s after an authorized trigger, want DRAINING", st)
		}
		l := p.waitLog(t, "drain trigger", 5*time.Second)
		if l.str("user_agent") != "kube-lifecycle/1.33" || l.str("method") != "GET" || !strings.HasPrefix(l.str("remote"), "127.0.0.1:") || l.str("drain") != "started" {
			t.Errorf("trigger log line %v, want GET from 127.0.0.1 by kube-lifecycle/1.33, started", l)
		}
		_, body, _ := a.get(ctx, "/status")
		if !strings.Contains(body, `"user_agent": "kube-lifecycle/1.33"`) {
			t.Errorf("/status does not name the caller:\n%s", body)
		}
	})
}

// resume makes a drained Envoy LIVE again, and the next trigger drains it again; while a drain holds a
// waiter it refuses, unless forced, which releases that waiter with the true reason.
func TestResume(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		sock := "unix://" + filepath.Join(shortTempDir(t), "sm.sock")
		p := start(t, append([]string{"serve", "--listen", sock, "--admin-address", e.AdminURL}, fast("--min-drain-duration", "0s")...)...)
		p.waitLog(t, "serving", 10*time.Second)
		a := newAPI(sock)

		// A mistaken trigger, then the way back.
		if code, body, err := a.get(ctx, "/shutdown"); err != nil || code != 200 {
			t.Fatalf("/shutdown = %d %q %v", code, body, err)
		}
		if st := envoyState(t, e); st != "DRAINING" {
			t.Fatalf("envoy %s after /shutdown, want DRAINING", st)
		}
		out, err := runOutput(ctx, "resume", "--via", sock)
		if err != nil || !strings.Contains(out, "resumed: envoy health checks pass again, envoy state LIVE") {
			t.Fatalf("resume --via: %v\n%s", err, out)
		}
		if st := envoyState(t, e); st != "LIVE" {
			t.Fatalf("envoy %s after resume, want LIVE", st)
		}
		p.waitLog(t, "resumed: envoy health checks pass again", 5*time.Second)

		// The next trigger drains again, here one that waits for a long request.
		long := testbed.Long(ctx, e.HTTPAddr, 1, 30*time.Second)
		defer long.Stop()
		waitInFlight(t, e, 1)
		pending := make(chan string, 1)
		go func() { code, body, _ := a.get(ctx, "/shutdown"); pending <- fmt.Sprint(code, " ", body) }()
		a.waitStatus(t, 10*time.Second, func(s status) bool { return s.State == "waiting" && s.Open == 1 })
		if st := envoyState(t, e); st != "DRAINING" {
			t.Fatalf("envoy %s during the second drain, want DRAINING", st)
		}
		if n := adminRequests(t, ctx, a, "/healthcheck/fail"); n != "2" {
			t.Errorf("healthcheck/fail requests = %s, want 2 (a drain after the resume)", n)
		}
		out, err = runOutput(ctx, "resume", "--via", sock)
		if err == nil || !strings.Contains(out, "refused: a drain is running") {
			t.Fatalf("resume --via during a drain: %v\n%s; want exit 1, refused", err, out)
		}
		if st := envoyState(t, e); st != "DRAINING" {
			t.Fatalf("envoy %s after a refused resume, want DRAINING", st)
		}
		out, err = runOutput(ctx, "resume", "--via", sock, "--force")
		if err != nil || !strings.Contains(out, "the running drain was canceled") {
			t.Fatalf("resume --via --force: %v\n%s", err, out)
		}
		if got := <-pending; !strings.HasPrefix(got, "503 canceled: canceled by resume after") {
			t.Errorf("the waiter of the canceled drain got %q, want 503 canceled by resume", got)
		}
		if st := envoyState(t, e); st != "LIVE" {
			t.Errorf("envoy %s after a forced resume, want LIVE", st)
		}

		// Directly on Envoy's admin, without a sidecar.
		if _, err := e.AdminPost(ctx, "/healthcheck/fail"); err != nil {
			t.Fatal(err)
		}
		out, err = runOutput(ctx, "resume", "--admin-address", e.AdminURL)
		if err != nil || envoyState(t, e) != "LIVE" {
			t.Errorf("resume --admin-address: %v\n%s; envoy %s, want LIVE", err, out, envoyState(t, e))
		}
	})
}

// After a drain has finished, a flood of /shutdown callers is answered together with the finished drain's
// result, with a handful of /server_info requests (one per second at most), not one each.
func TestShutdownFloodAfterDrain(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		_, a := serve(t, e, fast("--min-drain-duration", "0s")...)
		code, first, err := a.get(ctx, "/shutdown")
		if err != nil || code != 200 {
			t.Fatalf("/shutdown = %d %q %v", code, first, err)
		}
		var wg sync.WaitGroup
		const n = 100
		bodies := make([]string, n)
		for i := range n {
			wg.Go(func() {
				code, body, err := a.get(ctx, "/shutdown")
				if err != nil || code != 200 {
					t.Errorf("/shutdown after the drain = %d %q %v", code, body, err)
				}
				bodies[i] = body
			})
		}
		wg.Wait()
		for _, b := range bodies {
			if b != first {
				t.Fatalf("a caller after the drain got %q, want the drain's result %q", b, first)
			}
		}
		// One shared check, plus one per second of the flood at most: a few, never one per caller.
		if got := adminRequests(t, ctx, a, "/server_info"); got == "0" || len(got) > 1 {
			t.Errorf("/server_info requests for %d callers = %s, want a few (one shared check per second)", n, got)
		}
	})
}

// --max-waiters: over the cap a caller is answered at once (429) and the drain goes on for the others.
func TestMaxWaiters(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		hold := holdTCP(ctx, t, e, time.Minute) // the work in flight, until the fourth caller is answered
		_, a := serve(t, e, fast("--max-waiters", "3")...)
		answers := make(chan int, 3)
		for range 3 {
			go func() { code, _, _ := a.get(ctx, "/shutdown"); answers <- code }()
		}
		waitMetric(t, ctx, a, "shutdown_manager_shutdown_waiters 3")
		code, body, err := a.get(ctx, "/shutdown")
		if err != nil || code != http.StatusTooManyRequests || !strings.HasPrefix(body, "busy: 3 callers already wait") {
			t.Errorf("fourth caller = %d %q %v, want 429 busy at once", code, body, err)
		}
		hold.Stop()
		for range 3 {
			if code := <-answers; code != 200 {
				t.Errorf("a waiter under the cap got %d, want 200", code)
			}
		}
	})
}

// waitMetric polls /metrics until it has the line want (a state the test cannot be told of otherwise).
func waitMetric(t *testing.T, ctx context.Context, a api, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		_, metrics, _ := a.get(ctx, "/metrics")
		if strings.Contains(metrics, "\n"+want+"\n") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("/metrics never showed %q", want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// --metrics-listen: /metrics on its own address and not on the control port.
func TestMetricsListen(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		p := start(t, append([]string{"serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--admin-address", e.AdminURL}, fast()...)...)
		l := p.waitLog(t, "serving", 10*time.Second)
		control, metrics := newAPI(l.str("listen")), newAPI(l.str("metrics_listen"))
		if code, _, err := control.get(ctx, "/metrics"); err != nil || code != http.StatusNotFound {
			t.Errorf("control port /metrics = %d %v, want 404", code, err)
		}
		code, body, err := metrics.get(ctx, "/metrics")
		if err != nil || code != 200 || !strings.Contains(body, `shutdown_manager_drain_phase{phase="idle"} 1`) {
			t.Errorf("metrics port /metrics = %d %v, want 200 with the drain metrics", code, err)
		}
		if code, _, _ := metrics.get(ctx, "/shutdown"); code != http.StatusNotFound {
			t.Errorf("metrics port /shutdown = %d, want 404: the metrics port triggers nothing", code)
		}
	})
}

// The sidecar mode's exec hook: drain --via joins the sidecar's drain (one /healthcheck/fail, the
// sidecar's) and exits as it answers.
func TestDrainViaJoinsServe(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		long := testbed.Long(ctx, e.HTTPAddr, 1, 2*time.Second)
		waitInFlight(t, e, 1)
		sock := "unix://" + filepath.Join(shortTempDir(t), "api.sock")
		sidecar := start(t, append([]string{"serve", "--listen", sock, "--admin-address", e.AdminURL}, fast()...)...)
		sidecar.waitLog(t, "serving", 10*time.Second)

		hook := start(t, append([]string{"drain", "--via", sock, "--admin-address", e.AdminURL}, fast()...)...)
		l := hook.waitLog(t, "sidecar drained", 30*time.Second)
		if code := hook.wait(t, 5*time.Second); code != 0 {
			t.Errorf("hook exit code %d, want 0", code)
		}
		if !strings.HasPrefix(l.str("reason"), "drained: ") {
			t.Errorf("hook logged reason %q, want the sidecar's line", l.str("reason"))
		}
		if r := long.Wait(); r.Failed != 0 || r.OK != 1 {
			t.Errorf("long request: %s", r)
		}
		if strings.Contains(hook.log(), `"msg":"drain started"`) {
			t.Errorf("the hook drained by itself although the sidecar answered:\n%s", hook.log())
		}
		tl := sidecar.waitLog(t, "drain trigger", 5*time.Second)
		if tl.str("remote") != "unix" || !strings.HasPrefix(tl.str("user_agent"), "shutdown-manager/") {
			t.Errorf("sidecar's trigger line %v, want the hook over the unix socket", tl)
		}
		if n := adminRequests(t, ctx, newAPI(sock), "/healthcheck/fail"); n != "1" {
			t.Errorf("healthcheck/fail requests = %s, want 1", n)
		}
	})
}

// drain --via with no sidecar to answer (not started, restarting: no socket, a stale socket, connection
// refused) or a sidecar that refuses the call (401): the hook drains Envoy itself, never skips the drain.
func TestDrainViaFallsBack(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		dir := shortTempDir(t)
		stale := filepath.Join(dir, "stale.sock")
		ln, err := net.Listen("unix", stale)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		tests := []struct {
			name string
			via  func(t *testing.T, e *testbed.Envoy) string
		}{
			{"no socket", func(*testing.T, *testbed.Envoy) string { return "unix://" + filepath.Join(dir, "absent.sock") }},
			{"stale socket", func(*testing.T, *testbed.Envoy) string { return "unix://" + stale }},
			{"connection refused", func(*testing.T, *testbed.Envoy) string { return "http://127.0.0.1:1" }},
			{"token refused", func(t *testing.T, e *testbed.Envoy) string {
				tokenFile := filepath.Join(shortTempDir(t), "token")
				if err := os.WriteFile(tokenFile, []byte("s3cret"), 0o600); err != nil {
					t.Fatal(err)
				}
				p := start(t, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-address", e.AdminURL, "--token-file", tokenFile}, fast()...)...)
				return "http://" + p.waitLog(t, "serving", 10*time.Second).str("listen")
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				e := startEnvoy(t, bin, testbed.Options{})
				hook := start(t, append([]string{"drain", "--via", tt.via(t, e), "--admin-address", e.AdminURL}, fast()...)...)
				hook.waitLog(t, map[bool]string{true: "sidecar refused the call: draining envoy directly", false: "sidecar unreachable: draining envoy directly"}[tt.name == "token refused"], 10*time.Second)
				f := hook.finished(t, 30*time.Second)
				if code := hook.wait(t, 5*time.Second); code != 0 || f.Outcome != "drained" {
					t.Errorf("fallback drain: exit %d, outcome %s (%s); want 0 drained", code, f.Outcome, f.Reason)
				}
				if st := envoyState(t, e); st != "DRAINING" {
					t.Errorf("envoy %s after the fallback drain, want DRAINING", st)
				}
			})
		}
	})
}

// --listen unix://PATH replaces only a stale socket; a live instance's socket, a file or a directory at
// PATH are refused and left as they are.
func TestListenUnixSocketSafety(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		dir := shortTempDir(t)

		stale := filepath.Join(dir, "stale.sock")
		ln, err := net.Listen("unix", stale)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		first := start(t, "serve", "--listen", "unix://"+stale, "--admin-address", e.AdminURL)
		first.waitLog(t, "serving", 10*time.Second)

		// A second instance on the live socket: refused, and the first one still answers.
		second := start(t, "serve", "--listen", "unix://"+stale, "--admin-address", e.AdminURL)
		if code := second.wait(t, 10*time.Second); code != 1 || !strings.Contains(second.log(), "a running process answers on this socket") {
			t.Errorf("second instance on a live socket: exit %d, log:\n%s\nwant exit 1 and the reason", code, second.log())
		}
		if code, _, err := newAPI("unix://"+stale).get(ctx, "/healthz"); err != nil || code != 200 {
			t.Errorf("first instance after the second tried its socket: %d %v, want it still answering", code, err)
		}

		file := filepath.Join(dir, "file")
		if err := os.WriteFile(file, []byte("keep me"), 0o644); err != nil {
			t.Fatal(err)
		}
		sub := filepath.Join(dir, "dir")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]string{file: "is a regular file", sub: "is a directory"} {
			p := start(t, "serve", "--listen", "unix://"+path, "--admin-address", e.AdminURL)
			if code := p.wait(t, 10*time.Second); code != 1 || !strings.Contains(p.log(), want) {
				t.Errorf("serve on %s: exit %d, log:\n%s\nwant exit 1 and %q", filepath.Base(path), code, p.log(), want)
			}
		}
		if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
			t.Errorf("the file at the listen path was touched: %q %v", b, err)
		}
		if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
			t.Errorf("the directory at the listen path was touched: %v", err)
		}
	})
}

// Address problems are usage errors found before anything starts: exit 2 and one line on stderr.
func TestListenAddressUsageError(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"serve", "--listen=:99999"},
		{"serve", "--listen=999.1.1.1:8090"},
		{"serve", "--metrics-listen=localhost:9090"},
	} {
		out, err := runOutput(ctx, args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		code := -1
		if ee, ok := err.(interface{ ExitCode() int }); ok {
			code = ee.ExitCode()
		}
		if code != 2 || len(lines) != 1 || strings.HasPrefix(out, "{") {
			t.Errorf("%v: exit %d, output %q; want exit 2 and one plain line", args, code, out)
		}
	}
}

// After a resume the pod is live again: serve's SIGTERM must wait --trigger-wait for kubelet's /shutdown,
// as before any drain, rather than exit at once because a drain once finished.
func TestSIGTERMAfterResumeWaitsForTrigger(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		p, a := serve(t, e, fast("--min-drain-duration", "0s", "--trigger-wait", "10s")...)
		if code, body, err := a.get(ctx, "/shutdown"); err != nil || code != 200 {
			t.Fatalf("/shutdown = %d %q %v", code, body, err)
		}
		if code, body, err := a.do(ctx, http.MethodPost, "/resume", nil); err != nil || code != 200 {
			t.Fatalf("/resume = %d %q %v", code, body, err)
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		p.waitLog(t, "signal received; exiting once any drain has released", 5*time.Second)
		code, body, err := a.get(ctx, "/shutdown")
		if err != nil || code != http.StatusOK || !strings.HasPrefix(body, "drained") {
			t.Fatalf("/shutdown after resume and SIGTERM = %d %q %v, want 200 drained", code, body, err)
		}
		if st := envoyState(t, e); st != "DRAINING" {
			t.Errorf("envoy %s, want DRAINING", st)
		}
		if code := p.wait(t, 10*time.Second); code != 0 {
			t.Errorf("exit code %d, want 0", code)
		}
	})
}

// drain --via over TCP with the sidecar's token: the hook is let in and joins (no fallback).
func TestDrainViaWithToken(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		tokenFile := filepath.Join(shortTempDir(t), "token")
		if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		sidecar, _ := serve(t, e, fast("--token-file", tokenFile)...)
		addr := "http://" + sidecar.waitLog(t, "serving", time.Second).str("listen")
		hook := start(t, append([]string{"drain", "--via", addr, "--token-file", tokenFile, "--admin-address", e.AdminURL}, fast()...)...)
		hook.waitLog(t, "sidecar drained", 30*time.Second)
		if code := hook.wait(t, 5*time.Second); code != 0 {
			t.Errorf("hook exit code %d, want 0", code)
		}
		if st := envoyState(t, e); st != "DRAINING" {
			t.Errorf("envoy %s, want DRAINING", st)
		}
	})
}

// run --listen with --metrics-listen: the agent's API and its metrics on separate sockets.
func TestAgentMetricsListen(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		dir := shortTempDir(t)
		sock, msock := "unix://"+filepath.Join(dir, "api.sock"), "unix://"+filepath.Join(dir, "metrics.sock")
		e, _ := agent(t, bin, "--listen", sock, "--metrics-listen", msock)
		ctx := testContext(t)
		// Envoy being ready says nothing of the manager's sockets: wait until both exist.
		for _, path := range []string{filepath.Join(dir, "api.sock"), filepath.Join(dir, "metrics.sock")} {
			for {
				if _, err := os.Stat(path); err == nil {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("%s not created within a minute", path)
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
		if code, _, err := newAPI(sock).get(ctx, "/metrics"); err != nil || code != http.StatusNotFound {
			t.Errorf("API /metrics = %d %v, want 404", code, err)
		}
		code, body, err := newAPI(msock).get(ctx, "/metrics")
		if err != nil || code != 200 || !strings.Contains(body, "shutdown_manager_shutdown_waiters 0") {
			t.Errorf("metrics socket /metrics = %d %v, want 200 with the API's metrics", code, err)
		}
		if err := e.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, _ := exitOf(t, e, 30*time.Second); code != 0 {
			t.Errorf("agent exit code %d, want 0", code)
		}
	})
}

// The sidecar's liveness probe, where inject points it, answers within kubelet's 1 s probe timeout while 300
// idle keep-alive connections hold the control port's every connection (--max-connections 256): the probe is
// on the metrics listener, out of the cap's reach. The control port's own /healthz meanwhile waits in the
// accept queue: that is the starvation the probe must not share.
func TestLivenessProbeNotStarved(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		// Where inject sends the probe, as a listener of serve: --port is --listen, --metrics-port --metrics-listen.
		pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: envoy, image: envoyproxy/envoy:v1.40.0}\n"
		cmd := exec.Command(cliBin, "inject", "--image", "registry.example/shutdown-manager:test", "--mode", "sidecar", "--hook", "http", "--port", "18090", "--metrics-port", "19090", "-f", "-")
		cmd.Stdin = strings.NewReader(pod)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("inject: %v", err)
		}
		var injected corev1.Pod
		if err := yaml.Unmarshal(out, &injected); err != nil {
			t.Fatal(err)
		}
		var probe *corev1.Probe
		for _, c := range append(injected.Spec.InitContainers, injected.Spec.Containers...) {
			if c.Name == "shutdown-manager" {
				probe = c.LivenessProbe
			}
		}
		if probe == nil || probe.HTTPGet == nil {
			t.Fatalf("no httpGet liveness probe on the injected sidecar:\n%s", out)
		}

		e := startEnvoy(t, bin, testbed.Options{})
		p := start(t, append([]string{"serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--admin-address", e.AdminURL}, fast()...)...)
		l := p.waitLog(t, "serving", 10*time.Second)
		listeners := map[int]string{18090: l.str("listen"), 19090: l.str("metrics_listen")}
		probeAddr, ok := listeners[probe.HTTPGet.Port.IntValue()]
		if !ok {
			t.Fatalf("the probe's port %s is neither --port nor --metrics-port", probe.HTTPGet.Port.String())
		}

		// 300 clients each send one request and keep their connection open, idle; the first 256 are answered.
		const idle, capacity = 300, 256
		answered := make(chan struct{}, idle)
		for range idle {
			c, err := net.Dial("tcp", l.str("listen"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if _, err := io.WriteString(c, "GET /status HTTP/1.1\r\nHost: sm\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			go func() {
				if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
					io.Copy(io.Discard, resp.Body)
					answered <- struct{}{}
				}
			}()
		}
		for range capacity {
			select {
			case <-answered:
			case <-time.After(30 * time.Second):
				t.Fatalf("the control port did not answer %d idle clients", capacity)
			}
		}

		// kubelet: timeoutSeconds 1 (the default), failureThreshold probes in a row.
		kubelet := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for i := range int(max(probe.FailureThreshold, 1)) {
			resp, err := kubelet.Get("http://" + probeAddr + probe.HTTPGet.Path)
			if err != nil {
				t.Fatalf("liveness probe %d on %s (port %s) failed with the control port full: %v", i+1, probeAddr, probe.HTTPGet.Port.String(), err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("liveness probe %d = %d, want 200", i+1, resp.StatusCode)
			}
		}
		if resp, err := kubelet.Get("http://" + l.str("listen") + "/healthz"); err == nil {
			resp.Body.Close()
			t.Errorf("the control port answered /healthz (%d) with %d idle connections held: the test did not fill it", resp.StatusCode, idle)
		}
	})
}

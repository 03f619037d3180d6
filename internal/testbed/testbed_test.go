package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// exitTimeout bounds waiting for Envoy to exit after a signal or a kill.
const exitTimeout = 15 * time.Second

// TestEnvoy runs every Envoy binary found, with the admin interface on TCP and
// on a unix socket, drives each listener with each load generator for about
// a second and expects no failure.
func TestEnvoy(t *testing.T) {
	bins := BinariesTB(t)
	up := StartUpstreamTB(t)
	for _, bin := range bins {
		t.Run(bin.Version, func(t *testing.T) {
			if !regexp.MustCompile(`^\d+\.\d+\.\d+`).MatchString(bin.Version) {
				t.Errorf("version %q of %s", bin.Version, bin.Path)
			}
			for _, unix := range []bool{false, true} {
				name := "admin=tcp"
				if unix {
					name = "admin=unix"
				}
				t.Run(name, func(t *testing.T) {
					e := StartTB(t, bin, up, Options{AdminUnix: unix})
					want := "http://127.0.0.1:"
					if unix {
						want = "unix:///"
					}
					if !strings.HasPrefix(e.AdminURL, want) {
						t.Errorf("AdminURL = %q, want prefix %q", e.AdminURL, want)
					}
					exerciseLoad(t, e)
					checkGracefulExit(t, e)
				})
			}
		})
	}
}

// exerciseLoad runs every generator at once for about a second.
func exerciseLoad(t *testing.T, e *Envoy) {
	const poolSize = 5
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()

	pool, err := IdlePool(ctx, e.HTTPAddr, poolSize)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	keepAlive := KeepAlive(ctx, e.HTTPAddr, 4, 10*time.Millisecond, "/")
	h2 := HTTP2(ctx, e.HTTPAddr, 4, "/")
	// Long and TCPHold end by themselves; t.Context() (not the second of the others) bounds them, so that a slow
	// start on a busy machine does not cut them.
	long := Long(t.Context(), e.HTTPAddr, 3, 200*time.Millisecond)
	tcp := TCPHold(t.Context(), e.TCPAddr, time.Second)

	// The pool's connections are established and idle now, so Envoy counts them.
	active := activeConns(t, e)
	for _, l := range []string{HTTPListener, TCPListener} {
		if _, ok := active["listener."+l+".downstream_cx_active"]; !ok {
			t.Errorf("no stat listener.%s.downstream_cx_active in %v", l, active)
		}
	}
	if n := active["listener."+HTTPListener+".downstream_cx_active"]; n < poolSize {
		t.Errorf("listener.%s.downstream_cx_active = %d, want >= %d (the idle pool)", HTTPListener, n, poolSize)
	}

	check := func(name string, r Result, minOK, conns int64) {
		t.Helper()
		t.Logf("%s: %v", name, r)
		if r.Failed != 0 || r.OK < minOK || r.Sent != r.OK+r.Failed+r.Canceled || r.ConnectionClose != 0 {
			t.Errorf("%s: %v; want no failure, ok >= %d, no Connection: close", name, r, minOK)
		}
		if conns > 0 && r.Conns != conns {
			t.Errorf("%s: %d connections, want %d", name, r.Conns, conns)
		}
	}
	if r := long.Wait(); r.OK != 3 {
		t.Errorf("long: %v; want ok=3", r)
	}
	check("tcp", tcp.Wait(), 2, 1)
	ka := keepAlive.Wait()
	check("keepalive", ka, 4, 0)
	checkKeptAlive(t, ka, 4)
	check("http2", h2.Wait(), 4, 1)

	pool.Close()
	if c := pool.Counts(); c.Open != poolSize {
		t.Errorf("idle pool: %v, want all %d open", c, poolSize)
	}
}

// checkKeptAlive checks that KeepAlive's clients kept their connections: each opened one, and at least half of
// the requests after each client's first went on a connection already open. Not exactly one each: Go's Transport
// does not reuse a connection whose request it has not yet seen written 50 ms after the response was read
// (net/http's maxWriteWaitBeforeConnReuse), and closes it instead, without an error; on a machine busy enough to
// hold the writing goroutine that long, a client opens another (CI saw 5 connections for 4 clients and 211
// requests, all answered, none with Connection: close).
func checkKeptAlive(t *testing.T, r Result, clients int64) {
	t.Helper()
	if reused := r.Sent - r.Conns; r.Conns < clients || 2*reused < r.Sent-clients {
		t.Errorf("keepalive: %d connections for %d clients and %d requests, want one each and at least half of "+
			"the requests after each client's first on a connection already open", r.Conns, clients, r.Sent)
	}
}

// activeConns returns GET /stats?filter=downstream_cx_active&format=json as
// a map from stat name to value.
func activeConns(t *testing.T, e *Envoy) map[string]int64 {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet,
		e.AdminEndpoint("/stats?filter=downstream_cx_active&format=json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.AdminClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /stats: %s %s %v", resp.Status, body, err)
	}
	var stats struct {
		Stats []struct {
			Name  string `json:"name"`
			Value int64  `json:"value"`
		} `json:"stats"`
	}
	if err := json.Unmarshal(body, &stats); err != nil {
		t.Fatalf("GET /stats: %v in %s", err, body)
	}
	m := map[string]int64{}
	for _, s := range stats.Stats {
		m[s.Name] = s.Value
	}
	return m
}

// checkGracefulExit sends SIGTERM and expects a clean exit seen alike by
// several waiters.
func checkGracefulExit(t *testing.T, e *Envoy) {
	if err := e.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, e)
	errs := make(chan error, 3)
	for range cap(errs) {
		go func() { errs <- e.Wait() }()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("Wait after SIGTERM = %v, want nil", err)
		}
	}
	if e.Killed() {
		t.Error("Killed() after SIGTERM")
	}
	e.Stop() // no-op now
	if err := e.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after exit = %v, want os.ErrProcessDone", err)
	}
}

func waitExit(t *testing.T, e *Envoy) {
	t.Helper()
	select {
	case <-e.Exited():
	case <-time.After(exitTimeout):
		t.Fatalf("Envoy still running %v after the signal", exitTimeout)
	}
}

// TestEnvoyContextKills checks that cancelling Start's context kills Envoy and
// that Stop is idempotent.
func TestEnvoyContextKills(t *testing.T) {
	bins := BinariesTB(t)
	up := StartUpstreamTB(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	e, err := Start(ctx, bins[0], up, Options{Dir: t.TempDir(), DrainTime: 1500 * time.Millisecond, DrainStrategy: "immediate", Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	if !slices.Contains(e.Cmd.Args, "--drain-time-s") || !slices.Contains(e.Cmd.Args, "immediate") {
		t.Errorf("args %q lack the drain options", e.Cmd.Args)
	}
	if i := slices.Index(e.Cmd.Args, "--drain-time-s"); i >= 0 && e.Cmd.Args[i+1] != "2" {
		t.Errorf("--drain-time-s %s, want 2 (1.5 s rounded up)", e.Cmd.Args[i+1])
	}
	cancel()
	waitExit(t, e)
	if err := e.Wait(); err == nil {
		t.Error("Wait after the context was cancelled = nil, want the kill")
	}
	e.Stop()
	e.Stop()
}

func TestStartErrors(t *testing.T) {
	bins := BinariesTB(t)
	up := StartUpstreamTB(t)
	for name, opts := range map[string]Options{
		"no dir":         {},
		"bad strategy":   {Dir: t.TempDir(), DrainStrategy: "slow"},
		"long unix path": {Dir: filepath.Join(t.TempDir(), strings.Repeat("d", 120)), AdminUnix: true},
	} {
		if _, err := Start(t.Context(), bins[0], up, opts); err == nil {
			t.Errorf("%s: Start succeeded", name)
		}
	}
	// A bootstrap Envoy rejects: the error carries the log.
	_, err := Start(t.Context(), bins[0], up, Options{Dir: t.TempDir(), Args: []string{"--config-yaml", "{bogus: 1}"}})
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("Start with a bad config: %v, want an exit error", err)
	}
	// A taken admin port: Envoy's error is the one Start picks another port on for an AdminRouteListener.
	port, err := freeLoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = Start(t.Context(), bins[0], up, Options{Dir: t.TempDir(), AdminPort: port, AdminRouteListener: true})
	if err == nil || !strings.Contains(err.Error(), "Address already in use") {
		t.Errorf("Start on a taken admin port: %v, want Envoy's \"Address already in use\"", err)
	}
}

// TestExtraConfigAndWrapper checks Options.ExtraClusters, ExtraListeners and
// Wrapper: the extra stats exist, and Stop kills Envoy under a wrapper that
// runs it as a child.
func TestExtraConfigAndWrapper(t *testing.T) {
	bins := BinariesTB(t)
	up := StartUpstreamTB(t)
	dir, err := os.MkdirTemp("", "tbw")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// sh keeps Envoy as its child (no exec), as a supervisor does.
	wrapper := []string{"/bin/sh", "-c", `"$@"; exit $?`, "sh"}
	e, err := Start(t.Context(), bins[0], up, Options{Dir: dir, AdminUnix: true, Concurrency: 1,
		ExtraClusters: 3, ExtraListeners: 2, Wrapper: wrapper})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	if e.Cmd.Path != "/bin/sh" {
		t.Errorf("process %s, want the wrapper", e.Cmd.Path)
	}
	st, err := e.Stats(t.Context(), `^(cluster\.extra_cluster_2\.membership_total|listener\.extra_listener_1\.downstream_cx_active|http\.extra_listener_1\.downstream_rq_active)$`)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 3 {
		t.Errorf("stats of the extra clusters and listeners: %v, want 3", st)
	}
	e.Stop()
	if _, err := e.AdminGet(t.Context(), "/ready"); err == nil {
		t.Error("Envoy still answers after Stop of its wrapper")
	}
}

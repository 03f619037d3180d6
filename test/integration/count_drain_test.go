package integration

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// The count attributes HTTP managers to the listeners that own them (Envoy's listener configuration): each
// test below is a configuration where one sum over every listener and every manager released the drain with
// a TCP connection open, or held it to its deadline with nothing in flight.

// tcpHoldsDrain runs `drain` with the extra flags while hold's TCP connection (3s) is open, and fails unless
// the drain released after the connection closed, drained.
func tcpHoldsDrain(t *testing.T, e *testbed.Envoy, hold *testbed.Load, flags ...string) {
	t.Helper()
	p := start(t, append([]string{"drain", "--admin-address", e.AdminURL}, fast(flags...)...)...)
	res := hold.Wait()
	closed := time.Now()
	f := p.finished(t, 30*time.Second)
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if res.Failed != 0 || res.OK == 0 {
		t.Errorf("TCP connection: %s", res)
	}
	if f.Outcome != "drained" || p.exitAt.Before(closed) {
		t.Errorf("outcome %q (%s) after %s, at %s; want drained after the TCP connection closed at %s",
			f.Outcome, f.Reason, f.Duration, p.exitAt.Format(time.StampMilli), closed.Format(time.StampMilli))
	}
	if strings.Contains(p.log(), "fallback") {
		t.Errorf("the count fell back to the rule without the listener configuration:\n%s", p.log())
	}
}

// Istio-style: an internal listener with its own HTTP manager holds a pooled connection from Envoy itself.
// Both are Envoy's own and leave the count together: the pooled connection neither counts nor hides the TCP
// proxy connection on another listener.
func TestCountInternalListenerDoesNotHideTCP(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{InternalListener: true})
		ctx := testContext(t)
		viaInternal(t, e)
		hold := holdTCP(ctx, t, e, 3*time.Second)
		tcpHoldsDrain(t, e, hold)
	})
}

// Excluding a listener excludes its group only: an idle keep-alive on it does not hide a TCP connection on
// another listener.
func TestCountExcludedListenerDoesNotHideTCP(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		pool, err := testbed.IdlePool(ctx, e.HTTPAddr, 2)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		hold := holdTCP(ctx, t, e, 3*time.Second)
		tcpHoldsDrain(t, e, hold, "--listener-exclude", `^listener\.ingress_http$`)
	})
}

// Excluding an HTTP manager excludes the listeners that own it: their idle keep-alive connections are not
// taken for non-HTTP connections, and the drain releases at its minimum duration, not at its deadline.
func TestCountExcludedManagerReleases(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		pool, err := testbed.IdlePool(ctx, e.HTTPAddr, 5)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		p := start(t, append([]string{"drain", "--admin-address", e.AdminURL},
			fast("--listener-exclude", `^http\.ingress_http$`, "--drain-timeout", "10s")...)...)
		f := p.finished(t, 30*time.Second)
		if code := p.wait(t, 5*time.Second); code != 0 || f.Outcome != "drained" {
			t.Fatalf("exit code %d, outcome %q (%s); want 0, drained", code, f.Outcome, f.Reason)
		}
		// Released by the floor (1s): the idle connections were never counted. (This asserted a duration of at
		// most 2.1 s, which a cold make test at load 12 missed by a late poll: 2.158 s, nothing in flight.)
		releasedAtFloor(t, p)
		if c := pool.Counts(); c.Open != 5 {
			t.Errorf("idle connections at release: %s, want all 5 open (they must not need to close)", c)
		}
	})
}

// statusGroups is the part of GET /status about the count's groups.
type statusGroups struct {
	State      string `json:"state"`
	Open       int64  `json:"open"`
	CountBasis string `json:"count_basis"`
	Groups     []struct {
		Listeners []string `json:"listeners"`
		Managers  []string `json:"http_managers"`
		Counted   bool     `json:"counted"`
		Reason    string   `json:"reason"`
	} `json:"groups"`
}

// Two listeners share the HTTP manager prefix ingress_http (as one manager on ports 80 and 443 does), and
// a TCP listener holds a connection. Excluding one listener of the pair excludes the group (both listeners
// and the manager), and /status says so; its idle keep-alives do not hide the TCP connection.
func TestCountSharedPrefixGroup(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{SharedPrefixListener: true})
		ctx := testContext(t)
		pool, err := testbed.IdlePool(ctx, e.ListenerAddrs[testbed.SharedPrefixListener], 2)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		hold := holdTCP(ctx, t, e, time.Minute) // closed once /status is read
		_, a := serve(t, e, fast("--listener-exclude", `^listener\.ingress_http_2$`)...)
		shutdown := make(chan time.Time, 1)
		go func() {
			if code, _, _ := a.get(ctx, "/shutdown"); code == http.StatusOK {
				shutdown <- time.Now()
			}
			close(shutdown)
		}()
		a.waitStatus(t, 20*time.Second, func(s status) bool { return s.State == "waiting" })
		_, body, err := a.get(ctx, "/status")
		if err != nil {
			t.Fatal(err)
		}
		var st statusGroups
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		if st.CountBasis != "listener_config" || st.Open != 1 {
			t.Errorf("/status count_basis %q open %d, want listener_config with the TCP connection:\n%s", st.CountBasis, st.Open, body)
		}
		found := false
		for _, g := range st.Groups {
			if slices.Equal(g.Listeners, []string{"listener.ingress_http", "listener.ingress_http_2"}) {
				found = true
				if !slices.Equal(g.Managers, []string{"http.ingress_http"}) || g.Counted || !strings.Contains(g.Reason, "--listener-exclude") {
					t.Errorf("the shared group %+v: want both listeners and the manager, excluded by --listener-exclude", g)
				}
			}
		}
		if !found {
			t.Errorf("no group of both listeners sharing ingress_http in /status:\n%s", body)
		}
		hold.Stop()
		res, closed := hold.Snapshot(), time.Now()
		released, ok := <-shutdown
		if !ok || released.Before(closed) || res.Failed != 0 {
			t.Errorf("/shutdown released at %s (ok %t), TCP connection (%s) closed at %s; want after it",
				released.Format(time.StampMilli), ok, res, closed.Format(time.StampMilli))
		}
	})
}

// One listener whose filter chains mix an HTTP manager and a TCP proxy (chosen by source address):
// including the listener includes its manager, so its idle keep-alives cancel out and its TCP connection
// counts: the drain holds while the TCP connection is open and releases when it closes, idle keep-alives
// still open.
func TestCountMixedFilterChains(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{MixedListener: true})
		ctx := testContext(t)
		addr := e.ListenerAddrs[testbed.MixedListener]
		pool, err := testbed.IdlePool(ctx, addr, 2)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		hold := testbed.TCPHoldFrom(ctx, testbed.MixedTCPSource, addr, 3*time.Second)
		waitStat(t, e, "tcp.mixed_tcp.downstream_cx_total", 1)
		waitStat(t, e, "listener.127.0.0.1_0.downstream_cx_active", 3)
		tcpHoldsDrain(t, e, hold, "--listener-include", `^listener\.127\.0\.0\.1_0$`, "--drain-timeout", "10s")
		if c := pool.Counts(); c.Open != 2 {
			t.Errorf("idle connections at release: %s, want both open", c)
		}
	})
}

// `shutdown-manager status` reads the listener configuration too: it shows the groups, which are excluded
// and why, and the basis of the count.
func TestStatusShowsGroups(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, topologyOptions)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		viaInternal(t, e)
		out, err := runStatus(ctx, e.AdminURL, "-o", "json", "--listener-exclude", `^http\.mixed_http$`)
		if err != nil {
			t.Fatalf("status: %v\n%s", err, out)
		}
		var rep statusGroups
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("status -o json: %v\n%s", err, out)
		}
		want := map[string]string{ // first listener of each group: why it is not counted ("" if counted)
			"listener.127.0.0.1_0":                  "--listener-exclude matches http.mixed_http",
			"listener.admin":                        "envoy's own",
			"listener.envoy_internal_internal_http": "envoy's own",
			"listener.ingress_http":                 "",
			"listener.ingress_tcp":                  "",
		}
		if rep.CountBasis != "listener_config" || len(rep.Groups) != len(want) {
			t.Fatalf("status: basis %q, %d groups; want listener_config, %d groups:\n%s", rep.CountBasis, len(rep.Groups), len(want), out)
		}
		for _, g := range rep.Groups {
			reason, ok := want[g.Listeners[0]]
			if !ok || g.Counted != (reason == "") || !strings.HasPrefix(g.Reason, reason) {
				t.Errorf("group %+v, want counted %t, reason %q", g, reason == "", reason)
			}
		}
		table, err := runStatus(ctx, e.AdminURL)
		if err != nil || !strings.Contains(table, "counted by: listener_config") || !strings.Contains(table, "listener.ingress_http listener.ingress_http_2 http.ingress_http") {
			t.Errorf("status table (%v):\n%s", err, table)
		}
	})
}

// A listener added during the drain (through LDS) first shows in the stats alone: the configuration read at
// the start does not know it, so all its connections count, and the next poll reads the configuration again,
// once. Its HTTP manager is then attributed to it, its idle keep-alives cancel out, and the drain releases
// when the work in flight is done, with them still open. The work in flight is a TCP connection the test
// closes once the drain has read the configuration again (see TestCountManagerChangedMidDrain).
//
// (The rule without the configuration releases here too; what this checks on the real Envoy is the re-read.)
func TestCountListenerAddedMidDrain(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{DynamicListeners: true})
		ctx := testContext(t)
		hold := holdTCP(ctx, t, e, time.Minute)
		p, a := serve(t, e, fast("--drain-timeout", "15s")...)
		shutdown := make(chan int, 1)
		go func() { code, _, _ := a.get(ctx, "/shutdown"); shutdown <- code }()
		a.waitStatus(t, 20*time.Second, func(s status) bool { return s.State == "waiting" })
		addr, err := e.AddHTTPListener(ctx, "late")
		if err != nil {
			t.Fatal(err)
		}
		// Health checks fail, so every response now closes its connection: the idle connections are opened
		// and left without a request (the HTTP manager has them all the same).
		for range 2 {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
		}
		waitStat(t, e, "http.late.downstream_cx_active", 2)
		waitReads(t, p, 2)
		openUntil(t, shutdown, hold)
		if code := <-shutdown; code != http.StatusOK {
			t.Fatalf("/shutdown = %d, want 200", code)
		}
		f := p.finished(t, 5*time.Second)
		if f.Outcome != "drained" || f.Duration > 10*time.Second {
			t.Errorf("outcome %q after %s (%s), want drained when the TCP connection closed", f.Outcome, f.Duration, f.Reason)
		}
		if st, err := e.Stats(ctx, `^listener\.late\.downstream_cx_active$`); err != nil || st["listener.late.downstream_cx_active"] != 2 {
			t.Errorf("idle connections on the new listener after release: %v %v, want both open", st, err)
		}
		if reads := strings.Count(p.log(), configRead); reads != 2 {
			t.Errorf("the listener configuration was read %d times, want twice (at the start, and for the new listener):\n%s", reads, p.log())
		}
		_, body, err := a.get(ctx, "/status")
		if err != nil {
			t.Fatal(err)
		}
		var st statusGroups
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		ok := false
		for _, g := range st.Groups {
			ok = ok || slices.Equal(g.Listeners, []string{"listener.late"}) && slices.Equal(g.Managers, []string{"http.late"}) && g.Counted && g.Reason == ""
		}
		if !ok {
			t.Errorf("/status after the drain: no counted group of listener.late with http.late:\n%s", body)
		}
	})
}

// An LDS update in the middle of a drain gives a listener the drain already knows another HTTP manager (another
// stat prefix): idle connections on it belong to that manager, and must not count as connections no manager
// owns. The drain reads the listener configuration again when the stats show a manager it does not know, and
// releases when the work in flight is done, long before its deadline. The work in flight is a TCP connection
// the test closes once the drain has read the new manager: a request of fixed length would end, on a starved
// machine, before the update reached the drain, and the drain would release without ever seeing it.
func TestCountManagerChangedMidDrain(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{DynamicListeners: true})
		ctx := testContext(t)
		addr, err := e.AddHTTPListener(ctx, "late")
		if err != nil {
			t.Fatal(err)
		}
		hold := holdTCP(ctx, t, e, time.Minute)
		p, a := serve(t, e, fast("--drain-timeout", "20s")...)
		shutdown := make(chan int, 1)
		go func() { code, _, _ := a.get(ctx, "/shutdown"); shutdown <- code }()
		a.waitStatus(t, 20*time.Second, func(s status) bool { return s.State == "waiting" })
		if err := e.SetHTTPManager(ctx, "late", "late2"); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
		}
		waitStat(t, e, "http.late2.downstream_cx_active", 2)
		waitReads(t, p, 2)
		openUntil(t, shutdown, hold)
		if code := <-shutdown; code != http.StatusOK {
			t.Fatalf("/shutdown = %d, want 200", code)
		}
		f := p.finished(t, 5*time.Second)
		if f.Outcome != "drained" {
			t.Errorf("outcome %q after %s (%s), want drained when the TCP connection closed", f.Outcome, f.Duration, f.Reason)
		}
		if st, err := e.Stats(ctx, `^listener\.late\.downstream_cx_active$`); err != nil || st["listener.late.downstream_cx_active"] != 2 {
			t.Errorf("idle connections on the changed listener after release: %v %v, want both open", st, err)
		}
		if reads := strings.Count(p.log(), configRead); reads != 2 {
			t.Errorf("the listener configuration was read %d times, want twice (at the start, and for the new manager):\n%s", reads, p.log())
		}
	})
}

// configRead is the log line of each read of Envoy's listener configuration by the drain.
const configRead = `"msg":"envoy's listener configuration read"`

// waitReads waits until the drain of p has read Envoy's listener configuration n times.
func waitReads(t *testing.T, p *proc, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for strings.Count(p.log(), configRead) < n {
		select {
		case <-ctx.Done():
			t.Fatalf("the drain did not read the listener configuration %d times within 20 s:\n%s", n, p.log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// openUntil checks that the drain has not released (shutdown has no answer) while hold's connection is open,
// then closes it.
func openUntil(t *testing.T, shutdown <-chan int, hold *testbed.Load) {
	t.Helper()
	select {
	case code := <-shutdown:
		t.Fatalf("/shutdown = %d while the TCP connection was open", code)
	default:
	}
	hold.Stop()
}

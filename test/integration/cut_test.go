package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// cutFlags: a 1s floor, no quiet period; the deadline is far beyond any request the tests keep open.
var cutFlags = []string{"--min-drain-duration", "1s", "--quiet-period", "0s", "--check-interval", "100ms", "--drain-timeout", "20s"}

// openH1 sends GET /sleep?d=<d> on n HTTP/1.1 connections of their own and returns them, the responses unread.
func openH1(t *testing.T, addr string, n int, d time.Duration) []net.Conn {
	t.Helper()
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := fmt.Fprintf(c, "GET /sleep?d=%s HTTP/1.1\r\nHost: test\r\n\r\n", d); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	return conns
}

// openH2 sends n GET /sleep?d=<d> as streams of one h2c connection, each read to its end; cancel resets
// them (RST_STREAM) and waits until every round trip has returned.
func openH2(ctx context.Context, t *testing.T, addr string, n int, d time.Duration) (cancel func()) {
	t.Helper()
	tr := &http.Transport{}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(sctx, http.MethodGet, "http://"+addr+"/sleep?d="+d.String(), nil)
			if resp, err := tr.RoundTrip(req); err == nil {
				io.Copy(io.Discard, resp.Body) //nolint:errcheck // read to its end or reset: closing it sooner would reset the stream
				resp.Body.Close()
			}
		})
	}
	cancel = func() { stop(); wg.Wait(); tr.CloseIdleConnections() }
	t.Cleanup(cancel)
	return cancel
}

// cutMetric reads shutdown_manager_drain_cut_by_client_total{kind} from /metrics.
func cutMetric(ctx context.Context, t *testing.T, a api, kind string) string {
	t.Helper()
	_, metrics, err := a.get(ctx, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^shutdown_manager_drain_cut_by_client_total\{kind="` + kind + `"\} (\S+)$`).FindStringSubmatch(metrics)
	if m == nil {
		t.Fatalf("/metrics lacks shutdown_manager_drain_cut_by_client_total{kind=%q}", kind)
	}
	return m[1]
}

// Long requests in flight when health checks fail, then cut by the client side during the drain (three
// HTTP/1.1 connections closed under their request, as a load balancer that kills its sessions when it marks
// the pod down does, and two HTTP/2 streams reset): the drain releases with 0 in flight, and its reason,
// /status and /metrics say that 5 requests (3 connections) were cut, not merely "0 in flight".
func TestDrainReportsCutByClient(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		conns := openH1(t, e.HTTPAddr, 3, time.Minute)
		resetH2 := openH2(ctx, t, e.HTTPAddr, 2, time.Minute)
		waitStat(t, e, "http.ingress_http.downstream_rq_active", 5)

		p, a := serve(t, e, cutFlags...)
		go a.get(ctx, "/shutdown") //nolint:errcheck // the drain's outcome is read from the log and /status
		// The baseline is the first poll after health checks failed: cut only once it was taken.
		a.waitStatus(t, 10*time.Second, func(st status) bool { return st.CutByClient != nil })
		for _, c := range conns {
			c.Close()
		}
		resetH2()

		f := p.finished(t, 15*time.Second)
		want := "; the client side cut 5 requests in flight (closing 3 connections under them) during the drain"
		if f.Outcome != "drained" || f.Open != 0 || !strings.HasPrefix(f.Reason, "0 in flight after ") || !strings.HasSuffix(f.Reason, want) {
			t.Errorf("outcome %s, open %v, reason %q; want drained, 0 in flight, and the reason ending %q", f.Outcome, f.Open, f.Reason, want)
		}
		st := a.waitStatus(t, 5*time.Second, func(st status) bool { return st.Outcome != "" })
		if st.CutByClient == nil || st.CutByClient.Requests != 5 || st.CutByClient.Connections != 3 {
			t.Errorf("/status cut_by_client = %+v, want 5 requests, 3 connections", st.CutByClient)
		}
		if got := cutMetric(ctx, t, a, "requests"); got != "5" {
			t.Errorf("cut_by_client_total{kind=requests} = %s, want 5", got)
		}
		if got := cutMetric(ctx, t, a, "connections"); got != "3" {
			t.Errorf("cut_by_client_total{kind=connections} = %s, want 3", got)
		}
	})
}

// The control: long requests in flight when health checks fail that end with their response during the
// drain. Nothing was cut, and nothing says so.
func TestDrainNoCutWhenRequestsComplete(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		long := testbed.Long(ctx, e.HTTPAddr, 3, 2*time.Second)
		t.Cleanup(long.Stop)
		waitStat(t, e, "http.ingress_http.downstream_rq_active", 3)

		p, a := serve(t, e, cutFlags...)
		go a.get(ctx, "/shutdown") //nolint:errcheck // the drain's outcome is read from the log and /status
		f := p.finished(t, 15*time.Second)
		if res := long.Wait(); res.Failed != 0 || res.OK != 3 {
			t.Errorf("long requests: %s, want 3 answered", res)
		}
		if f.Outcome != "drained" || f.Open != 0 || strings.Contains(f.Reason, "cut") {
			t.Errorf("outcome %s, open %v, reason %q; want drained with nothing cut", f.Outcome, f.Open, f.Reason)
		}
		st := a.waitStatus(t, 5*time.Second, func(st status) bool { return st.Outcome != "" })
		if st.CutByClient == nil || st.CutByClient.Requests != 0 || st.CutByClient.Connections != 0 {
			t.Errorf("/status cut_by_client = %+v, want 0 requests, 0 connections", st.CutByClient)
		}
		for _, kind := range []string{"requests", "connections"} {
			if got := cutMetric(ctx, t, a, kind); got != "0" {
				t.Errorf("cut_by_client_total{kind=%s} = %s, want 0", kind, got)
			}
		}
	})
}

// cuttingUpstream is an HTTP/1.1 origin that answers every request with its headers and part of its body,
// then, once cut is closed, closes the connection mid-response: Envoy passes the reset on to its client.
func cuttingUpstream(t *testing.T) (addr string, requests <-chan struct{}, cut chan<- struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got, release := make(chan struct{}, 16), make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if line == "\r\n" {
						break
					}
				}
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial"); err != nil {
					return
				}
				got <- struct{}{}
				select {
				case <-release:
				case <-t.Context().Done():
				}
			})
		}
	})
	return ln.Addr().String(), got, release
}

// The resets Envoy sends are not the client's: requests whose upstream closes mid-response during the drain
// are reset by Envoy (downstream_rq_tx_reset, and downstream_rq_rx_reset too), on HTTP/1.1 and HTTP/2, and the
// drain reports nothing cut by the client. The poll that releases it (downstream_rq_active at 0) reads the
// counters too: Envoy counts a reset before it destroys the stream, and /stats reads the gauge first.
func TestDrainDoesNotCountEnvoysResets(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		addr, requests, cut := cuttingUpstream(t)
		up := testbed.StartUpstreamTB(t)
		e := testbed.StartTB(t, bin, &testbed.Upstream{HTTPAddr: addr, TCPAddr: up.TCPAddr}, testbed.Options{})
		ctx := testContext(t)
		openH1(t, e.HTTPAddr, 2, time.Minute)
		openH2(ctx, t, e.HTTPAddr, 2, time.Minute)
		for range 4 {
			select {
			case <-requests:
			case <-ctx.Done():
				t.Fatal("the upstream did not receive 4 requests")
			}
		}
		waitStat(t, e, "http.ingress_http.downstream_rq_active", 4)

		p, a := serve(t, e, cutFlags...)
		go a.get(ctx, "/shutdown") //nolint:errcheck // the drain's outcome is read from the log and /status
		a.waitStatus(t, 10*time.Second, func(st status) bool { return st.CutByClient != nil })
		close(cut)
		waitStat(t, e, "http.ingress_http.downstream_rq_tx_reset", 4) // the two HTTP/1.1 requests and the two streams

		f := p.finished(t, 15*time.Second)
		if f.Outcome != "drained" || f.Open != 0 || strings.Contains(f.Reason, "cut") {
			t.Errorf("outcome %s, open %v, reason %q; want drained with nothing cut by the client", f.Outcome, f.Open, f.Reason)
		}
		st := a.waitStatus(t, 5*time.Second, func(st status) bool { return st.Outcome != "" })
		if st.CutByClient == nil || st.CutByClient.Requests != 0 || st.CutByClient.Connections != 0 {
			t.Errorf("/status cut_by_client = %+v, want 0 requests, 0 connections", st.CutByClient)
		}
		stats, err := e.Stats(ctx, `^http\.ingress_http\.downstream_(rq_(rx|tx)_reset|cx_destroy.*)$`)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("envoy %s: %v", bin.Version, stats)
	})
}

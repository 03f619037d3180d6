package main

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/bench/kubelet"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// TestPeerCountsOnRealEnvoy checks the models' counts on a real Envoy with two idle HTTP keep-alive
// connections and one TCP proxy connection open: Contour's filtered Prometheus query sees the HTTP ones
// only (its TCP blind spot), Envoy Gateway's listener query sees all three.
func TestPeerCountsOnRealEnvoy(t *testing.T) {
	bins := testbed.BinariesTB(t)
	e := testbed.StartTB(t, bins[0], testbed.StartUpstreamTB(t), testbed.Options{})
	ctx := t.Context()
	pool, err := testbed.IdlePool(ctx, e.HTTPAddr, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tcpCtx, stopTCP := context.WithCancel(ctx)
	defer stopTCP()
	tcp := testbed.TCPHold(tcpCtx, e.TCPAddr, time.Hour)
	defer tcp.Stop()
	if err := awaitStat(ctx, e, `^listener\.ingress_(http|tcp)\.downstream_cx_active$`, 10*time.Second, func(st map[string]int64) bool {
		return st["listener.ingress_http.downstream_cx_active"] == 2 && st["listener.ingress_tcp.downstream_cx_active"] == 1
	}); err != nil {
		t.Fatalf("the connections did not open (Envoy log %s): %v", e.LogPath, err)
	}
	r := &rig{e: e}

	body, err := adminDo(ctx, r, "GET", contourQuery)
	if err != nil {
		t.Fatal(err)
	}
	if got, n := contourConnections(body); got != 2 || n == 0 {
		t.Errorf("Contour's count: got %v (from %d samples), want 2 (HTTP only)\n%s", got, n, body)
	}
	if got, err := egConnections(ctx, r); err != nil || got != 3 {
		t.Errorf("Envoy Gateway's count: got %d, %v, want 3", got, err)
	}
}

// TestClaims: what counts as a peer claiming a successful drain.
func TestClaims(t *testing.T) {
	exited := func(code int) kubelet.HookResult { return kubelet.HookResult{Kind: kubelet.HookExited, Status: code} }
	answered := func(code int) kubelet.HookResult { return kubelet.HookResult{Kind: kubelet.HookAnswered, Status: code} }
	never := kubelet.HookResult{Kind: kubelet.HookNeverReturned}
	noResp := kubelet.HookResult{Kind: kubelet.HookNoResponse}
	tests := []struct {
		name          string
		sidecar, envy kubelet.HookResult
		ready         bool
		want          string
	}{
		{"hook exit 0 and ready file", exited(0), noResp, true, "success (exit 0, ready file written)"},
		{"hook exit 0", exited(0), never, false, "success (exit 0)"},
		{"sidecar answered 200", never, answered(200), false, "success (answered 200)"},
		{"hook failed", exited(1), noResp, false, "failure (exit 1)"},
		{"sidecar answered 500", never, answered(500), false, "failure (answered 500)"},
		{"nothing returned", never, never, false, "no verdict (never returned)"},
	}
	for _, tc := range tests {
		if got := claims(tc.sidecar, tc.envy, tc.ready); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

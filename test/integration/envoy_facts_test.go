package integration

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// The Envoy behaviour the default --count inflight rests on, checked on every pinned release (the rest of
// docs/envoy-drain-behaviour.md is exercised by the drain tests): after POST /healthcheck/fail, Envoy does
// not close idle keep-alive connections — not within its HTTP manager's drain_timeout (5 s) plus
// delayed_close_timeout (1 s), when it closes drain-closed connections that carried a response. Counting idle
// connections would therefore hold every drain until its deadline. If a future Envoy closes them, this test
// fails and the default deserves another look.
func TestEnvoyKeepsIdleConnectionsOnHealthcheckFail(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		pool, err := testbed.IdlePool(ctx, e.HTTPAddr, 5)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		if _, err := e.AdminPost(ctx, "/healthcheck/fail"); err != nil {
			t.Fatal(err)
		}
		watch, stop := context.WithTimeout(ctx, 7*time.Second)
		defer stop()
		if err := pool.WaitEnded(watch, 1); err == nil {
			t.Fatalf("envoy %s closed an idle keep-alive connection after /healthcheck/fail: %s", bin.Version, pool.Counts())
		}
		if c := pool.Counts(); c.Open != 5 {
			t.Errorf("idle connections 7s after /healthcheck/fail: %s; want all 5 open", c)
		}
	})
}

package integration

import (
	"flag"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

var update = flag.Bool("update", false, "rewrite internal/envoyadmin/testdata/{listeners,stats-topology}-<version>.json from the real Envoy")

// topologyOptions is an Envoy with every listener shape the count must attribute: the HTTP and TCP
// listeners, an internal listener with its own HTTP manager (Istio-style), a second listener sharing the
// HTTP manager prefix ingress_http, and a listener mixing an HTTP manager and a TCP proxy.
var topologyOptions = testbed.Options{InternalListener: true, SharedPrefixListener: true, MixedListener: true}

// Envoy's stats do not say which HTTP manager belongs to which listener; its listener configuration does.
// On each real Envoy, the stat scopes the Topology computes from /config_dump are exactly the scopes
// /stats shows (Envoy's admin apart), so every naming rule (stat_prefix, address, internal listener) holds.
// With -update the two answers become the fixtures of the envoyadmin and drain unit tests.
func TestListenerConfigMatchesStats(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, topologyOptions)
		ctx := testContext(t)
		// Work on every listener, so that the fixtures hold connections: a pooled connection to the internal
		// listener, idle keep-alives on the shared-prefix and mixed listeners, a TCP connection on the mixed one.
		viaInternal(t, e)
		for _, name := range []string{testbed.SharedPrefixListener, testbed.MixedListener} {
			pool, err := testbed.IdlePool(ctx, e.ListenerAddrs[name], 1)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
		}
		hold := testbed.TCPHoldFrom(ctx, testbed.MixedTCPSource, e.ListenerAddrs[testbed.MixedListener], time.Minute)
		defer hold.Stop()
		waitStat(t, e, "tcp.mixed_tcp.downstream_cx_total", 1)
		waitStat(t, e, "listener.127.0.0.1_0.downstream_cx_active", 2)

		config, err := e.AdminGet(ctx, "/config_dump?"+envoyadmin.ListenerConfigQuery)
		if err != nil {
			t.Fatal(err)
		}
		stats, err := e.AdminGet(ctx, "/stats?"+url.Values{"filter": {envoyadmin.ActiveFilter}, "format": {"json"}, "type": {"Gauges"}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		topo, err := envoyadmin.ParseListenerConfig(strings.NewReader(string(config)))
		if err != nil {
			t.Fatal(err)
		}
		snap, err := envoyadmin.ParseStats(strings.NewReader(string(stats)))
		if err != nil {
			t.Fatal(err)
		}
		var fromConfig, fromStats []string
		for _, l := range topo.Listeners {
			fromConfig = append(fromConfig, l.Scope)
			fromConfig = append(fromConfig, l.HTTP...)
		}
		for name := range snap.Listeners {
			fromStats = append(fromStats, name)
		}
		for name := range snap.HTTP {
			fromStats = append(fromStats, name)
		}
		fromConfig = append(fromConfig, "listener.admin", "http.admin")
		slices.Sort(fromConfig)
		fromConfig = slices.Compact(fromConfig)
		slices.Sort(fromStats)
		if !slices.Equal(fromConfig, fromStats) {
			t.Errorf("scopes from the listener config (and the admin's):\n%v\nscopes in /stats:\n%v", fromConfig, fromStats)
		}
		if snap.Listeners["listener.envoy_internal_internal_http"] != 1 || snap.HTTP["http.internal_http"].Connections != 1 {
			t.Errorf("no pooled connection to the internal listener: %+v", snap)
		}
		if *update {
			dir := filepath.Join("..", "..", "internal", "envoyadmin", "testdata")
			for name, body := range map[string][]byte{"listeners-" + bin.Version + ".json": config, "stats-topology-" + bin.Version + ".json": stats} {
				if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// viaInternal sends one request through the internal listener, on a connection it then closes: Envoy
// keeps its own upstream connection to the internal listener pooled, idle.
func viaInternal(t *testing.T, e *testbed.Envoy) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + e.HTTPAddr + testbed.ViaInternalPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s through the internal listener: %s", testbed.ViaInternalPath, resp.Status)
	}
	waitStat(t, e, "listener.envoy_internal_internal_http.downstream_cx_active", 1)
}

package integration

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// readinessOptions is an Envoy with a readiness listener (an HTTP manager running the health_check filter)
// beside the HTTP listener, whose manager upgrades WebSockets.
var readinessOptions = testbed.Options{ReadinessListener: true, WebSocket: true}

// On each real Envoy, the listener configuration marks the readiness listener's HTTP manager as a health
// check (and no other), and the drain's stats query returns the counters and gauges the quiet period and the
// kinds of work in flight need: each listener's downstream_cx_total, each manager's downstream_rq_total and
// downstream_cx_upgrades_active (one open WebSocket). With -update the answers become the fixtures
// listeners-readiness-<version>.json and stats-readiness-<version>.json of the envoyadmin and drain unit tests.
func TestReadinessListenerConfig(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, readinessOptions)
		ctx := testContext(t)
		ws, err := testbed.OpenWebSockets(ctx, e.HTTPAddr, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		probe(t, e, 2)
		waitStat(t, e, "http.ingress_http.downstream_cx_upgrades_active", 1)

		config, stats, topo := pollAnswers(ctx, t, e)
		hc := readinessManagers(topo)
		if want := map[string][]string{"listener.ready": {"http.ready"}}; !reflect.DeepEqual(hc, want) {
			t.Errorf("health-check managers by listener = %v, want %v", hc, want)
		}
		snap, err := envoyadmin.ParseStats(strings.NewReader(string(stats)))
		if err != nil {
			t.Fatal(err)
		}
		if g := snap.HTTP["http.ingress_http"]; g.Upgrades != 1 || g.Requests != 1 || g.RequestsTotal != 1 {
			t.Errorf("http.ingress_http = %+v, want 1 upgrade, 1 request in flight, 1 request in all", g)
		}
		if g := snap.HTTP["http.ready"]; g.RequestsTotal != 2 {
			t.Errorf("http.ready = %+v, want 2 requests in all", g)
		}
		if snap.ListenerTotals["listener.ready"] != 2 || snap.ListenerTotals["listener.ingress_http"] != 1 {
			t.Errorf("listener totals = %v, want 2 on listener.ready and 1 on listener.ingress_http", snap.ListenerTotals)
		}
		if strings.Contains(string(stats), "histograms") {
			t.Errorf("the poll's answer holds histograms: %s", stats)
		}
		gauges, err := e.AdminGet(ctx, "/stats?"+url.Values{"filter": {`^(listener|http)\..*\.downstream_(cx|rq)_active$`}, "format": {"json"}, "type": {"Gauges"}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("envoy %s: the poll's answer is %d bytes (%d with the gauges of work in flight only)", bin.Version, len(stats), len(gauges))
		if *update {
			dir := filepath.Join("..", "..", "internal", "envoyadmin", "testdata")
			for name, body := range map[string][]byte{"listeners-readiness-" + bin.Version + ".json": config, "stats-readiness-" + bin.Version + ".json": stats} {
				if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// On each real Envoy, the listener configuration tells a readiness listener (health_check filter, no route to
// a cluster) from a listener whose manager runs the health_check filter beside a route to the application,
// and the stats tell the latter's probes from its traffic: http.<stat_prefix>.health_check.request_total
// counts the requests the filter answered, before health checks fail and after (probes answered 503 then),
// and downstream_rq_total counts them and the traffic. The quiet period watches the difference, not the
// listener's connections. With -update the answers become the fixtures listeners-checked-<version>.json and
// stats-checked-<version>.json of the envoyadmin and drain unit tests.
func TestHealthCheckedListenerConfig(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{ReadinessListener: true, HealthCheckedListener: true})
		ctx := testContext(t)
		addr := "http://" + e.ListenerAddrs[testbed.HealthCheckedListener]
		probes := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
		clients := &http.Client{Timeout: 5 * time.Second} // keep-alive: one connection for several requests
		send := func(c *http.Client, path string, n, want int) {
			t.Helper()
			for range n {
				resp, err := c.Get(addr + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Fatalf("GET %s: %d, want %d", path, resp.StatusCode, want)
				}
			}
		}
		send(probes, testbed.ReadinessPath, 2, http.StatusOK)
		send(clients, "/", 3, http.StatusOK)
		if _, err := e.AdminPost(ctx, "/healthcheck/fail"); err != nil {
			t.Fatal(err)
		}
		send(probes, testbed.ReadinessPath, 2, http.StatusServiceUnavailable)
		send(clients, "/", 1, http.StatusOK)

		config, stats, topo := pollAnswers(ctx, t, e)
		mixed := map[string][]string{}
		for _, l := range topo.Listeners {
			if l.MixedHealthCheck != nil {
				mixed[l.Scope] = l.MixedHealthCheck
			}
		}
		if hc, want := readinessManagers(topo), map[string][]string{"listener.ready": {"http.ready"}}; !reflect.DeepEqual(hc, want) {
			t.Errorf("readiness managers by listener = %v, want %v", hc, want)
		}
		if want := map[string][]string{"listener.checked": {"http.checked"}}; !reflect.DeepEqual(mixed, want) {
			t.Errorf("mixed health-check managers by listener = %v, want %v", mixed, want)
		}
		snap, err := envoyadmin.ParseStats(strings.NewReader(string(stats)))
		if err != nil {
			t.Fatal(err)
		}
		if g := snap.HTTP["http.checked"]; g.RequestsTotal != 8 || g.HealthChecksTotal != 4 {
			t.Errorf("http.checked = %+v, want 8 requests in all, 4 of them health checks", g)
		}
		c := drain.Count(snap, &topo, drain.ModeInflight, drain.Selector{})
		if _, ok := c.Watched["listener.checked"]; ok || c.Watched["http.checked"] != 4 {
			t.Errorf("watched %v: want http.checked's 4 requests less health checks, and not listener.checked", c.Watched)
		}
		t.Logf("envoy %s: the poll's answer is %d bytes", bin.Version, len(stats))
		if *update {
			dir := filepath.Join("..", "..", "internal", "envoyadmin", "testdata")
			for name, body := range map[string][]byte{"listeners-checked-" + bin.Version + ".json": config, "stats-checked-" + bin.Version + ".json": stats} {
				if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// probe sends n readiness probes to the readiness listener, each on a new connection (as kubelet does), and
// returns the last status code.
func probe(t *testing.T, e *testbed.Envoy, n int) int {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	code := 0
	for range n {
		resp, err := c.Get("http://" + e.ListenerAddrs[testbed.ReadinessListener] + testbed.ReadinessPath)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		code = resp.StatusCode
	}
	return code
}

// readinessManagers returns, by listener scope, the HTTP managers the topology marks as readiness endpoints.
func readinessManagers(topo envoyadmin.Topology) map[string][]string {
	hc := map[string][]string{}
	for _, l := range topo.Listeners {
		if l.HealthCheck != nil {
			hc[l.Scope] = l.HealthCheck
		}
	}
	return hc
}

// pollAnswers reads what a drain's poll reads from e: the listener configuration (parsed) and the stats
// answer, both as Envoy wrote them (for -update's fixtures).
func pollAnswers(ctx context.Context, t *testing.T, e *testbed.Envoy) (config, stats []byte, topo envoyadmin.Topology) {
	t.Helper()
	config, err := e.AdminGet(ctx, "/config_dump?"+envoyadmin.ListenerConfigQuery)
	if err != nil {
		t.Fatal(err)
	}
	stats, err = e.AdminGet(ctx, "/stats?"+envoyadmin.StatsQuery)
	if err != nil {
		t.Fatal(err)
	}
	topo, err = envoyadmin.ParseListenerConfig(strings.NewReader(string(config)))
	if err != nil {
		t.Fatal(err)
	}
	return config, stats, topo
}

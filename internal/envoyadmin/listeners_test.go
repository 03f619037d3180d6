package envoyadmin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// listeners-many-<v>.json is GET /config_dump?mask=static_listeners,dynamic_listeners of a real Envoy running
// testdata/many-bootstrap.json (static listeners of every naming rule) with testdata/many-lds.json as its
// file LDS (three dynamic listeners, and "warm", whose routes never arrive: it stays warming);
// stats-many-<v>.json is its /stats?filter=ActiveFilter&format=json&type=Gauges at the same time.
func TestParseListenerConfigMany(t *testing.T) {
	want := []Listener{
		{Name: "uds", Scope: "listener./tmp/cnt/l.sock", HTTP: []string{"http.udsh"}},
		{Name: "any", Scope: "listener.0.0.0.0_18102", HTTP: []string{"http.any"}},
		{Name: "port0", Scope: "listener.127.0.0.1_0", HTTP: []string{"http.p0"}},
		{Name: "noprefix", Scope: "listener.127.0.0.1_18001", HTTP: []string{"http.shared"}},
		{Name: "mixed", Scope: "listener.127.0.0.1_18003", HTTP: []string{"http.defhttp", "http.mixhttp"}, NonHTTP: true},
		{Name: "tcponly", Scope: "listener.127.0.0.1_18005", NonHTTP: true},
		{Name: "udp", Scope: "listener.127.0.0.1_18006"},
		{Name: "multiaddr", Scope: "listener.127.0.0.1_18007", HTTP: []string{"http.multi"}},
		{Name: "dyn1", Scope: "listener.127.0.0.1_18203", HTTP: []string{"http.dynh"}},
		{Name: "warm", Scope: "listener.127.0.0.1_18205", HTTP: []string{"http.warmh"}},
		{Name: "ipv6", Scope: "listener.[__1]_18004", HTTP: []string{"http.v6"}}, // configured as 0:0:0:0:0:0:0:1
		{Name: "v6any", Scope: "listener.[__]_18103", HTTP: []string{"http.v6any"}},
		{Name: "colon", Scope: "listener.a_b", HTTP: []string{"http.h_x"}}, // stat_prefix "a:b", manager "h:x"
		{Name: "dyntcp", Scope: "listener.dt", NonHTTP: true},
		{Name: "dynint", Scope: "listener.envoy_internal_dynint", Internal: true, HTTP: []string{"http.dynint"}},
		{Name: "internal_l", Scope: "listener.envoy_internal_internal_l", Internal: true, HTTP: []string{"http.inthttp"}},
		{Name: "internal_pfx", Scope: "listener.ipfx", Internal: true, NonHTTP: true},
		{Name: "withprefix", Scope: "listener.myprefix", HTTP: []string{"http.shared"}},
	}
	for _, v := range []string{"1.36.2", "1.40.0"} {
		t.Run(v, func(t *testing.T) {
			topo := parseFixture(t, "testdata/listeners-many-"+v+".json")
			if !reflect.DeepEqual(topo.Listeners, want) {
				t.Errorf("ParseListenerConfig =\n%+v\nwant\n%+v", topo.Listeners, want)
			}
			// Every scope of the real stats is one the config names; every listener the config names has
			// stats, except the one still warming.
			snap := statsFixture(t, "testdata/stats-many-"+v+".json")
			checkScopes(t, topo, snap, "listener.127.0.0.1_18205")
		})
	}
}

// listeners-<v>.json and stats-topology-<v>.json are the testbed's Envoy with every topology option, written
// by `go test ./test/integration -run TestListenerConfigMatchesStats -update`.
func TestParseListenerConfigTestbed(t *testing.T) {
	want := []Listener{
		{Name: "mixed", Scope: "listener.127.0.0.1_0", HTTP: []string{"http.mixed_http"}, NonHTTP: true},
		{Name: "internal_http", Scope: "listener.envoy_internal_internal_http", Internal: true, HTTP: []string{"http.internal_http"}},
		{Name: "ingress_http", Scope: "listener.ingress_http", HTTP: []string{"http.ingress_http"}},
		{Name: "ingress_http_2", Scope: "listener.ingress_http_2", HTTP: []string{"http.ingress_http"}},
		{Name: "ingress_tcp", Scope: "listener.ingress_tcp", NonHTTP: true},
	}
	for _, v := range []string{"1.36.2", "1.40.0"} {
		t.Run(v, func(t *testing.T) {
			topo := parseFixture(t, "testdata/listeners-"+v+".json")
			if !reflect.DeepEqual(topo.Listeners, want) {
				t.Errorf("ParseListenerConfig =\n%+v\nwant\n%+v", topo.Listeners, want)
			}
			checkScopes(t, topo, statsFixture(t, "testdata/stats-topology-"+v+".json"))
		})
	}
}

func parseFixture(t *testing.T, path string) Topology {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	topo, err := ParseListenerConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func statsFixture(t *testing.T, path string) Snapshot {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := ParseStats(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkScopes fails unless the scopes of snap (canonical, Envoy's admin apart) are exactly the topology's,
// but for the listener scopes in noStats.
func checkScopes(t *testing.T, topo Topology, snap Snapshot, noStats ...string) {
	t.Helper()
	var fromConfig, fromStats []string
	for _, l := range topo.Listeners {
		if !slices.Contains(noStats, l.Scope) {
			fromConfig = append(fromConfig, l.Scope)
		}
		fromConfig = append(fromConfig, l.HTTP...)
	}
	for name := range snap.Listeners {
		fromStats = append(fromStats, CanonicalScope(name))
	}
	for name := range snap.HTTP {
		fromStats = append(fromStats, CanonicalScope(name))
	}
	fromConfig = append(fromConfig, "listener.admin", "http.admin")
	slices.Sort(fromConfig)
	fromConfig = slices.Compact(fromConfig)
	slices.Sort(fromStats)
	if !slices.Equal(fromConfig, fromStats) {
		t.Errorf("scopes from the config:\n%v\nscopes in the stats:\n%v", fromConfig, fromStats)
	}
}

func TestParseListenerConfig(t *testing.T) {
	const hcm = `{"@type":"` + hcmType + `","stat_prefix":"%s"}`
	tests := []struct {
		name    string
		in      string
		want    []Listener
		wantErr bool
	}{
		{"no listeners", `{"configs":[]}`, []Listener{}, false},
		{"other dumps ignored", `{"configs":[{"@type":"type.googleapis.com/envoy.admin.v3.ClustersConfigDump"}]}`, []Listener{}, false},
		{"not JSON", `configs`, nil, true},
		{"no configs", `{}`, nil, true},
		{"a draining and an active version merge",
			`{"configs":[{"dynamic_listeners":[{"name":"l","active_state":{"listener":{"name":"l","stat_prefix":"l","filter_chains":[{"filters":[{"typed_config":` + strings.Replace(hcm, "%s", "new", 1) + `}]}]}},` +
				`"draining_state":{"listener":{"name":"l","stat_prefix":"l","filter_chains":[{"filters":[{"typed_config":{"@type":"x.TcpProxy"}}]},{"filters":[{"typed_config":` + strings.Replace(hcm, "%s", "old", 1) + `}]}]}}}]}]}`,
			[]Listener{{Name: "l", Scope: "listener.l", HTTP: []string{"http.new", "http.old"}, NonHTTP: true}}, false},
		{"the terminal filter decides; a chain without filters is not HTTP",
			`{"configs":[{"static_listeners":[{"listener":{"name":"l","address":{"socket_address":{"address":"10.0.0.1","port_value":"80"}},"filter_chains":[{"filters":[{"typed_config":` + strings.Replace(hcm, "%s", "h", 1) + `},{"typed_config":{"@type":"x.Redis"}}]},{}]}}]}]}`,
			[]Listener{{Name: "l", Scope: "listener.10.0.0.1_80", NonHTTP: true}}, false},
		{"a listener without a stat scope is left out",
			`{"configs":[{"static_listeners":[{"listener":{"name":"api","filter_chains":[{"filters":[{"typed_config":` + strings.Replace(hcm, "%s", "h", 1) + `}]}]}}]}]}`,
			[]Listener{}, false},
		{"a typed struct or ECDS filter is not known to be HTTP",
			`{"configs":[{"static_listeners":[{"listener":{"name":"l","stat_prefix":"s","filter_chains":[{"filters":[{"config_discovery":{}}]}]}}]}]}`,
			[]Listener{{Name: "l", Scope: "listener.s", NonHTTP: true}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseListenerConfig(strings.NewReader(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %t", err, tt.wantErr)
			}
			if err == nil && !reflect.DeepEqual(got.Listeners, tt.want) {
				t.Errorf("ParseListenerConfig =\n%+v\nwant\n%+v", got.Listeners, tt.want)
			}
		})
	}
}

// The client reads the listener configuration with the listeners-only query, and never more than maxBody.
func TestClientListenerConfig(t *testing.T) {
	fixture, err := os.ReadFile("testdata/listeners-1.40.0.json")
	if err != nil {
		t.Fatal(err)
	}
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.Path+"?"+r.URL.RawQuery)
		if r.URL.Query().Get("resource") == "static_clusters" {
			w.Write([]byte("{}")) // what Envoy answers when no static cluster matches
			return
		}
		w.Write(fixture)
	}))
	defer srv.Close()
	addr, _ := ParseAddress(srv.URL)
	c := New(addr, Options{Timeout: 5 * time.Second})
	topo, err := c.ListenerConfig(context.Background())
	if err != nil || len(topo.Listeners) != 5 {
		t.Fatalf("ListenerConfig = %+v, %v; want the 5 listeners of the fixture", topo, err)
	}
	// The fixture's managers route only to the clusters internal and upstream_http: the second read asks
	// for those two static clusters, to tell whether either is the admin API.
	want := []string{"/config_dump?" + ListenerConfigQuery, "/config_dump?" + StaticClustersQuery([]string{"internal", "upstream_http"})}
	if !reflect.DeepEqual(queries, want) {
		t.Errorf("requests %q, want %q", queries, want)
	}
	if topo.AdminRoutesUnread != "" {
		t.Errorf("AdminRoutesUnread = %q after an answer", topo.AdminRoutesUnread)
	}

	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"configs":[{"static_listeners":[`))
		chunk := []byte(strings.Repeat(`{"listener":{"name":"x","stat_prefix":"x"}},`, 1000))
		for written := 0; written <= maxBody; written += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer big.Close()
	addr, _ = ParseAddress(big.URL)
	c = New(addr, Options{Timeout: 5 * time.Second})
	if _, err := c.ListenerConfig(context.Background()); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("ListenerConfig of an answer over %d bytes: err = %v, want too large", maxBody, err)
	}
}

func FuzzParseListenerConfig(f *testing.F) {
	for _, p := range []string{"testdata/listeners-1.36.2.json", "testdata/listeners-many-1.40.0.json", "testdata/listeners-checked-1.40.0.json"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"configs":[{"dynamic_listeners":[{"name":"n","warming_state":{"listener":{"internal_listener":{},"default_filter_chain":{"filters":[{"typed_config":{"@type":"` + hcmType + `","stat_prefix":"a:b"}}]}}}}]}]}`))
	f.Add([]byte(`{"configs":[{"static_listeners":[{"listener":{"address":{"socket_address":{"address":"fe80::1%eth0","port_value":1}}}}]}]}`))
	f.Add([]byte(`{"configs":[{"static_listeners":[{"listener":{"stat_prefix":"l","filter_chains":[{"filters":[{"typed_config":{"@type":"` + hcmType +
		`","stat_prefix":"p","route_config":{"virtual_hosts":[{"routes":[{"route":{"cluster":"c"}},{"direct_response":{}}]}]},"http_filters":[{"typed_config":{"@type":"` +
		healthCheckType + `"}}]}}]},{"filters":[{"typed_config":{"@type":"` + hcmType + `","stat_prefix":"p","route_config":{}}}]}]}}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		topo, err := ParseListenerConfig(strings.NewReader(string(b)))
		if err != nil {
			return
		}
		for i, l := range topo.Listeners {
			if !strings.HasPrefix(l.Scope, "listener.") || strings.Contains(l.Scope, ":") {
				t.Errorf("listener scope %q", l.Scope)
			}
			if i > 0 && topo.Listeners[i-1].Scope >= l.Scope {
				t.Errorf("scopes not sorted and unique: %q then %q", topo.Listeners[i-1].Scope, l.Scope)
			}
			for _, h := range append(slices.Clone(l.HealthCheck), l.MixedHealthCheck...) {
				if !slices.Contains(l.HTTP, h) {
					t.Errorf("readiness manager %q not one of HTTP %q", h, l.HTTP)
				}
			}
			for _, h := range l.MixedHealthCheck {
				if slices.Contains(l.HealthCheck, h) {
					t.Errorf("manager %q both a readiness endpoint only and mixed", h)
				}
			}
			if !slices.IsSorted(l.HTTP) || len(slices.Compact(slices.Clone(l.HTTP))) != len(l.HTTP) {
				t.Errorf("HTTP scopes not sorted and unique: %q", l.HTTP)
			}
			for _, h := range l.HTTP {
				if !strings.HasPrefix(h, "http.") || len(h) == len("http.") || strings.Contains(h, ":") {
					t.Errorf("HTTP manager scope %q", h)
				}
			}
		}
		again, _ := ParseListenerConfig(strings.NewReader(string(b)))
		if !reflect.DeepEqual(topo, again) {
			t.Errorf("not deterministic: %+v then %+v", topo, again)
		}
	})
}

// listeners-readiness-<v>.json and stats-readiness-<v>.json are the testbed's Envoy with a readiness listener
// (health_check filter) and a WebSocket open, written by
// `go test ./test/integration -run TestReadinessListenerConfig -update`.
func TestParseReadinessFixtures(t *testing.T) {
	for _, v := range []string{"1.36.2", "1.40.0"} {
		t.Run(v, func(t *testing.T) {
			topo := parseFixture(t, "testdata/listeners-readiness-"+v+".json")
			want := []Listener{
				{Name: "ingress_http", Scope: "listener.ingress_http", HTTP: []string{"http.ingress_http"}},
				{Name: "ingress_tcp", Scope: "listener.ingress_tcp", NonHTTP: true},
				{Name: "ready", Scope: "listener.ready", HTTP: []string{"http.ready"}, HealthCheck: []string{"http.ready"}},
			}
			if !reflect.DeepEqual(topo.Listeners, want) {
				t.Errorf("ParseListenerConfig =\n%+v\nwant\n%+v", topo.Listeners, want)
			}
			snap := statsFixture(t, "testdata/stats-readiness-"+v+".json")
			wantSnap := Snapshot{
				Listeners:      map[string]int64{"listener.admin": 1, "listener.ingress_http": 1, "listener.ingress_tcp": 0, "listener.ready": 0},
				ListenerTotals: map[string]int64{"listener.admin": snap.ListenerTotals["listener.admin"], "listener.ingress_http": 1, "listener.ingress_tcp": 0, "listener.ready": 2},
				HTTP: map[string]HTTPGauges{
					"http.admin":        {Connections: 1, Requests: 1, RequestsTotal: snap.HTTP["http.admin"].RequestsTotal},
					"http.ingress_http": {Connections: 1, Requests: 1, Upgrades: 1, RequestsTotal: 1},
					"http.ready":        {RequestsTotal: 2, HealthChecksTotal: 2},
				},
			}
			if !reflect.DeepEqual(snap, wantSnap) {
				t.Errorf("ParseStats =\n%+v\nwant\n%+v", snap, wantSnap)
			}
			checkScopes(t, topo, snap)
		})
	}
}

// listeners-checked-<v>.json and stats-checked-<v>.json are the testbed's Envoy with a readiness listener and
// a listener whose manager runs the health_check filter beside a route to the application, after 2 probes and
// 3 requests, health checks failed, then 2 probes (503) and 1 request, written by
// `go test ./test/integration -run TestHealthCheckedListenerConfig -update`.
func TestParseHealthCheckedFixtures(t *testing.T) {
	for _, v := range []string{"1.36.2", "1.40.0"} {
		t.Run(v, func(t *testing.T) {
			topo := parseFixture(t, "testdata/listeners-checked-"+v+".json")
			want := []Listener{
				{Name: "checked", Scope: "listener.checked", HTTP: []string{"http.checked"}, MixedHealthCheck: []string{"http.checked"}},
				{Name: "ingress_http", Scope: "listener.ingress_http", HTTP: []string{"http.ingress_http"}},
				{Name: "ingress_tcp", Scope: "listener.ingress_tcp", NonHTTP: true},
				{Name: "ready", Scope: "listener.ready", HTTP: []string{"http.ready"}, HealthCheck: []string{"http.ready"}},
			}
			if !reflect.DeepEqual(topo.Listeners, want) {
				t.Errorf("ParseListenerConfig =\n%+v\nwant\n%+v", topo.Listeners, want)
			}
			snap := statsFixture(t, "testdata/stats-checked-"+v+".json")
			if g := snap.HTTP["http.checked"]; g != (HTTPGauges{RequestsTotal: 8, HealthChecksTotal: 4}) {
				t.Errorf("http.checked = %+v, want 8 requests in all, 4 of them health checks", g)
			}
			if g := snap.HTTP["http.ready"]; g != (HTTPGauges{}) {
				t.Errorf("http.ready = %+v, want nothing", g)
			}
			checkScopes(t, topo, snap)
		})
	}
}

// A manager that runs the health_check filter is a readiness endpoint only (HealthCheck) when it passes no
// request on to a cluster; beside real routes, or routes not inline (RDS), it is mixed (MixedHealthCheck):
// the load balancer checks the port it sends traffic to. Chains of one stat_prefix decide together.
func TestParseListenerConfigHealthCheck(t *testing.T) {
	const hc = `{"name":"envoy.filters.http.health_check","typed_config":{"@type":"type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck","pass_through_mode":false}}`
	const hcPass = `{"name":"envoy.filters.http.health_check","typed_config":{"@type":"type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck","pass_through_mode":true}}`
	const router = `{"name":"r","typed_config":{"@type":"type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}`
	const (
		noRoutes = `{"virtual_hosts":[{"name":"all","domains":["*"]}]}`
		direct   = `{"virtual_hosts":[{"name":"v","routes":[{"match":{"prefix":"/"},"direct_response":{"status":404}},{"match":{"prefix":"/old"},"redirect":{"path_redirect":"/"}}]}]}`
		cluster  = `{"virtual_hosts":[{"name":"v","routes":[{"match":{"prefix":"/"},"route":{"cluster":"app"}}]}]}`
		weighted = `{"virtual_hosts":[{"name":"v","routes":[{"match":{"prefix":"/"},"route":{"weighted_clusters":{"clusters":[{"name":"a","weight":1}]}}}]}]}`
		unknown  = `{"virtual_hosts":[{"name":"v","routes":[{"match":{"prefix":"/"}}]}]}` // an action this reading does not know
		rds      = ""                                                                     // no route_config: RDS or scoped routes
	)
	// hcm is a chain whose manager has the stat_prefix, the routes (JSON, or "" for none inline) and the filters.
	hcm := func(prefix, routes string, filters ...string) string {
		rc := ""
		if routes != "" {
			rc = `,"route_config":` + routes
		}
		return `{"filters":[{"typed_config":{"@type":"` + hcmType + `","stat_prefix":"` + prefix + `"` + rc +
			`,"http_filters":[` + strings.Join(filters, ",") + `]}}]}`
	}
	tests := []struct {
		name              string
		chains            []string
		wantHC, wantMixed []string
	}{
		{"no routes", []string{hcm("p", noRoutes, hc, router)}, []string{"http.p"}, nil},
		{"direct responses and redirects only", []string{hcm("p", direct, hc, router)}, []string{"http.p"}, nil},
		{"pass-through mode without a route to a cluster", []string{hcm("p", noRoutes, hcPass, router)}, []string{"http.p"}, nil},
		{"a route to a cluster", []string{hcm("p", cluster, hc, router)}, nil, []string{"http.p"}},
		{"pass-through mode and a route to a cluster", []string{hcm("p", cluster, hcPass, router)}, nil, []string{"http.p"}},
		{"weighted clusters", []string{hcm("p", weighted, hc, router)}, nil, []string{"http.p"}},
		{"a route action not known", []string{hcm("p", unknown, hc, router)}, nil, []string{"http.p"}},
		{"routes not inline (RDS)", []string{hcm("p", rds, hc, router)}, nil, []string{"http.p"}},
		{"no health_check filter", []string{hcm("p", noRoutes, router), hcm("q", cluster, router)}, nil, nil},
		{"one prefix, the filter in one chain, a route to a cluster in another",
			[]string{hcm("p", noRoutes, hc, router), hcm("p", cluster, router)}, nil, []string{"http.p"}},
		{"a readiness manager and an application manager on one listener",
			[]string{hcm("app", cluster, router), hcm("probe", noRoutes, hc, router), hcm("probe", direct, hc)}, []string{"http.probe"}, nil},
		{"a readiness manager and a mixed one on one listener",
			[]string{hcm("app", cluster, hc, router), hcm("probe", noRoutes, hc, router)}, []string{"http.probe"}, []string{"http.app"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := `{"configs":[{"static_listeners":[{"listener":{"name":"l","stat_prefix":"l","filter_chains":[` +
				strings.Join(tt.chains, ",") + `]}}]}]}`
			got, err := ParseListenerConfig(strings.NewReader(in))
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Listeners) != 1 {
				t.Fatalf("listeners %+v, want one", got.Listeners)
			}
			l := got.Listeners[0]
			if !reflect.DeepEqual(l.HealthCheck, tt.wantHC) || !reflect.DeepEqual(l.MixedHealthCheck, tt.wantMixed) {
				t.Errorf("HealthCheck %q, MixedHealthCheck %q; want %q, %q", l.HealthCheck, l.MixedHealthCheck, tt.wantHC, tt.wantMixed)
			}
		})
	}
}

package envoyadmin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hcmChain is a filter chain whose HTTP manager (stat_prefix prefix) has the routes given as JSON.
func hcmChain(prefix, routes string) string {
	return `{"filters":[{"name":"envoy.filters.network.http_connection_manager","typed_config":{"@type":"` + hcmType +
		`","stat_prefix":"` + prefix + `","route_config":{"virtual_hosts":[{"name":"v","domains":["*"],"routes":[` + routes +
		`]}]},"http_filters":[{"name":"r","typed_config":{"@type":"type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]}}]}`
}

func staticListener(name string, port int, chains ...string) string {
	return `{"listener":{"name":"` + name + `","address":{"socket_address":{"address":"0.0.0.0","port_value":` +
		strconv.Itoa(port) + `}},"filter_chains":[` + strings.Join(chains, ",") + `]}}`
}

// Contour's Envoy: ingress_http routes to the application's cluster; stats-health (port 8002) passes GET
// /ready and /stats to the static cluster envoy-admin, whose one endpoint is the admin socket. Only the
// stats manager is marked, and only when envoy-admin's endpoint is the address the drain calls.
func TestMarkAdminRoutesContour(t *testing.T) {
	const toAdmin = `{"match":{"prefix":"/ready"},"route":{"cluster":"envoy-admin"}},{"match":{"prefix":"/stats"},"route":{"cluster":"envoy-admin"}}`
	in := `{"configs":[{"static_listeners":[` +
		staticListener("ingress_http", 8080, hcmChain("ingress_http", `{"match":{"prefix":"/"},"route":{"cluster":"default/echo/80"}}`)) + `,` +
		staticListener("stats-health", 8002, hcmChain("stats", toAdmin)) + `]}]}`
	topo, err := ParseListenerConfig(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := topo.AdminRouteCandidates(), []string{"default/echo/80", "envoy-admin"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("AdminRouteCandidates = %q, want %q", got, want)
	}
	clusters, err := ParseStaticClusters(strings.NewReader(`{"configs":[
	 {"@type":"type.googleapis.com/envoy.admin.v3.ClustersConfigDump.StaticCluster","cluster":{"name":"envoy-admin","type":"STATIC",
	  "load_assignment":{"cluster_name":"envoy-admin","endpoints":[{"lb_endpoints":[{"endpoint":{"address":{"pipe":{"path":"/admin/admin.sock"}}}}]}]}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]Address{"envoy-admin": {{Network: "unix", Addr: "/admin/admin.sock"}}}; !reflect.DeepEqual(clusters, want) {
		t.Fatalf("ParseStaticClusters = %v, want %v", clusters, want)
	}
	marked := func(topo Topology) map[string][]string {
		m := map[string][]string{}
		for _, l := range topo.Listeners {
			if l.HealthCheck != nil {
				m[l.Scope] = l.HealthCheck
			}
		}
		return m
	}
	for _, tc := range []struct {
		admin Address
		want  map[string][]string
	}{
		{Address{Network: "unix", Addr: "/admin/admin.sock"}, map[string][]string{"listener.0.0.0.0_8002": {"http.stats"}}},
		{Address{Network: "unix", Addr: "/admin/other.sock"}, map[string][]string{}},
		{Address{Network: "tcp", Addr: "127.0.0.1:9901"}, map[string][]string{}},
	} {
		again, _ := ParseListenerConfig(strings.NewReader(in))
		again.MarkAdminRoutes(clusters, tc.admin)
		if got := marked(again); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("admin %v: readiness managers by listener = %v, want %v", tc.admin, got, tc.want)
		}
	}
}

// A manager is marked only if every route of every chain that has it goes to the admin (or answers itself).
func TestMarkAdminRoutesNeedsEveryRoute(t *testing.T) {
	admin := Address{Network: "tcp", Addr: "127.0.0.1:19000"}
	clusters := map[string][]Address{
		"prometheus_stats": {{Network: "tcp", Addr: "127.0.0.1:19000"}},
		"app":              {{Network: "tcp", Addr: "10.0.0.7:8080"}},
		"mixed":            {{Network: "tcp", Addr: "127.0.0.1:19000"}, {Network: "tcp", Addr: "10.0.0.7:8080"}},
	}
	const toStats = `{"match":{"prefix":"/stats/prometheus"},"route":{"cluster":"prometheus_stats"}}`
	const direct = `{"match":{"prefix":"/"},"direct_response":{"status":404}}`
	for _, tc := range []struct {
		name   string
		chains []string
		want   bool
	}{
		{"admin and a direct response", []string{hcmChain("s", toStats+","+direct)}, true},
		{"admin in two chains", []string{hcmChain("s", toStats), hcmChain("s", toStats)}, true},
		{"admin and an application route", []string{hcmChain("s", toStats+`,{"match":{"prefix":"/"},"route":{"cluster":"app"}}`)}, false},
		{"another chain routes elsewhere", []string{hcmChain("s", toStats), hcmChain("s", `{"match":{"prefix":"/"},"route":{"cluster":"app"}}`)}, false},
		{"a cluster with another endpoint too", []string{hcmChain("s", `{"match":{"prefix":"/"},"route":{"cluster":"mixed"}}`)}, false},
		{"weighted clusters", []string{hcmChain("s", `{"match":{"prefix":"/"},"route":{"weighted_clusters":{"clusters":[{"name":"prometheus_stats","weight":1}]}}}`)}, false},
		{"a cluster not read (dynamic)", []string{hcmChain("s", `{"match":{"prefix":"/"},"route":{"cluster":"eds_cluster"}}`)}, false},
		{"direct responses only", []string{hcmChain("s", direct)}, false},
		{"RDS", []string{`{"filters":[{"typed_config":{"@type":"` + hcmType + `","stat_prefix":"s","rds":{"route_config_name":"r"}}}]}`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := `{"configs":[{"static_listeners":[` + staticListener("l", 19001, tc.chains...) + `]}]}`
			topo, err := ParseListenerConfig(strings.NewReader(in))
			if err != nil {
				t.Fatal(err)
			}
			topo.MarkAdminRoutes(clusters, admin)
			got := len(topo.Listeners) == 1 && reflect.DeepEqual(topo.Listeners[0].HealthCheck, []string{"http.s"})
			if got != tc.want {
				t.Errorf("marked = %v (%+v), want %v", got, topo.Listeners, tc.want)
			}
		})
	}
}

// A manager that runs the health_check filter in front of routes that all go to the admin serves no traffic:
// MarkAdminRoutes moves it from MixedHealthCheck to HealthCheck. One that routes elsewhere too stays mixed.
func TestMarkAdminRoutesHealthCheckFilter(t *testing.T) {
	admin := Address{Network: "tcp", Addr: "127.0.0.1:19000"}
	clusters := map[string][]Address{"admin": {{Network: "tcp", Addr: "127.0.0.1:19000"}}, "app": {{Network: "tcp", Addr: "10.0.0.7:8080"}}}
	const hc = `{"name":"hc","typed_config":{"@type":"` + healthCheckType + `","pass_through_mode":false}}`
	chain := func(cluster string) string {
		return strings.Replace(hcmChain("s", `{"match":{"prefix":"/"},"route":{"cluster":"`+cluster+`"}}`), `"http_filters":[`, `"http_filters":[`+hc+`,`, 1)
	}
	for _, tc := range []struct {
		cluster           string
		wantHC, wantMixed []string
	}{
		{"admin", []string{"http.s"}, nil},
		{"app", nil, []string{"http.s"}},
	} {
		in := `{"configs":[{"static_listeners":[` + staticListener("l", 19001, chain(tc.cluster)) + `]}]}`
		topo, err := ParseListenerConfig(strings.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		if l := topo.Listeners[0]; l.HealthCheck != nil || !reflect.DeepEqual(l.MixedHealthCheck, []string{"http.s"}) {
			t.Fatalf("%s: before MarkAdminRoutes: %+v, want mixed", tc.cluster, l)
		}
		topo.MarkAdminRoutes(clusters, admin)
		if l := topo.Listeners[0]; !reflect.DeepEqual(l.HealthCheck, tc.wantHC) || !reflect.DeepEqual(l.MixedHealthCheck, tc.wantMixed) {
			t.Errorf("%s: HealthCheck %q, MixedHealthCheck %q; want %q, %q", tc.cluster, l.HealthCheck, l.MixedHealthCheck, tc.wantHC, tc.wantMixed)
		}
	}
}

func TestSameAdmin(t *testing.T) {
	tcp := func(a string) Address { return Address{Network: "tcp", Addr: a} }
	unix := func(a string) Address { return Address{Network: "unix", Addr: a} }
	for _, tc := range []struct {
		endpoint, admin Address
		want            bool
	}{
		{unix("/admin/admin.sock"), unix("/admin/admin.sock"), true},
		{unix("/admin//admin.sock"), unix("/admin/admin.sock"), true},
		{unix("/admin/admin.sock"), unix("/run/admin.sock"), false},
		{tcp("127.0.0.1:19000"), tcp("127.0.0.1:19000"), true},
		{tcp("localhost:19000"), tcp("127.0.0.1:19000"), true},
		{tcp("127.0.0.1:19000"), tcp("0.0.0.0:19000"), true},
		{tcp("[::1]:19000"), tcp("127.0.0.1:19000"), true},
		{tcp("127.0.0.1:19001"), tcp("127.0.0.1:19000"), false},
		{tcp("10.0.0.7:19000"), tcp("127.0.0.1:19000"), false},
		{tcp("10.0.0.7:19000"), tcp("10.0.0.7:19000"), true},
		{tcp("envoy-admin:19000"), tcp("127.0.0.1:19000"), false},
		{unix("/admin/admin.sock"), tcp("127.0.0.1:19000"), false},
		{Address{Network: "other"}, Address{Network: "other"}, false},
	} {
		if got := SameAdmin(tc.endpoint, tc.admin); got != tc.want {
			t.Errorf("SameAdmin(%v, %v) = %v, want %v", tc.endpoint, tc.admin, got, tc.want)
		}
	}
}

// When the second read fails, the topology is still returned, unmarked, with the reason.
func TestClientListenerConfigClustersUnread(t *testing.T) {
	in := `{"configs":[{"static_listeners":[` + staticListener("stats-health", 8002,
		hcmChain("stats", `{"match":{"prefix":"/ready"},"route":{"cluster":"envoy-admin"}}`)) + `]}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("resource") == "static_clusters" {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		w.Write([]byte(in))
	}))
	defer srv.Close()
	addr, _ := ParseAddress(srv.URL)
	topo, err := New(addr, Options{Timeout: 5 * time.Second}).ListenerConfig(context.Background())
	if err != nil || len(topo.Listeners) != 1 {
		t.Fatalf("ListenerConfig = %+v, %v", topo, err)
	}
	if topo.Listeners[0].HealthCheck != nil || !strings.Contains(topo.AdminRoutesUnread, "500") {
		t.Errorf("after a failed clusters read: %+v, AdminRoutesUnread %q; want unmarked, with the error", topo.Listeners[0], topo.AdminRoutesUnread)
	}
}

func FuzzParseStaticClusters(f *testing.F) {
	f.Add(`{}`)
	f.Add(`{"configs":[{"cluster":{"name":"a","load_assignment":{"endpoints":[{"lb_endpoints":[{"endpoint":{"address":{"socket_address":{"address":"127.0.0.1","port_value":19000}}}}]}]}}}]}`)
	f.Add(`{"configs":[{"cluster":{"name":"a","load_assignment":{"endpoints":[{"lb_endpoints":[{"endpoint":{"address":{"pipe":{"path":"/a.sock"}}}}]}]}}}]}`)
	f.Fuzz(func(t *testing.T, in string) {
		clusters, err := ParseStaticClusters(strings.NewReader(in))
		if err != nil {
			return
		}
		for name, eps := range clusters {
			for _, e := range eps {
				if e.Network == "other" && e.Addr != "" || e.Network != "other" && e.Addr == "" {
					t.Errorf("cluster %q: endpoint %+v", name, e)
				}
				if SameAdmin(e, Address{Network: "other"}) {
					t.Errorf("%+v is the admin at no address", e)
				}
			}
		}
	})
}

package drain

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

func TestCount(t *testing.T) {
	// An Envoy with an HTTP listener (3 connections: 1 busy, 2 idle keep-alive), a TCP proxy listener
	// (2 connections), a metrics listener, an internal listener, and the admin's own.
	snap := envoyadmin.Snapshot{
		Listeners: map[string]int64{
			"listener.0.0.0.0_8080":        3,
			"listener.0.0.0.0_9000":        2,
			"listener.0.0.0.0_19001":       1,
			"listener.admin":               1,
			"listener.envoy_internal_loop": 4,
		},
		HTTP: map[string]envoyadmin.HTTPGauges{
			"http.ingress_http": {Connections: 3, Requests: 1},
			"http.metrics":      {Connections: 1, Requests: 1},
			"http.admin":        {Connections: 1, Requests: 1},
		},
	}
	re := regexp.MustCompile
	tests := []struct {
		name string
		mode Mode
		sel  Selector
		want int64
	}{
		{"inflight counts requests and non-HTTP connections, not idle keep-alive", ModeInflight, Selector{}, 1 + 1 + 2},
		{"connections counts every listener connection", ModeConnections, Selector{}, 3 + 2 + 1},
		{"requests counts HTTP requests only", ModeRequests, Selector{}, 2},
		{"exclude the metrics listener and its manager", ModeInflight, Selector{Exclude: []*regexp.Regexp{re(`19001`), re(`^http\.metrics$`)}}, 1 + 2},
		{"include only the TCP listener", ModeConnections, Selector{Include: []*regexp.Regexp{re(`_9000$`)}}, 2},
		{"include only HTTP managers: no listener, so no non-HTTP connections", ModeInflight, Selector{Include: []*regexp.Regexp{re(`^http\.`)}}, 2},
		{"excluding an HTTP manager but not its listener never goes negative", ModeInflight, Selector{Exclude: []*regexp.Regexp{re(`^listener\.`)}}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Count(snap, nil, tt.mode, tt.sel).Open; got != tt.want {
				t.Errorf("Count(%s).Open = %d, want %d", tt.mode, got, tt.want)
			}
		})
	}
	c := Count(snap, nil, ModeInflight, Selector{})
	wantExcluded := []string{"http.admin", "listener.admin", "listener.envoy_internal_loop"}
	if !reflect.DeepEqual(c.Excluded, wantExcluded) {
		t.Errorf("Excluded = %v, want %v (envoy's own scopes never count)", c.Excluded, wantExcluded)
	}
	if len(c.Scopes) != 5 || c.Scopes[0].Name != "http.ingress_http" {
		t.Errorf("Scopes = %+v, want 5 sorted by name", c.Scopes)
	}
}

func TestPollGap(t *testing.T) {
	tests := []struct {
		lastPoll, interval, want time.Duration
	}{
		{300 * time.Microsecond, 250 * time.Millisecond, minPollGap}, // a small config: as often as allowed
		{5 * time.Millisecond, 250 * time.Millisecond, 50 * time.Millisecond},
		{86 * time.Millisecond, 250 * time.Millisecond, 250 * time.Millisecond}, // 10,000 clusters: the interval bounds it
		{0, 10 * time.Millisecond, 10 * time.Millisecond},                       // an interval below the floor wins
	}
	for _, tt := range tests {
		if got := pollGap(tt.lastPoll, tt.interval); got != tt.want {
			t.Errorf("pollGap(%s, %s) = %s, want %s", tt.lastPoll, tt.interval, got, tt.want)
		}
	}
}

// fixture reads a captured answer of a real Envoy from internal/envoyadmin/testdata.
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "envoyadmin", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The testbed's Envoy with every topology option, captured on both releases: an idle keep-alive on the
// listener sharing ingress_http, a pooled connection to the internal listener (which has its own HTTP
// manager), an idle keep-alive and a TCP connection on the mixed listener. One connection is in flight:
// the TCP one. Without the configuration, the internal listener's pooled connection hides it.
func TestCountTestbedFixture(t *testing.T) {
	for _, v := range []string{"1.36.2", "1.40.0"} {
		t.Run(v, func(t *testing.T) {
			topo, err := envoyadmin.ParseListenerConfig(bytes.NewReader(fixture(t, "listeners-"+v+".json")))
			if err != nil {
				t.Fatal(err)
			}
			snap, err := envoyadmin.ParseStats(bytes.NewReader(fixture(t, "stats-topology-"+v+".json")))
			if err != nil {
				t.Fatal(err)
			}
			c := Count(snap, &topo, ModeInflight, Selector{})
			if c.Open != 1 || c.Basis != BasisListenerConfig {
				t.Errorf("Open = %d (basis %s), want the 1 TCP connection; groups %+v", c.Open, c.Basis, c.Groups)
			}
			want := []Group{
				{Listeners: []string{"listener.127.0.0.1_0"}, Managers: []string{"http.mixed_http"}, Connections: 2, HTTPConnections: 1, NonHTTP: 1, Counted: true},
				{Listeners: []string{"listener.admin"}, Managers: []string{"http.admin"}, Connections: 1, HTTPConnections: 1, Requests: 1, Reason: reasonBuiltin},
				{Listeners: []string{"listener.envoy_internal_internal_http"}, Managers: []string{"http.internal_http"}, Connections: 1, HTTPConnections: 1, Reason: reasonBuiltin},
				{Listeners: []string{"listener.ingress_http", "listener.ingress_http_2"}, Managers: []string{"http.ingress_http"}, Connections: 1, HTTPConnections: 1, Counted: true},
				{Listeners: []string{"listener.ingress_tcp"}, Managers: []string{}, Counted: true},
			}
			if !reflect.DeepEqual(c.Groups, want) {
				t.Errorf("Groups =\n%+v\nwant\n%+v", c.Groups, want)
			}
			if old := Count(snap, nil, ModeInflight, Selector{}); old.Open != 0 || !strings.HasPrefix(old.Basis, "fallback") {
				t.Errorf("fallback Open = %d (basis %s); want 0: the rule without the configuration hides the TCP connection", old.Open, old.Basis)
			}
		})
	}
}

func TestCountGroups(t *testing.T) {
	// Two listeners sharing the manager ingress_http (idle keep-alives on both, one request in flight), a
	// TCP listener with 2 connections, a listener mixing a manager and TCP chains, an internal listener with
	// its own manager and pooled connections, and the admin's.
	topo := &envoyadmin.Topology{Listeners: []envoyadmin.Listener{
		{Scope: "listener.0.0.0.0_443", HTTP: []string{"http.ingress_http"}},
		{Scope: "listener.0.0.0.0_80", HTTP: []string{"http.ingress_http"}},
		{Scope: "listener.0.0.0.0_9000", NonHTTP: true},
		{Scope: "listener.mixed", HTTP: []string{"http.mixed"}, NonHTTP: true},
		{Scope: "listener.envoy_internal_tunnel", Internal: true, HTTP: []string{"http.tunnel"}},
	}}
	snap := envoyadmin.Snapshot{
		Listeners: map[string]int64{
			"listener.0.0.0.0_443": 2, "listener.0.0.0.0_80": 3, "listener.0.0.0.0_9000": 2,
			"listener.mixed": 3, "listener.envoy_internal_tunnel": 4, "listener.admin": 1,
		},
		HTTP: map[string]envoyadmin.HTTPGauges{
			"http.ingress_http": {Connections: 5, Requests: 1},
			"http.mixed":        {Connections: 2},
			"http.tunnel":       {Connections: 4},
			"http.admin":        {Connections: 1, Requests: 1},
		},
	}
	re := regexp.MustCompile
	res := func(s ...string) []*regexp.Regexp {
		var out []*regexp.Regexp
		for _, x := range s {
			out = append(out, re(x))
		}
		return out
	}
	tests := []struct {
		name string
		snap envoyadmin.Snapshot
		topo *envoyadmin.Topology
		mode Mode
		sel  Selector
		want int64
	}{
		{"inflight: the request, the TCP listener's and the mixed listener's TCP connections", snap, topo, ModeInflight, Selector{}, 1 + 2 + 1},
		{"connections: every counted listener's", snap, topo, ModeConnections, Selector{}, 2 + 3 + 2 + 3},
		{"requests", snap, topo, ModeRequests, Selector{}, 1},
		{"excluding one listener of a shared prefix excludes the group, and hides nothing else",
			snap, topo, ModeInflight, Selector{Exclude: res(`_80$`)}, 2 + 1},
		{"excluding a manager excludes its listeners: their idle keep-alives do not count",
			snap, topo, ModeInflight, Selector{Exclude: res(`^http\.ingress_http$`)}, 2 + 1},
		{"including a listener includes its manager", snap, topo, ModeInflight, Selector{Include: res(`^listener\.mixed$`)}, 1},
		{"including a manager includes its listeners", snap, topo, ModeConnections, Selector{Include: res(`^http\.ingress_http$`)}, 5},
		{"a listener the configuration does not know counts every connection",
			with(snap, func(s *envoyadmin.Snapshot) { s.Listeners["listener.0.0.0.0_8443"] = 2 }), topo, ModeInflight, Selector{}, 4 + 2},
		{"an internal listener sharing a manager with a normal one counts with it",
			with(snap, func(s *envoyadmin.Snapshot) {
				s.HTTP["http.ingress_http"] = envoyadmin.HTTPGauges{Connections: 9, Requests: 1}
				s.Listeners["listener.envoy_internal_tunnel"] = 4
			}),
			&envoyadmin.Topology{Listeners: append(slices.Clone(topo.Listeners[:4]),
				envoyadmin.Listener{Scope: "listener.envoy_internal_tunnel", Internal: true, HTTP: []string{"http.ingress_http"}})},
			ModeInflight, Selector{}, 4},
		{"a manager's ':' as Envoy 1.36 writes it", envoyadmin.Snapshot{
			Listeners: map[string]int64{"listener.a_b": 3},
			HTTP:      map[string]envoyadmin.HTTPGauges{"http.h:x": {Connections: 3}},
		}, &envoyadmin.Topology{Listeners: []envoyadmin.Listener{{Scope: "listener.a_b", HTTP: []string{"http.h_x"}}}}, ModeInflight, Selector{}, 0},
		{"sums saturate", envoyadmin.Snapshot{
			Listeners: map[string]int64{"listener.a": math.MaxInt64 - 1, "listener.b": math.MaxInt64 - 1},
			HTTP:      map[string]envoyadmin.HTTPGauges{"http.x": {Requests: math.MaxInt64}},
		}, &envoyadmin.Topology{}, ModeInflight, Selector{}, math.MaxInt64},
		{"sums saturate without the configuration", envoyadmin.Snapshot{
			Listeners: map[string]int64{"listener.a": math.MaxInt64 - 1, "listener.b": math.MaxInt64 - 1},
		}, nil, ModeConnections, Selector{}, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Count(tt.snap, tt.topo, tt.mode, tt.sel)
			if c.Open != tt.want {
				t.Errorf("Open = %d, want %d; groups:\n%+v", c.Open, tt.want, c.Groups)
			}
		})
	}

	// Spelled as a front end spells the setting (the command line: its flag).
	flag := Names(func(Setting) string { return "--listener-exclude" })
	c := Count(snap, topo, ModeInflight, Selector{Exclude: res(`_80$`), Names: flag})
	var excluded *Group
	for i, g := range c.Groups {
		if slices.Contains(g.Listeners, "listener.0.0.0.0_80") {
			excluded = &c.Groups[i]
		}
	}
	want := Group{Listeners: []string{"listener.0.0.0.0_443", "listener.0.0.0.0_80"}, Managers: []string{"http.ingress_http"},
		Connections: 5, HTTPConnections: 5, Requests: 1, Reason: "--listener-exclude matches listener.0.0.0.0_80"}
	if excluded == nil || !reflect.DeepEqual(*excluded, want) {
		t.Errorf("the excluded group = %+v, want %+v", excluded, want)
	}
	if !slices.Contains(c.Excluded, "http.ingress_http") || slices.ContainsFunc(c.Scopes, func(s ScopeCount) bool { return s.Name == "listener.0.0.0.0_443" }) {
		t.Errorf("Scopes %v / Excluded %v: the whole group must be excluded", c.Scopes, c.Excluded)
	}
	u := Count(with(snap, func(s *envoyadmin.Snapshot) { s.Listeners["listener.0.0.0.0_8443"] = 2 }), topo, ModeInflight, Selector{})
	if i := slices.IndexFunc(u.Groups, func(g Group) bool { return slices.Contains(g.Listeners, "listener.0.0.0.0_8443") }); i < 0 || u.Groups[i].Reason != reasonUnknown || !u.Groups[i].Counted {
		t.Errorf("groups %+v: want the unknown listener counted on its own, saying why", u.Groups)
	}
}

// The counters the quiet period watches: every counted group's managers' new requests, and the new
// connections of its listeners that have a filter chain no HTTP manager serves (a TCP proxy's, or one beside
// HTTP chains), not of a listener that only has HTTP managers (a TCP health check on it is no traffic);
// nothing of a readiness endpoint only; of a group whose manager answers health checks beside its traffic,
// its managers' requests less their health checks, and no connection (a probe's connection is not told from
// a client's).
func TestCountWatched(t *testing.T) {
	snap := envoyadmin.Snapshot{
		Listeners: map[string]int64{"listener.app": 1, "listener.ready": 0, "listener.checked": 2, "listener.both": 0,
			"listener.tcp": 1, "listener.chains": 1},
		ListenerTotals: map[string]int64{"listener.app": 10, "listener.ready": 40, "listener.checked": 50, "listener.both": 60,
			"listener.tcp": 20, "listener.chains": 30},
		HTTP: map[string]envoyadmin.HTTPGauges{
			"http.app":     {Connections: 1, RequestsTotal: 11},
			"http.ready":   {RequestsTotal: 40, HealthChecksTotal: 38},
			"http.checked": {Connections: 2, RequestsTotal: 70, HealthChecksTotal: 45},
			"http.probe":   {RequestsTotal: 30, HealthChecksTotal: 30},
			"http.web":     {RequestsTotal: 9, HealthChecksTotal: 2},
			"http.chains":  {RequestsTotal: 5},
		},
	}
	topo := &envoyadmin.Topology{Listeners: []envoyadmin.Listener{
		{Scope: "listener.tcp", NonHTTP: true},
		{Scope: "listener.chains", HTTP: []string{"http.chains"}, NonHTTP: true},
		{Scope: "listener.app", HTTP: []string{"http.app"}},
		{Scope: "listener.ready", HTTP: []string{"http.ready"}, HealthCheck: []string{"http.ready"}},
		{Scope: "listener.checked", HTTP: []string{"http.checked"}, MixedHealthCheck: []string{"http.checked"}},
		// A readiness manager and a mixed one on one listener: the group is a readiness endpoint.
		{Scope: "listener.both", HTTP: []string{"http.probe", "http.web"}, HealthCheck: []string{"http.probe"}, MixedHealthCheck: []string{"http.web"}},
	}}
	// watched is what every case watches (app's requests; the TCP listener's and the listener with a TCP chain
	// beside its HTTP one's connections, and that one's requests), and more.
	watched := func(more map[string]int64) map[string]int64 {
		w := map[string]int64{"http.app": 11, "listener.tcp": 20, "listener.chains": 30, "http.chains": 5}
		maps.Copy(w, more)
		return w
	}
	tests := []struct {
		name string
		snap envoyadmin.Snapshot
		topo *envoyadmin.Topology
		sel  Selector
		want map[string]int64
	}{
		{"each kind of group", snap, topo, Selector{}, watched(map[string]int64{
			"http.checked": 70 - 45, // no listener.checked: its probes open connections too
		})},
		{"health checks above the requests (never in Envoy) count as none", with(snap, func(s *envoyadmin.Snapshot) {
			s.HTTP["http.checked"] = envoyadmin.HTTPGauges{RequestsTotal: 3, HealthChecksTotal: 5}
		}), topo, Selector{}, watched(map[string]int64{"http.checked": 0})},
		{"a probe answered but in flight dips below zero, so a request ending meanwhile still shows", with(snap, func(s *envoyadmin.Snapshot) {
			s.HTTP["http.checked"] = envoyadmin.HTTPGauges{Requests: 1, RequestsTotal: 5 + 1, HealthChecksTotal: 5}
		}), topo, Selector{}, watched(map[string]int64{"http.checked": 0})},
		{"a probe answered but in flight dips below zero", with(snap, func(s *envoyadmin.Snapshot) {
			s.HTTP["http.checked"] = envoyadmin.HTTPGauges{Requests: 1, RequestsTotal: 5, HealthChecksTotal: 5}
		}), topo, Selector{}, watched(map[string]int64{"http.checked": -1})},
		{"an excluded group is not watched", snap, topo, Selector{Exclude: []*regexp.Regexp{regexp.MustCompile(`checked`)}},
			watched(nil)},
		{"a listener the configuration does not know is watched", with(snap, func(s *envoyadmin.Snapshot) {
			s.Listeners["listener.new"], s.ListenerTotals["listener.new"] = 0, 7
		}), topo, Selector{}, watched(map[string]int64{"http.checked": 25, "listener.new": 7})},
		{"without the configuration nothing is", snap, nil, Selector{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Count(tt.snap, tt.topo, ModeInflight, tt.sel)
			if !reflect.DeepEqual(c.Watched, tt.want) {
				t.Errorf("Watched = %v, want %v", c.Watched, tt.want)
			}
		})
	}
	c := Count(snap, topo, ModeInflight, Selector{})
	for scope, want := range map[string][2]bool{"listener.app": {false, false}, "listener.ready": {true, false}, "listener.checked": {false, true}, "listener.both": {true, false}} {
		if g := groupOf(c, scope); g == nil || g.HealthChecks != want[0] || g.MixedHealthChecks != want[1] {
			t.Errorf("group of %s = %+v, want HealthChecks %v, MixedHealthChecks %v", scope, g, want[0], want[1])
		}
	}
	// The quiet period sees a mixed listener's requests and not its probes: three probes (each a new
	// connection and a request the filter answers) and two requests on one keep-alive connection.
	q := newQuietWatch(time.Second, false, time.Unix(0, 0))
	q.observe(time.Unix(1, 0), c.Watched, c.Rising, c.Basis)
	probes := with(snap, func(s *envoyadmin.Snapshot) {
		s.ListenerTotals["listener.checked"] += 3
		s.HTTP["http.checked"] = envoyadmin.HTTPGauges{RequestsTotal: 73, HealthChecksTotal: 48}
	})
	c = Count(probes, topo, ModeInflight, Selector{})
	if cx, rq := q.observe(time.Unix(2, 0), c.Watched, c.Rising, c.Basis); cx != 0 || rq != 0 {
		t.Errorf("probes on the mixed listener: %d new connections, %d new requests; want none", cx, rq)
	}
	// A /stats read inside Envoy's counting of one probe: counted as a request but not yet by the filter
	// (and in flight), then answered by the filter but still in flight: neither is new traffic, then or after.
	for i, mid := range []envoyadmin.HTTPGauges{{RequestsTotal: 74, HealthChecksTotal: 48, Requests: 1},
		{RequestsTotal: 74, HealthChecksTotal: 49, Requests: 1}, {RequestsTotal: 74, HealthChecksTotal: 49}} {
		c = Count(with(probes, func(s *envoyadmin.Snapshot) { s.HTTP["http.checked"] = mid }), topo, ModeInflight, Selector{})
		if cx, rq := q.observe(time.Unix(2, int64(i+1)), c.Watched, c.Rising, c.Basis); cx != 0 || rq != 0 {
			t.Errorf("a probe read mid-count (%+v): %d new connections, %d new requests; want none", mid, cx, rq)
		}
	}
	traffic := with(probes, func(s *envoyadmin.Snapshot) {
		s.HTTP["http.checked"] = envoyadmin.HTTPGauges{RequestsTotal: 76, HealthChecksTotal: 49}
	})
	c = Count(traffic, topo, ModeInflight, Selector{})
	if cx, rq := q.observe(time.Unix(3, 0), c.Watched, c.Rising, c.Basis); cx != 0 || rq != 2 {
		t.Errorf("traffic on the mixed listener: %d new connections, %d new requests; want 0 and 2", cx, rq)
	}
}

// The testbed's Envoy with a readiness listener and a listener whose manager runs the health_check filter beside
// a route to the application (TestParseHealthCheckedFixtures), captured on both releases: the quiet period
// watches that manager's 4 requests that were not health checks, not its listener's connections, nothing of
// the readiness listener, the HTTP listener's requests (not its connections) and the TCP listener's
// connections.
func TestCountHealthCheckedFixture(t *testing.T) {
	for _, v := range []string{"1.36.2", "1.40.0"} {
		t.Run(v, func(t *testing.T) {
			topo, err := envoyadmin.ParseListenerConfig(bytes.NewReader(fixture(t, "listeners-checked-"+v+".json")))
			if err != nil {
				t.Fatal(err)
			}
			snap, err := envoyadmin.ParseStats(bytes.NewReader(fixture(t, "stats-checked-"+v+".json")))
			if err != nil {
				t.Fatal(err)
			}
			c := Count(snap, &topo, ModeInflight, Selector{})
			want := map[string]int64{"http.ingress_http": 0, "listener.ingress_tcp": 0, "http.checked": 4}
			if !reflect.DeepEqual(c.Watched, want) {
				t.Errorf("Watched = %v, want %v", c.Watched, want)
			}
		})
	}
}

// fuzzCase builds a topology, a snapshot and a selector from fuzz input: six listeners and six HTTP managers,
// each byte deciding one thing (ownership, internal, exclusion, gauges, some near math.MaxInt64).
func fuzzCase(b []byte) (envoyadmin.Topology, envoyadmin.Snapshot, Selector) {
	next := func() byte {
		if len(b) == 0 {
			return 0
		}
		x := b[0]
		b = b[1:]
		return x
	}
	gauge := func() int64 {
		x := next()
		if x >= 250 {
			return math.MaxInt64 - int64(x-250) // near the limit
		}
		return int64(x % 8)
	}
	const n = 6
	var topo envoyadmin.Topology
	snap := envoyadmin.Snapshot{Listeners: map[string]int64{}, HTTP: map[string]envoyadmin.HTTPGauges{}}
	var sel Selector
	for i := range n {
		flags := next()
		l := envoyadmin.Listener{Scope: fmt.Sprintf("listener.l%d", i), Internal: flags&1 != 0, NonHTTP: flags&2 != 0}
		if flags&4 != 0 {
			l.Scope = fmt.Sprintf("listener.envoy_internal_l%d", i)
		}
		owned := next()
		for h := range n {
			if owned&(1<<h) != 0 {
				l.HTTP = append(l.HTTP, fmt.Sprintf("http.h%d", h))
			}
		}
		if flags&8 == 0 { // else only in the stats: added since the configuration was read
			topo.Listeners = append(topo.Listeners, l)
		}
		if flags&16 == 0 {
			snap.Listeners[l.Scope] = gauge()
		}
		if flags&32 != 0 {
			sel.Exclude = append(sel.Exclude, regexp.MustCompile("^"+regexp.QuoteMeta(l.Scope)+"$"))
		}
	}
	for h := range n {
		flags := next()
		name := fmt.Sprintf("http.h%d", h)
		if flags&1 == 0 {
			snap.HTTP[name] = envoyadmin.HTTPGauges{Connections: gauge(), Requests: gauge()}
		}
		if flags&2 != 0 {
			sel.Exclude = append(sel.Exclude, regexp.MustCompile(fmt.Sprintf(`^http\.h%d$`, h)))
		}
		// A readiness manager only (4), or one that serves traffic too (8), on every listener that has it.
		for i, l := range topo.Listeners {
			if slices.Contains(l.HTTP, name) && flags&4 != 0 {
				topo.Listeners[i].HealthCheck = append(topo.Listeners[i].HealthCheck, name)
			} else if slices.Contains(l.HTTP, name) && flags&8 != 0 {
				topo.Listeners[i].MixedHealthCheck = append(topo.Listeners[i].MixedHealthCheck, name)
			}
		}
		if g, ok := snap.HTTP[name]; ok && flags&16 != 0 {
			g.HealthChecksTotal = int64(next() % 8)
			g.RequestsTotal = g.HealthChecksTotal + int64(next()%8)
			snap.HTTP[name] = g
		}
	}
	snap.ListenerTotals = map[string]int64{}
	for l := range snap.Listeners {
		snap.ListenerTotals[l] = int64(next() % 8)
	}
	if next()&1 != 0 {
		snap.Listeners["listener.admin"], snap.HTTP["http.admin"] = 1, envoyadmin.HTTPGauges{Connections: 1, Requests: 1}
	}
	return topo, snap, sel
}

// groupOf returns the group that has the member name, or nil.
func groupOf(c Counts, name string) *Group {
	for i, g := range c.Groups {
		if slices.Contains(g.Listeners, name) || slices.Contains(g.Managers, name) {
			return &c.Groups[i]
		}
	}
	return nil
}

// The count's invariants over random topologies and snapshots: a connection on a counted listener that no
// HTTP manager owns always counts; an excluded group never changes another group's count (nor the total);
// an idle keep-alive (a connection of a listener and of a manager it owns, no request) never counts in
// inflight; sums saturate, never wrap.
func FuzzCount(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 2, 0, 0, 0, 32, 2, 0, 0, 255, 254, 3, 1, 1, 0, 2, 0, 1})
	f.Add([]byte{1, 3, 2, 3, 4, 0, 8, 0, 16, 4, 0, 12, 250, 251, 252, 253, 254, 255, 0, 2, 0, 1, 1})
	f.Add(bytes.Repeat([]byte{255}, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		topo, snap, sel := fuzzCase(b)
		for _, mode := range []Mode{ModeInflight, ModeConnections, ModeRequests} {
			c := Count(snap, &topo, mode, sel)
			var sum int64
			saturated := false
			for _, g := range c.Groups {
				if g.Connections < 0 || g.HTTPConnections < 0 || g.Requests < 0 || g.NonHTTP < 0 {
					t.Fatalf("negative sum in %+v", g)
				}
				if !g.Counted {
					continue
				}
				v := map[Mode]int64{ModeInflight: addSat(g.Requests, g.NonHTTP), ModeConnections: g.Connections, ModeRequests: g.Requests}[mode]
				if v == math.MaxInt64 || g.Connections == math.MaxInt64 || g.HTTPConnections == math.MaxInt64 {
					saturated = true
				}
				if c.Open < v {
					t.Fatalf("%s: Open %d below one counted group's %d (%+v): a sum wrapped", mode, c.Open, v, g)
				}
				sum = addSat(sum, v)
			}
			if c.Open != sum || c.Open < 0 {
				t.Fatalf("%s: Open %d, want the sum of the counted groups %d", mode, c.Open, sum)
			}
			if saturated || sum > math.MaxInt64/4 {
				continue // the invariants below add to sums; they hold away from the limit
			}
			if mode != ModeInflight {
				continue
			}
			for name, v := range snap.Listeners {
				g := groupOf(c, name)
				if g == nil {
					t.Fatalf("listener %s in no group", name)
				}
				plus := with(snap, func(s *envoyadmin.Snapshot) { s.Listeners[name] = v + 1 })
				got := Count(plus, &topo, mode, sel).Open
				// A connection on a counted listener that no HTTP manager owns always counts.
				if g.Counted && len(g.Managers) == 0 && got != c.Open+1 {
					t.Fatalf("a connection on %s (counted, no manager) changed Open %d -> %d", name, c.Open, got)
				}
				// An excluded group never changes the count.
				if !g.Counted && got != c.Open {
					t.Fatalf("a connection on %s (excluded: %s) changed Open %d -> %d", name, g.Reason, c.Open, got)
				}
				// An idle keep-alive on a listener, through a manager it owns, never counts.
				for _, l := range topo.Listeners {
					if l.Scope != name || len(l.HTTP) == 0 {
						continue
					}
					h := l.HTTP[0]
					idle := with(plus, func(s *envoyadmin.Snapshot) {
						hg := s.HTTP[h]
						hg.Connections++
						s.HTTP[h] = hg
					})
					if got := Count(idle, &topo, mode, sel).Open; got != c.Open {
						t.Fatalf("an idle keep-alive on %s through %s changed Open %d -> %d", name, h, c.Open, got)
					}
				}
			}
			// Any change of an excluded group's gauges leaves every other group as it was.
			for _, g := range c.Groups {
				if g.Counted {
					continue
				}
				changed := with(snap, func(s *envoyadmin.Snapshot) {
					for _, l := range g.Listeners {
						s.Listeners[l] += 3
					}
					for _, m := range g.Managers {
						s.HTTP[m] = envoyadmin.HTTPGauges{Connections: s.HTTP[m].Connections + 1, Requests: s.HTTP[m].Requests + 2}
					}
				})
				c2 := Count(changed, &topo, mode, sel)
				if c2.Open != c.Open {
					t.Fatalf("changing the excluded group %v changed Open %d -> %d", g, c.Open, c2.Open)
				}
				for _, other := range c.Groups {
					if o2 := groupOf(c2, other.first()); other.first() != g.first() && (o2 == nil || !reflect.DeepEqual(*o2, other)) {
						t.Fatalf("changing the excluded group %v changed %+v to %+v", g, other, o2)
					}
				}
			}
		}
	})
}

// The quiet period's counters over random topologies: a probe (a new connection and a request the
// health_check filter answers) on a manager that runs the filter never shows as new traffic; a request a
// watched manager passes on always does, as one request.
func FuzzCountWatched(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 8 | 16, 3, 4, 4 | 16, 2, 2, 0, 0, 16, 1, 1, 0, 0, 0, 0, 1, 2, 3})
	f.Add([]byte{0, 3, 0, 3, 0, 6, 0, 0, 0, 0, 0, 0, 8 | 16, 3, 4, 4, 8, 16, 1, 1, 0, 0, 0, 0, 5, 6, 7})
	f.Fuzz(func(t *testing.T, b []byte) {
		topo, snap, sel := fuzzCase(b)
		c := Count(snap, &topo, ModeInflight, sel)
		checkers := map[string]bool{} // managers that run the health_check filter
		for _, l := range topo.Listeners {
			for _, h := range append(slices.Clone(l.HealthCheck), l.MixedHealthCheck...) {
				checkers[h] = true
			}
		}
		for h, g := range snap.HTTP {
			if !checkers[h] {
				continue
			}
			probe := with(snap, func(s *envoyadmin.Snapshot) {
				s.HTTP[h] = envoyadmin.HTTPGauges{Connections: g.Connections, Requests: g.Requests, RequestsTotal: g.RequestsTotal + 1, HealthChecksTotal: g.HealthChecksTotal + 1}
				for _, l := range topo.Listeners {
					if slices.Contains(l.HTTP, h) {
						s.ListenerTotals[l.Scope]++
					}
				}
			})
			if got := Count(probe, &topo, ModeInflight, sel).Watched; !reflect.DeepEqual(got, c.Watched) {
				t.Fatalf("a probe on %s changed Watched %v -> %v", h, c.Watched, got)
			}
		}
		for h, g := range snap.HTTP {
			before, watched := c.Watched[h]
			if !watched {
				continue
			}
			req := with(snap, func(s *envoyadmin.Snapshot) {
				g.RequestsTotal++
				s.HTTP[h] = g
			})
			if got := Count(req, &topo, ModeInflight, sel).Watched[h]; got != before+1 {
				t.Fatalf("a request on the watched %s: Watched %d -> %d, want one more", h, before, got)
			}
		}
	})
}

// with returns a copy of s changed by f.
func with(s envoyadmin.Snapshot, f func(s *envoyadmin.Snapshot)) envoyadmin.Snapshot {
	c := envoyadmin.Snapshot{Listeners: maps.Clone(s.Listeners), HTTP: maps.Clone(s.HTTP), ListenerTotals: maps.Clone(s.ListenerTotals)}
	f(&c)
	return c
}

// An unknown count reads the same in the log's two formats: null, never -1.
func TestOpenCountInBothLogFormats(t *testing.T) {
	for _, tc := range []struct {
		n    OpenCount
		want string
	}{{Unknown, "null"}, {0, "0"}, {7, "7"}} {
		var text, js strings.Builder
		slog.New(slog.NewTextHandler(&text, nil)).Info("m", "open", tc.n)
		slog.New(slog.NewJSONHandler(&js, nil)).Info("m", "open", tc.n)
		if !strings.Contains(text.String(), " open="+tc.want+"\n") {
			t.Errorf("text: %q, want open=%s", text.String(), tc.want)
		}
		if !strings.Contains(js.String(), `"open":`+tc.want+"}") {
			t.Errorf("json: %q, want \"open\":%s", js.String(), tc.want)
		}
	}
}

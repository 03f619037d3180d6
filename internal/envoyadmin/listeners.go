package envoyadmin

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// ListenerConfigQuery asks /config_dump for the listeners only, static and dynamic, in one request. Envoy
// still builds its other dumps to answer it (about 100 ms with 10,000 clusters, measured on 1.40.0) but
// sends only the listeners (the unmasked dump of the same Envoy is 10 MB and takes 3 s).
const ListenerConfigQuery = "mask=static_listeners,dynamic_listeners"

// Topology is what Envoy's listener configuration says about counting: which HTTP connection managers
// each listener's connections go through. Envoy's stats do not say it; a drain needs it to tell an idle
// keep-alive connection (an HTTP manager's) from a TCP proxy connection on the same or another listener.
type Topology struct {
	// Listeners, one per stat scope, sorted by scope. Listeners of the configuration without a stat
	// scope (no address and not internal, such as API listeners) are left out.
	Listeners []Listener
	// AdminRoutesUnread says why the clusters of AdminRouteCandidates could not be read (Client.ListenerConfig):
	// the managers that route only to them are then not known to be Envoy's own readiness endpoints. "" if
	// they were read, or none was needed.
	AdminRoutesUnread string

	// forwards: per HTTP manager scope, true if some chain's manager with that scope may pass a request
	// on to a cluster (a route to a cluster, weighted clusters, a cluster from a header, or routes that are
	// not inline: RDS, scoped routes), false if every route answers itself (or there is none).
	forwards map[string]bool
	// routes: per HTTP manager scope, the clusters its routes go to, for a manager whose every route
	// goes to one named cluster or answers itself (a direct response or a redirect), in every chain and
	// listener that has it; nil for any other (RDS, weighted clusters, a cluster from a header).
	routes map[string][]string
}

// Listener is one listener (or the active, warming and draining versions of one, merged) as its stats see it.
type Listener struct {
	Name string // the listener's name in the configuration
	// Scope is the listener's stat scope as Envoy names it, with ':' written '_': "listener.<stat_prefix>"
	// if it sets one, else "listener.envoy_internal_<name>" for an internal listener, else
	// "listener.<address>": "listener.127.0.0.1_10000", "listener.[__1]_10000", "listener./path/of.sock".
	Scope string
	// Internal is set for an internal listener (Envoy's in-process listeners, reached by other listeners'
	// upstream connections, never by a client).
	Internal bool
	// HTTP lists the stat scopes "http.<stat_prefix>" (':' written '_') of the HTTP connection managers in
	// any of its filter chains, the default chain included; sorted, without duplicates.
	HTTP []string
	// NonHTTP is set if some filter chain ends in another network filter (TCP proxy, or one not recognised).
	NonHTTP bool
	// HealthCheck lists the HTTP managers of HTTP that are readiness endpoints and nothing else, whose
	// requests are kubelet's probes and load balancers' health checks, not traffic: those that run Envoy's
	// health_check filter (envoy.filters.http.health_check) and pass no request on to a cluster (no route, or
	// every route a direct response, a redirect or no forwarding), and, once MarkAdminRoutes has run, those
	// whose routes all go to Envoy's own admin API (Contour's stats-health listener: /ready and /stats passed
	// to the admin). Sorted, without duplicates; nil if none.
	HealthCheck []string
	// MixedHealthCheck lists the HTTP managers of HTTP that run the health_check filter and also pass
	// requests on to clusters (or whose routes are not inline, so may): the load balancer checks the port
	// it sends traffic to. Their requests are both probes and traffic; the filter's own counter
	// (health_check.request_total, HTTPGauges.HealthChecksTotal) tells the probes apart, no connection
	// counter does. Sorted, without duplicates, none of HealthCheck; nil if none.
	MixedHealthCheck []string
}

// CanonicalScope writes a stat scope the way Envoy 1.40 does: ':' as '_'. Envoy 1.36 writes a ':' of an
// HTTP manager's stat_prefix as is ("http.a:b") and 1.40 as '_' ("http.a_b"); both write a listener's as '_'.
// Comparing canonical scopes makes one Topology match the stats of both.
func CanonicalScope(scope string) string { return strings.ReplaceAll(scope, ":", "_") }

// healthCheckType is the type URL of the health_check HTTP filter's configuration.
const healthCheckType = "type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck"

// hcmType is the type URL of the HTTP connection manager's configuration. Filter names are free-form in
// Envoy's v3 API; the type is what makes a filter an HTTP connection manager.
const hcmType = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"

// The parts of Envoy's JSON config dump a Topology needs (envoy.admin.v3.ListenersConfigDump).
type (
	configDump struct {
		Configs *[]struct {
			Type             string                             `json:"@type"`
			StaticListeners  []struct{ Listener *listenerJSON } `json:"static_listeners"`
			DynamicListeners []struct {
				Name          string                            `json:"name"`
				ActiveState   *struct{ Listener *listenerJSON } `json:"active_state"`
				WarmingState  *struct{ Listener *listenerJSON } `json:"warming_state"`
				DrainingState *struct{ Listener *listenerJSON } `json:"draining_state"`
			} `json:"dynamic_listeners"`
		} `json:"configs"`
	}
	listenerJSON struct {
		Name               string          `json:"name"`
		StatPrefix         string          `json:"stat_prefix"`
		Address            *addressJSON    `json:"address"`
		InternalListener   json.RawMessage `json:"internal_listener"`
		FilterChains       []filterChain   `json:"filter_chains"`
		DefaultFilterChain *filterChain    `json:"default_filter_chain"`
	}
	filterChain struct {
		Filters []struct {
			TypedConfig *struct {
				Type        string `json:"@type"`
				StatPrefix  string `json:"stat_prefix"`
				HTTPFilters []struct {
					TypedConfig *struct {
						Type string `json:"@type"`
					} `json:"typed_config"`
				} `json:"http_filters"`
				RouteConfig *routeConfigJSON `json:"route_config"` // nil with RDS or scoped routes
			} `json:"typed_config"`
		} `json:"filters"`
	}
	// routeConfigJSON is an HTTP manager's inline route configuration: what each route does.
	routeConfigJSON struct {
		VirtualHosts []struct {
			Routes []struct {
				Route *struct {
					Cluster string `json:"cluster"` // "" for weighted clusters or a cluster from a header
				} `json:"route"`
				DirectResponse      json.RawMessage `json:"direct_response"`
				Redirect            json.RawMessage `json:"redirect"`
				NonForwardingAction json.RawMessage `json:"non_forwarding_action"`
			} `json:"routes"`
		} `json:"virtual_hosts"`
	}
)

// ParseListenerConfig reads the JSON answer of GET /config_dump?mask=static_listeners,dynamic_listeners
// (ListenerConfigQuery). Static listeners and every state of a dynamic one (active, warming, draining: a
// draining version still holds connections) are merged by stat scope. Other dumps in the answer are ignored.
func ParseListenerConfig(r io.Reader) (Topology, error) {
	var doc configDump
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return Topology{}, fmt.Errorf("decoding listener config: %w", err)
	}
	if doc.Configs == nil {
		return Topology{}, fmt.Errorf("decoding listener config: no \"configs\" array")
	}
	byScope := map[string]*Listener{}
	routes := map[string][]string{} // as Topology.routes, with nil for a manager seen routing otherwise
	forwards := map[string]bool{}   // as Topology.forwards
	add := func(l *listenerJSON, name string) {
		if l == nil {
			return
		}
		if l.Name == "" {
			l.Name = name
		}
		scope, ok := l.scope()
		if !ok {
			return
		}
		t := byScope[scope]
		if t == nil {
			t = &Listener{Name: l.Name, Scope: scope}
			byScope[scope] = t
		}
		t.Internal = t.Internal || l.internal()
		chains := l.FilterChains
		if l.DefaultFilterChain != nil {
			chains = append(slices.Clip(chains), *l.DefaultFilterChain)
		}
		for _, c := range chains {
			prefix, http := c.httpManager()
			if !http {
				t.NonHTTP = true
				continue
			}
			t.HTTP = append(t.HTTP, prefix)
			if c.healthCheck() {
				t.HealthCheck = append(t.HealthCheck, prefix)
			}
			forwards[prefix] = forwards[prefix] || c.forwards()
			// One chain that routes otherwise disqualifies the manager for good (nil).
			mine, ok := c.routeClusters()
			if prev, seen := routes[prefix]; ok && (!seen || prev != nil) {
				routes[prefix] = append(prev, mine...)
			} else {
				routes[prefix] = nil
			}
		}
	}
	for _, c := range *doc.Configs {
		for _, s := range c.StaticListeners {
			add(s.Listener, "")
		}
		for _, d := range c.DynamicListeners {
			for _, st := range []*struct{ Listener *listenerJSON }{d.ActiveState, d.WarmingState, d.DrainingState} {
				if st != nil {
					add(st.Listener, d.Name)
				}
			}
		}
	}
	topo := Topology{Listeners: make([]Listener, 0, len(byScope)), forwards: forwards}
	for prefix, clusters := range routes {
		if clusters == nil {
			continue
		}
		if topo.routes == nil {
			topo.routes = map[string][]string{}
		}
		slices.Sort(clusters)
		topo.routes[prefix] = slices.Compact(clusters)
	}
	for _, t := range byScope {
		slices.Sort(t.HTTP)
		t.HTTP = slices.Compact(t.HTTP)
		slices.Sort(t.HealthCheck)
		t.HealthCheck = slices.Compact(t.HealthCheck)
		t.splitMixed(forwards)
		topo.Listeners = append(topo.Listeners, *t)
	}
	slices.SortFunc(topo.Listeners, func(a, b Listener) int { return strings.Compare(a.Scope, b.Scope) })
	return topo, nil
}

// internal reports whether the listener sets internal_listener (an empty object when set).
func (l *listenerJSON) internal() bool {
	return len(l.InternalListener) > 0 && string(l.InternalListener) != "null"
}

// scope returns the listener's stat scope, the way Envoy names it (checked on 1.36.2 and 1.40.0 by the
// integration test TestListenerConfigMatchesStats), and false if it has none.
func (l *listenerJSON) scope() (string, bool) {
	switch {
	case l.StatPrefix != "":
		return CanonicalScope("listener." + l.StatPrefix), true
	case l.internal():
		return CanonicalScope("listener.envoy_internal_" + l.Name), true
	case l.Address == nil:
		return "", false
	case l.Address.SocketAddress != nil:
		sa := l.Address.SocketAddress
		port, err := strconv.ParseUint(strings.Trim(string(sa.PortValue), `"`), 10, 16)
		if len(sa.PortValue) == 0 {
			port, err = 0, nil // proto3 JSON leaves out a zero port
		}
		if err != nil || sa.Address == "" {
			return "", false
		}
		host := sa.Address
		if ip, err := netip.ParseAddr(host); err == nil {
			host = ip.WithZone("").String() // Envoy prints addresses as inet_ntop does: "::1", not "0:0:0:0:0:0:0:1"
			if ip.Is6() {
				host = "[" + host + "]"
			}
		}
		return CanonicalScope("listener." + host + ":" + strconv.FormatUint(port, 10)), true
	case l.Address.Pipe != nil && l.Address.Pipe.Path != "":
		return CanonicalScope("listener." + l.Address.Pipe.Path), true
	}
	return "", false
}

// httpManager reports whether the chain's terminal (last) filter is an HTTP connection manager, and its
// stat scope. A chain without filters is not: it carries no HTTP.
func (c filterChain) httpManager() (string, bool) {
	if len(c.Filters) == 0 {
		return "", false
	}
	tc := c.Filters[len(c.Filters)-1].TypedConfig
	if tc == nil || tc.Type != hcmType || tc.StatPrefix == "" {
		return "", false
	}
	return CanonicalScope("http." + tc.StatPrefix), true
}

// routeClusters returns the clusters the routes of the chain's HTTP manager go to, and true if every route
// goes to one named cluster or answers itself (direct response, redirect, no forwarding) and at least one
// goes to a cluster. Call it only on a chain httpManager accepts.
func (c filterChain) routeClusters() ([]string, bool) {
	rc := c.Filters[len(c.Filters)-1].TypedConfig.RouteConfig
	if rc == nil {
		return nil, false
	}
	var clusters []string
	for _, vh := range rc.VirtualHosts {
		for _, r := range vh.Routes {
			switch {
			case r.Route != nil && r.Route.Cluster != "":
				clusters = append(clusters, r.Route.Cluster)
			case r.Route == nil && (present(r.DirectResponse) || present(r.Redirect) || present(r.NonForwardingAction)):
			default:
				return nil, false
			}
		}
	}
	return clusters, len(clusters) > 0
}

// forwards reports whether the chain's HTTP manager may pass a request on to a cluster: its routes are not
// inline (RDS, scoped routes: not known here, so they may), or some route is not a direct response, a
// redirect or no forwarding. Call it only on a chain httpManager accepts.
func (c filterChain) forwards() bool {
	rc := c.Filters[len(c.Filters)-1].TypedConfig.RouteConfig
	if rc == nil {
		return true
	}
	for _, vh := range rc.VirtualHosts {
		for _, r := range vh.Routes {
			if r.Route != nil || !present(r.DirectResponse) && !present(r.Redirect) && !present(r.NonForwardingAction) {
				return true
			}
		}
	}
	return false
}

// splitMixed moves the managers of HealthCheck that forward requests to a cluster (forwards, by manager
// scope) to MixedHealthCheck: they serve traffic beside the health checks.
func (l *Listener) splitMixed(forwards map[string]bool) {
	var pure []string
	for _, h := range l.HealthCheck {
		if forwards[h] {
			l.MixedHealthCheck = append(l.MixedHealthCheck, h)
		} else {
			pure = append(pure, h)
		}
	}
	l.HealthCheck = pure
}

// present reports whether a JSON field was given a value (not left out, not null).
func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// healthCheck reports whether the chain's HTTP manager runs the health_check filter. Call it only on a chain
// httpManager accepts.
func (c filterChain) healthCheck() bool {
	for _, f := range c.Filters[len(c.Filters)-1].TypedConfig.HTTPFilters {
		if f.TypedConfig != nil && f.TypedConfig.Type == healthCheckType {
			return true
		}
	}
	return false
}

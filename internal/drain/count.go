package drain

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// Mode says what counts as work still in flight.
type Mode string

const (
	// ModeInflight counts HTTP requests in flight plus the connections no HTTP connection manager owns
	// (TCP proxy and other network filters). Idle HTTP keep-alive connections do not count: no released
	// Envoy closes them on a drain (only at the HTTP manager's idle_timeout, 1 h by default), so counting
	// them makes every termination behind a pooling load balancer wait for the deadline (Envoy Gateway #4125).
	ModeInflight Mode = "inflight"
	// ModeConnections counts every downstream connection of every listener: the peers' strict behaviour.
	ModeConnections Mode = "connections"
	// ModeRequests counts HTTP requests in flight only.
	ModeRequests Mode = "requests"
)

// ParseMode reads a --count value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeInflight, ModeConnections, ModeRequests:
		return m, nil
	}
	return "", fmt.Errorf("%q is not one of inflight, connections, requests", s)
}

// Selector chooses which listeners and HTTP connection managers count. Names are the stat scopes
// "listener.<address or stat_prefix>" and "http.<stat_prefix>"; expressions match anywhere in the name
// unless anchored. With Envoy's listener configuration the choice applies to whole groups (see Count).
// Envoy's admin listener and HTTP manager, and Envoy-internal listeners, never count.
type Selector struct {
	Include []*regexp.Regexp // if any, a name must match one of them
	Exclude []*regexp.Regexp // a name matching any of them does not count
	Names   Names            // spells the two settings in a group's reason; nil: their field names
}

// Counts reports a Snapshot's work in flight, as a Mode and Selector count it.
type Counts struct {
	Open      int64        // what the mode counts: the number a drain waits to fall to its threshold
	Scopes    []ScopeCount // every counted scope, sorted by name
	Excluded  []string     // scopes left out by the Selector or as Envoy's own
	NonHTTPCx int64        // connections of counted groups that no HTTP manager accounts for (TCP proxy and others)
	Groups    []Group      // every group, counted or not, sorted by its first member
	Basis     string       // BasisListenerConfig, or "fallback: <why>"
	Kinds     Kinds        // the counted groups' work in flight by kind, whatever the mode
	// Watched are the counters that show new traffic, by raw scope, of the counted groups that are not
	// readiness endpoints only (Group.HealthChecks): downstream_rq_total of their HTTP managers, less
	// health_check.request_total (the probes) on a manager that runs the health_check filter; and
	// downstream_cx_total of their listeners that may carry connections no HTTP manager serves (a filter chain
	// that ends in TCP proxy or another network filter, or a listener the configuration read does not know),
	// unless the group answers health checks beside its traffic (Group.MixedHealthChecks: a probe's connection
	// cannot be told from a client's). On a listener whose every filter chain is an HTTP manager, a new
	// connection is not traffic until it carries a request: a load balancer's TCP health check on the traffic
	// port (AWS NLB's default, every 10 s from each of its nodes; HAProxy's plain check; Azure's TCP probe)
	// opens and closes connections that never do, and would hold the quiet period forever. Nil without the
	// listener configuration: it alone tells a readiness listener's probes from traffic. Envoy counts a probe
	// in both counters within one callback on a worker, and one /stats answer reads them one after the other:
	// on a mixed manager the requests still in flight are left out (a probe between its two counts is in
	// flight), and Rising keeps the dip of a probe answered but still in flight from reading as a new request.
	Watched map[string]int64
	// Rising are the scopes of Watched whose value can dip for a moment (a mixed manager's: its probes
	// answered but still in flight) and must be read as the highest seen: a dip is no new traffic on recovery.
	Rising map[string]bool
	// Cut are the counters of work the client side cut (envoyadmin.HTTPGauges.RequestsRxReset,
	// RequestsTxReset and ConnectionsCutActive), by raw scope, of the HTTP managers of the counted groups that are not readiness
	// endpoints only (a probe cut by its checker is no lost traffic). Counters since Envoy started: a drain
	// reports their increase (cutWatch).
	Cut map[string]CutCounters
}

// Kinds is work in flight by kind. Envoy's stats tell upgraded connections (WebSocket and other upgrades:
// downstream_cx_upgrades_active) from other requests; gRPC streams, server-sent events and other long
// responses are requests (streams) in flight like any other, which no stat tells apart.
type Kinds struct {
	Upgraded int64 `json:"upgraded_connections"` // WebSockets and other upgraded connections
	Requests int64 `json:"requests"`             // requests and streams in flight, upgraded ones left out
	NonHTTP  int64 `json:"non_http_connections"` // connections no HTTP manager owns (TCP proxy and others)
}

// Text lists the kinds that are not zero, for reasons and Events: "2 WebSocket/upgraded connections
// still open, 1 request"; "" if none is.
func (k Kinds) Text() string {
	var parts []string
	if k.Upgraded > 0 {
		parts = append(parts, plural(k.Upgraded, "WebSocket/upgraded connection")+" still open")
	}
	if k.Requests > 0 {
		parts = append(parts, plural(k.Requests, "request")+" (or stream)")
	}
	if k.NonHTTP > 0 {
		parts = append(parts, plural(k.NonHTTP, "non-HTTP connection"))
	}
	return strings.Join(parts, ", ")
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// BasisListenerConfig is Counts.Basis when HTTP managers were attributed to listeners by Envoy's listener
// configuration; otherwise the basis is "fallback: <why>" and the count is one sum over every counted scope.
const BasisListenerConfig = "listener_config"

// fallbackBasis is Count's basis without a topology; the engine puts the reason in its place.
const fallbackBasis = "fallback: no listener configuration"

// ScopeCount is one listener's or HTTP manager's gauges.
type ScopeCount struct {
	Name        string `json:"name"`
	Connections int64  `json:"connections"`
	Requests    int64  `json:"requests,omitempty"`
}

// Group is listeners and HTTP managers counted as one: listeners that share an HTTP manager stat prefix,
// with those managers. Its non-HTTP connections are its listeners' connections minus its managers'.
type Group struct {
	Listeners       []string `json:"listeners"`     // listener scopes
	Managers        []string `json:"http_managers"` // HTTP manager scopes
	Connections     int64    `json:"connections"`   // the listeners' downstream connections
	HTTPConnections int64    `json:"http_connections"`
	Requests        int64    `json:"requests"`             // the managers' requests in flight
	Upgraded        int64    `json:"upgraded_connections"` // of those, upgraded connections (WebSockets)
	NonHTTP         int64    `json:"non_http_connections"` // max(0, connections - http_connections)
	Counted         bool     `json:"counted"`
	// HealthChecks is set for a group with a readiness endpoint (envoyadmin.Listener.HealthCheck: an HTTP
	// manager that runs Envoy's health_check filter and passes no request on to a cluster, or whose routes
	// all go to Envoy's own admin API, as Contour's stats-health listener's do): its connections and requests
	// are probes and load balancers' health checks, so the quiet period does not watch them. Its work in
	// flight counts as any other's.
	HealthChecks bool `json:"health_checks,omitempty"`
	// MixedHealthChecks is set for a group, not HealthChecks, with an HTTP manager that runs the health_check
	// filter and also passes requests on to clusters (envoyadmin.Listener.MixedHealthCheck): the quiet period
	// watches its managers' requests less the filter's health checks, and not its listeners' connections.
	MixedHealthChecks bool `json:"mixed_health_checks,omitempty"`
	// Reason says why a group is not counted, or why a counted one counts every connection (a listener
	// the configuration read does not know).
	Reason string `json:"reason,omitempty"`
}

// builtin reports whether a scope is Envoy's own by its name: the admin listener and its HTTP manager, and
// internal listeners without a stat_prefix (Istio #60728: internal listeners never reach zero).
func builtin(name string) bool {
	switch name {
	case adminListener, adminManager:
		return true
	}
	return strings.HasPrefix(name, "listener.envoy_internal")
}

const (
	adminListener = "listener.admin"
	adminManager  = "http.admin"
)

// Reasons a group or scope does not count.
const (
	reasonBuiltin = "envoy's own: the admin, or internal listeners only"
	reasonUnknown = "listener not in the listener configuration read: every connection counts"
)

// match returns the first of names that one of res matches, or "".
func match(res []*regexp.Regexp, names ...string) string {
	for _, n := range names {
		for _, re := range res {
			if re.MatchString(n) {
				return n
			}
		}
	}
	return ""
}

// exclusion returns why the selector leaves out a set of names (a scope, or a group's members), or "".
func (s Selector) exclusion(names ...string) string {
	if m := match(s.Exclude, names...); m != "" {
		return s.Names.of(SettingListenerExclude) + " matches " + m
	}
	if len(s.Include) > 0 && match(s.Include, names...) == "" {
		return s.Names.of(SettingListenerInclude) + " matches none of its scopes"
	}
	return ""
}

// Count applies a mode and a selector to a snapshot. It is pure.
//
// With topo (Envoy's listener configuration), listeners that share any HTTP manager stat prefix form one
// group with those managers; a manager no listener owns, and a listener without one, are each a group of
// their own. Per group, non-HTTP connections = max(0, listener connections - manager connections), so an
// idle keep-alive connection cancels out where it is, and a TCP connection on one listener is never hidden
// by HTTP connections on another. Exclusions and inclusions apply to whole groups: a group is left out if
// any member matches --listener-exclude; with --listener-include, it counts if any member matches. A group
// is Envoy's own (left out) if all its listeners are the admin's or internal listeners: an internal listener
// and its HTTP manager leave together. An internal listener that shares a manager prefix with a normal
// listener counts with it (its pooled idle connections cancel out against the manager's; its requests count).
// The admin's HTTP manager is never attributed to a listener (an "admin" stat_prefix of a listener's manager
// mixes with the admin's own stats, which always hold our poll). A listener the stats show but the topology
// does not know (added since it was read) is a group of its own whose every connection counts.
//
// Without topo (nil: the configuration could not be read), every counted scope is one group: the counted
// listeners' connections minus the counted managers' (the rule before listener configurations were read;
// Basis says "fallback"). Every sum saturates at math.MaxInt64.
func Count(snap envoyadmin.Snapshot, topo *envoyadmin.Topology, mode Mode, sel Selector) Counts {
	g := newGrouping(snap, topo, sel)
	c := Counts{Basis: BasisListenerConfig}
	if topo == nil {
		c.Basis = fallbackBasis
	}
	for _, members := range g.groups() {
		grp, counted := g.judge(members, topo != nil, sel)
		for _, n := range members {
			for _, raw := range n.raw {
				if !counted {
					c.Excluded = append(c.Excluded, raw)
					continue
				}
				sc := ScopeCount{Name: raw, Connections: n.rawCx[raw]}
				if n.manager {
					sc.Requests = n.rawRq[raw]
				}
				c.Scopes = append(c.Scopes, sc)
			}
		}
		c.Groups = append(c.Groups, grp)
		if !counted {
			continue
		}
		c.Kinds.Upgraded = addSat(c.Kinds.Upgraded, grp.Upgraded)
		c.Kinds.Requests = addSat(c.Kinds.Requests, max(0, grp.Requests-grp.Upgraded))
		c.Kinds.NonHTTP = addSat(c.Kinds.NonHTTP, grp.NonHTTP)
		if !grp.HealthChecks {
			for _, n := range members {
				if !n.manager {
					continue
				}
				for _, raw := range n.raw {
					if c.Cut == nil {
						c.Cut = map[string]CutCounters{}
					}
					h := snap.HTTP[raw]
					c.Cut[raw] = CutCounters{RxReset: max(0, h.RequestsRxReset), TxReset: max(0, h.RequestsTxReset),
						CxRemote: max(0, h.ConnectionsCutActive)}
				}
			}
		}
		if topo != nil && !grp.HealthChecks {
			if c.Watched == nil {
				c.Watched = map[string]int64{}
			}
			for _, n := range members {
				for _, raw := range n.raw {
					if n.manager && grp.MixedHealthChecks {
						// Requests are counted once they are no longer in flight: Envoy counts a probe in
						// downstream_rq_total a moment before health_check.request_total, and it is in flight
						// meanwhile, so a /stats read between the two no longer shows it as a request. A read
						// while the probe, answered, is still in flight shows one less: Rising. That dip can go below
						// zero, and a request ending during it still shows as one more; only more probes than
						// requests, which Envoy never shows, count as none.
						h := snap.HTTP[raw]
						c.Watched[raw] = max(0, h.RequestsTotal-h.HealthChecksTotal) - h.Requests
						if c.Rising == nil {
							c.Rising = map[string]bool{}
						}
						c.Rising[raw] = true
					} else if n.manager {
						h := snap.HTTP[raw]
						c.Watched[raw] = max(0, h.RequestsTotal-h.HealthChecksTotal)
					} else if v, ok := snap.ListenerTotals[raw]; ok && !grp.MixedHealthChecks && (n.nonHTTP || !n.configured) {
						c.Watched[raw] = v
					}
				}
			}
		}
		c.NonHTTPCx = addSat(c.NonHTTPCx, grp.NonHTTP)
		switch mode {
		case ModeConnections:
			c.Open = addSat(c.Open, grp.Connections)
		case ModeRequests:
			c.Open = addSat(c.Open, grp.Requests)
		default:
			c.Open = addSat(c.Open, addSat(grp.Requests, grp.NonHTTP))
		}
	}
	sort.Slice(c.Scopes, func(i, j int) bool { return c.Scopes[i].Name < c.Scopes[j].Name })
	sort.Strings(c.Excluded)
	sort.Slice(c.Groups, func(i, j int) bool { return c.Groups[i].first() < c.Groups[j].first() })
	return c
}

func (g Group) first() string {
	if len(g.Listeners) > 0 {
		return g.Listeners[0]
	}
	if len(g.Managers) > 0 {
		return g.Managers[0]
	}
	return ""
}

// addSat adds two non-negative counts, saturating at math.MaxInt64 rather than wrapping.
func addSat(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

// node is one listener or HTTP manager, keyed by its canonical scope (envoyadmin.CanonicalScope): Envoy
// 1.36 and 1.40 write a ':' of a manager's stat_prefix differently. raw are the names the stats use for it.
type node struct {
	name       string
	manager    bool
	raw        []string
	rawCx      map[string]int64
	rawRq      map[string]int64
	cx, rq     int64
	upgraded   int64
	health     bool // an HTTP manager that is a readiness endpoint (envoyadmin.Listener.HealthCheck)
	mixed      bool // an HTTP manager that answers health checks and serves traffic (envoyadmin.Listener.MixedHealthCheck)
	nonHTTP    bool // a configured listener with a filter chain no HTTP manager serves (envoyadmin.Listener.NonHTTP), or none
	builtin    bool // the admin's, or an internal listener
	configured bool // in the topology
	parent     *node
}

func (n *node) root() *node {
	for n.parent != n {
		n.parent = n.parent.parent
		n = n.parent
	}
	return n
}

// grouping is a union-find of a snapshot's and a topology's scopes.
type grouping struct {
	nodes map[string]*node
	order []*node // in insertion order, for determinism before sorting
}

func newGrouping(snap envoyadmin.Snapshot, topo *envoyadmin.Topology, sel Selector) *grouping {
	g := &grouping{nodes: map[string]*node{}}
	if topo != nil {
		for _, l := range topo.Listeners {
			ln := g.node(l.Scope, false)
			ln.configured = true
			ln.builtin = ln.builtin || l.Internal
			ln.nonHTTP = ln.nonHTTP || l.NonHTTP || len(l.HTTP) == 0
			for _, h := range l.HTTP {
				if envoyadmin.CanonicalScope(h) == adminManager {
					continue
				}
				union(ln, g.node(h, true))
			}
			for _, h := range l.HealthCheck {
				if envoyadmin.CanonicalScope(h) != adminManager {
					g.node(h, true).health = true
				}
			}
			for _, h := range l.MixedHealthCheck {
				if envoyadmin.CanonicalScope(h) != adminManager {
					g.node(h, true).mixed = true
				}
			}
		}
	}
	for name, v := range snap.Listeners {
		g.gauge(name, false, v, 0)
	}
	for name, v := range snap.HTTP {
		g.gauge(name, true, v.Connections, v.Requests)
		g.node(name, true).upgraded = addSat(g.node(name, true).upgraded, max(v.Upgrades, 0))
	}
	if topo != nil {
		// The admin's listener and manager go together (not in the topology: Envoy configures them itself).
		if a, ok := g.nodes[key(adminListener, false)]; ok {
			if m, ok := g.nodes[key(adminManager, true)]; ok {
				union(a, m)
			}
		}
	} else {
		// The rule without a configuration: every scope the selector counts is in one group.
		var first *node
		for _, n := range g.order {
			if n.builtin || sel.exclusion(n.raw...) != "" {
				continue
			}
			if first == nil {
				first = n
			}
			union(first, n)
		}
	}
	return g
}

// key is a scope's key in grouping.nodes: its canonical name, listeners and managers apart (Envoy's names
// never mix them, "listener." against "http.", but a Snapshot built by hand may).
func key(scope string, manager bool) string {
	if manager {
		return "m" + envoyadmin.CanonicalScope(scope)
	}
	return "l" + envoyadmin.CanonicalScope(scope)
}

// node returns the node of a scope, creating it.
func (g *grouping) node(scope string, manager bool) *node {
	k := key(scope, manager)
	n := g.nodes[k]
	if n == nil {
		name := envoyadmin.CanonicalScope(scope)
		n = &node{name: name, manager: manager, builtin: builtin(name)}
		n.parent = n
		g.nodes[k] = n
		g.order = append(g.order, n)
	}
	return n
}

// gauge adds a scope's gauges, as the stats name it, to its node. Negative values (never in Envoy's
// gauges) count as 0.
func (g *grouping) gauge(raw string, manager bool, cx, rq int64) {
	n := g.node(raw, manager)
	cx, rq = max(cx, 0), max(rq, 0)
	if n.rawCx == nil {
		n.rawCx, n.rawRq = map[string]int64{}, map[string]int64{}
	}
	n.raw = append(n.raw, raw)
	n.rawCx[raw], n.rawRq[raw] = cx, rq
	n.cx, n.rq = addSat(n.cx, cx), addSat(n.rq, rq)
}

func union(a, b *node) {
	ra, rb := a.root(), b.root()
	if ra != rb {
		rb.parent = ra
	}
}

// groups returns the members of every group, each group's in insertion order.
func (g *grouping) groups() [][]*node {
	idx := map[*node]int{}
	var out [][]*node
	for _, n := range g.order {
		r := n.root()
		i, ok := idx[r]
		if !ok {
			i = len(out)
			idx[r] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], n)
	}
	return out
}

// judge sums a group's gauges and decides whether it counts.
func (g *grouping) judge(members []*node, configured bool, sel Selector) (Group, bool) {
	grp := Group{Listeners: []string{}, Managers: []string{}}
	var names []string
	listeners, builtinListeners, builtinManagers, unknown := 0, 0, 0, false
	for _, n := range members {
		display := n.name
		if len(n.raw) == 1 {
			display = n.raw[0] // as /stats shows it
		}
		names = append(names, n.raw...)
		if display != n.name || len(n.raw) == 0 {
			names = append(names, n.name)
		}
		if n.manager {
			grp.Managers = append(grp.Managers, display)
			grp.HTTPConnections = addSat(grp.HTTPConnections, n.cx)
			grp.Requests = addSat(grp.Requests, n.rq)
			grp.Upgraded = addSat(grp.Upgraded, n.upgraded)
			grp.HealthChecks = grp.HealthChecks || n.health
			grp.MixedHealthChecks = grp.MixedHealthChecks || n.mixed
			if n.builtin {
				builtinManagers++
			}
			continue
		}
		grp.Listeners = append(grp.Listeners, display)
		grp.Connections = addSat(grp.Connections, n.cx)
		listeners++
		if n.builtin {
			builtinListeners++
		}
		if configured && !n.configured && !n.builtin {
			unknown = true
		}
	}
	sort.Strings(grp.Listeners)
	sort.Strings(grp.Managers)
	grp.NonHTTP = max(0, grp.Connections-grp.HTTPConnections)
	grp.MixedHealthChecks = grp.MixedHealthChecks && !grp.HealthChecks
	switch {
	case listeners > 0 && builtinListeners == listeners, listeners == 0 && builtinManagers == len(members):
		grp.Reason = reasonBuiltin
	default:
		grp.Reason = sel.exclusion(names...)
	}
	grp.Counted = grp.Reason == ""
	if grp.Counted && unknown {
		grp.Reason = reasonUnknown
	}
	return grp, grp.Counted
}

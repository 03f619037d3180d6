package drain

import (
	"fmt"
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
// unless anchored. Envoy's admin listener and HTTP manager, and Envoy-internal listeners, never count.
type Selector struct {
	Include []*regexp.Regexp // if any, a name must match one of them
	Exclude []*regexp.Regexp // a name matching any of them does not count
}

// Counts reports a Snapshot's work in flight, as a Mode and Selector count it.
type Counts struct {
	Open      int64        // what the mode counts: the number a drain waits to fall to its threshold
	Scopes    []ScopeCount // every counted scope, sorted by name
	Excluded  []string     // scopes left out by the Selector or as Envoy's own
	NonHTTPCx int64        // connections of listeners that no HTTP manager accounts for (TCP proxy and others)
}

// ScopeCount is one listener's or HTTP manager's gauges.
type ScopeCount struct {
	Name        string `json:"name"`
	Connections int64  `json:"connections"`
	Requests    int64  `json:"requests,omitempty"`
}

// builtin reports whether a scope is Envoy's own: the admin listener and its HTTP manager, and
// internal listeners (Istio #60728: internal listeners never reach zero).
func builtin(name string) bool {
	switch name {
	case "listener.admin", "http.admin":
		return true
	}
	return strings.HasPrefix(name, "listener.envoy_internal")
}

func (s Selector) counts(name string) bool {
	if builtin(name) {
		return false
	}
	for _, re := range s.Exclude {
		if re.MatchString(name) {
			return false
		}
	}
	if len(s.Include) == 0 {
		return true
	}
	for _, re := range s.Include {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// Count applies a mode and a selector to a snapshot. It is pure.
//
// Envoy's stats do not say which HTTP manager belongs to which listener, so the connections no HTTP manager
// owns are the counted listeners' connections minus the counted HTTP managers' connections, never below 0.
func Count(snap envoyadmin.Snapshot, mode Mode, sel Selector) Counts {
	var c Counts
	var listenerCx, httpCx, httpRq int64
	for name, v := range snap.Listeners {
		if !sel.counts(name) {
			c.Excluded = append(c.Excluded, name)
			continue
		}
		listenerCx += v
		c.Scopes = append(c.Scopes, ScopeCount{Name: name, Connections: v})
	}
	for name, g := range snap.HTTP {
		if !sel.counts(name) {
			c.Excluded = append(c.Excluded, name)
			continue
		}
		httpCx += g.Connections
		httpRq += g.Requests
		c.Scopes = append(c.Scopes, ScopeCount{Name: name, Connections: g.Connections, Requests: g.Requests})
	}
	c.NonHTTPCx = max(0, listenerCx-httpCx)
	switch mode {
	case ModeConnections:
		c.Open = listenerCx
	case ModeRequests:
		c.Open = httpRq
	default:
		c.Open = httpRq + c.NonHTTPCx
	}
	sort.Slice(c.Scopes, func(i, j int) bool { return c.Scopes[i].Name < c.Scopes[j].Name })
	sort.Strings(c.Excluded)
	return c
}

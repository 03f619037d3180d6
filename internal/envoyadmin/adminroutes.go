package envoyadmin

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Readiness endpoints that are not Envoy's health_check filter: Contour's Envoy answers kubelet's /ready
// probes and a load balancer's health checks on its stats-health listener, whose routes pass /ready and
// /stats to a static cluster whose one endpoint is Envoy's own admin socket; Envoy Gateway and Istio route
// their stats listeners to the admin the same way. Their requests are probes, not traffic: counted as new
// traffic, a health check every few seconds would keep a quiet period from ever ending. A manager is one of
// them when its every route goes to a static cluster whose every endpoint is the admin address the drain
// calls (or answers itself), which takes the listener configuration and the static clusters those routes
// name: two reads, the second only when some manager routes only to named clusters.

// AdminRouteCandidates returns the clusters, sorted, that HTTP managers routing only to named clusters
// send their requests to: the clusters MarkAdminRoutes needs to know the endpoints of. Nil if none.
//
// A readiness endpoint routes to one cluster or a few: a manager whose routes go to more than
// maxAdminRouteClusters clusters is not a candidate, and at most maxAdminRouteCandidates names are returned
// (the first, sorted), which keeps the query short; a manager whose clusters are not all read is not marked.
func (t *Topology) AdminRouteCandidates() []string {
	var names []string
	for _, cs := range t.routes {
		if len(cs) <= maxAdminRouteClusters {
			names = append(names, cs...)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	return names[:min(len(names), maxAdminRouteCandidates)]
}

const (
	maxAdminRouteClusters   = 4
	maxAdminRouteCandidates = 64
)

// StaticClustersQuery asks /config_dump for the static clusters named, and only them (Envoy answers "{}"
// when none matches).
func StaticClustersQuery(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return url.Values{"resource": {"static_clusters"}, "name_regex": {"^(" + strings.Join(quoted, "|") + ")$"}}.Encode()
}

// The parts of GET /config_dump?resource=static_clusters that MarkAdminRoutes needs.
type staticClustersJSON struct {
	Configs []struct {
		Cluster *struct {
			Name           string `json:"name"`
			LoadAssignment *struct {
				Endpoints []struct {
					LBEndpoints []struct {
						Endpoint *struct {
							Address *addressJSON `json:"address"`
						} `json:"endpoint"`
					} `json:"lb_endpoints"`
				} `json:"endpoints"`
			} `json:"load_assignment"`
		} `json:"cluster"`
	} `json:"configs"`
}

type addressJSON struct {
	SocketAddress *struct {
		Address   string          `json:"address"`
		PortValue json.RawMessage `json:"port_value"`
	} `json:"socket_address"`
	Pipe *struct {
		Path string `json:"path"`
	} `json:"pipe"`
}

// ParseStaticClusters reads the answer of GET /config_dump?resource=static_clusters (StaticClustersQuery):
// each cluster's endpoints, by name. An endpoint that is neither an IP or "localhost" with a port nor a unix
// socket path is Address{Network: "other"}: it is never the admin's. A cluster without a load assignment
// has no endpoint.
func ParseStaticClusters(r io.Reader) (map[string][]Address, error) {
	var doc staticClustersJSON
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("decoding static clusters: %w", err)
	}
	out := map[string][]Address{}
	for _, c := range doc.Configs {
		if c.Cluster == nil || c.Cluster.Name == "" {
			continue
		}
		eps := out[c.Cluster.Name]
		if la := c.Cluster.LoadAssignment; la != nil {
			for _, le := range la.Endpoints {
				for _, e := range le.LBEndpoints {
					if e.Endpoint != nil {
						eps = append(eps, e.Endpoint.Address.address())
					}
				}
			}
		}
		out[c.Cluster.Name] = eps
	}
	return out, nil
}

func (a *addressJSON) address() Address {
	other := Address{Network: "other"}
	switch {
	case a == nil:
		return other
	case a.Pipe != nil && a.Pipe.Path != "":
		return Address{Network: "unix", Addr: a.Pipe.Path}
	case a.SocketAddress != nil:
		port, err := strconv.ParseUint(strings.Trim(string(a.SocketAddress.PortValue), `"`), 10, 16)
		if err != nil || port == 0 || a.SocketAddress.Address == "" {
			return other
		}
		return Address{Network: "tcp", Addr: net.JoinHostPort(a.SocketAddress.Address, strconv.FormatUint(port, 10))}
	}
	return other
}

// MarkAdminRoutes adds to the HealthCheck of each listener the HTTP managers whose every route goes to a
// cluster of clusters (ParseStaticClusters) whose every endpoint is admin, the address the drain calls Envoy's
// admin API at (taking them out of MixedHealthCheck: a health_check filter in front of the admin serves no
// traffic either). A cluster not in clusters (not static, or not read) is not the admin's.
func (t *Topology) MarkAdminRoutes(clusters map[string][]Address, admin Address) {
	adminOnly := map[string]bool{}
	for prefix, names := range t.routes {
		adminOnly[prefix] = len(names) > 0 && !slices.ContainsFunc(names, func(n string) bool {
			eps := clusters[n]
			return len(eps) == 0 || slices.ContainsFunc(eps, func(e Address) bool { return !SameAdmin(e, admin) })
		})
	}
	for i := range t.Listeners {
		l := &t.Listeners[i]
		for _, h := range l.HTTP {
			if adminOnly[h] && !slices.Contains(l.HealthCheck, h) {
				l.HealthCheck = append(l.HealthCheck, h)
			}
		}
		slices.Sort(l.HealthCheck)
		l.MixedHealthCheck = slices.DeleteFunc(l.MixedHealthCheck, func(h string) bool { return adminOnly[h] })
		if len(l.MixedHealthCheck) == 0 {
			l.MixedHealthCheck = nil
		}
	}
}

// SameAdmin reports whether a cluster's endpoint reaches admin: the same unix socket path, or the same port
// on the same IP, on loopback ("localhost" included) when the admin listens on loopback or on every address.
func SameAdmin(endpoint, admin Address) bool {
	switch {
	case endpoint.Network != admin.Network:
		return false
	case admin.Network == "unix":
		return filepath.Clean(endpoint.Addr) == filepath.Clean(admin.Addr)
	case admin.Network != "tcp":
		return false
	}
	eh, ep, err1 := net.SplitHostPort(endpoint.Addr)
	ah, ap, err2 := net.SplitHostPort(admin.Addr)
	if err1 != nil || err2 != nil || ep != ap {
		return false
	}
	a, err := netip.ParseAddr(ah)
	if err != nil {
		return false
	}
	if eh == "localhost" {
		return a.IsLoopback() || a.IsUnspecified()
	}
	e, err := netip.ParseAddr(eh)
	if err != nil {
		return false
	}
	e, a = e.Unmap(), a.Unmap()
	return e == a || e.IsLoopback() && (a.IsLoopback() || a.IsUnspecified())
}

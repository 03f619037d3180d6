package testbed

import (
	"fmt"
	"net"
	"strconv"
	"time"
)

// bootstrap returns Envoy's bootstrap configuration (marshalled to JSON, which
// Envoy reads like YAML) with the given admin block; see [Envoy] for what it
// configures, plus the extra clusters and listeners opts asks for.
func bootstrap(admin map[string]any, up *Upstream, opts Options) map[string]any {
	ingress := map[string]any{
		"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"stat_prefix": "ingress_http",
		"codec_type":  "AUTO", // HTTP/1.1, and h2c with prior knowledge
		"route_config": map[string]any{
			"name": "all",
			"virtual_hosts": []any{map[string]any{
				"name":    "all",
				"domains": []any{"*"},
				"routes": []any{map[string]any{
					"match": map[string]any{"prefix": "/"},
					// timeout 0s disables the route timeout (default 15 s).
					"route": map[string]any{"cluster": HTTPCluster, "timeout": "0s"},
				}},
			}},
		},
		"http_filters": []any{map[string]any{
			"name":         "envoy.filters.http.router",
			"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
		}},
	}
	if opts.HTTPIdleTimeout > 0 {
		ingress["common_http_protocol_options"] = map[string]any{"idle_timeout": durationJSON(opts.HTTPIdleTimeout)}
	}
	b := map[string]any{
		"node":  map[string]any{"id": "testbed", "cluster": "testbed"},
		"admin": admin,
		"static_resources": map[string]any{
			"listeners": []any{
				listener(HTTPListener, map[string]any{
					"name":         "envoy.filters.network.http_connection_manager",
					"typed_config": ingress,
				}),
				listener(TCPListener, map[string]any{
					"name": "envoy.filters.network.tcp_proxy",
					"typed_config": map[string]any{
						"@type":       "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
						"stat_prefix": "tcp",
						"cluster":     TCPCluster,
					},
				}),
			},
			"clusters": []any{
				cluster(HTTPCluster, up.HTTPAddr),
				cluster(TCPCluster, up.TCPAddr),
			},
		},
	}
	res := b["static_resources"].(map[string]any)
	for i := range opts.ExtraClusters {
		res["clusters"] = append(res["clusters"].([]any), cluster(fmt.Sprintf("%s%d", ExtraClusterPrefix, i), up.HTTPAddr))
	}
	for i := range opts.ExtraListeners {
		name := fmt.Sprintf("%s%d", ExtraListenerPrefix, i)
		res["listeners"] = append(res["listeners"].([]any), listener(name, httpManager(name)))
	}
	return b
}

// httpManager returns an http_connection_manager filter with the given
// stat_prefix that routes every request to HTTPCluster.
func httpManager(statPrefix string) map[string]any {
	return map[string]any{
		"name": "envoy.filters.network.http_connection_manager",
		"typed_config": map[string]any{
			"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
			"stat_prefix": statPrefix,
			"route_config": map[string]any{
				"name": statPrefix,
				"virtual_hosts": []any{map[string]any{
					"name":    "all",
					"domains": []any{"*"},
					"routes": []any{map[string]any{
						"match": map[string]any{"prefix": "/"},
						"route": map[string]any{"cluster": HTTPCluster},
					}},
				}},
			},
			"http_filters": []any{map[string]any{
				"name":         "envoy.filters.http.router",
				"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
			}},
		},
	}
}

// listener returns a listener on 127.0.0.1 with a kernel-chosen port whose
// name and stat_prefix are name and whose one filter chain is filter.
func listener(name string, filter map[string]any) map[string]any {
	return map[string]any{
		"name":          name,
		"stat_prefix":   name,
		"address":       socketAddress("127.0.0.1", 0),
		"filter_chains": []any{map[string]any{"filters": []any{filter}}},
	}
}

// cluster returns a static cluster with the one endpoint addr ("host:port")
// and circuit breakers high enough not to limit benchmarks.
func cluster(name, addr string) map[string]any {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	const limit = 1 << 20
	return map[string]any{
		"name":            name,
		"type":            "STATIC",
		"connect_timeout": "2s",
		"circuit_breakers": map[string]any{"thresholds": []any{map[string]any{
			"max_connections":      limit,
			"max_pending_requests": limit,
			"max_requests":         limit,
			"max_retries":          limit,
		}}},
		"load_assignment": map[string]any{
			"cluster_name": name,
			"endpoints": []any{map[string]any{
				"lb_endpoints": []any{map[string]any{
					"endpoint": map[string]any{"address": socketAddress(host, p)},
				}},
			}},
		},
	}
}

func socketAddress(host string, port int) map[string]any {
	return map[string]any{"socket_address": map[string]any{"address": host, "port_value": port}}
}

// durationJSON is d in the JSON form of a protobuf Duration ("60s", "0.250s").
func durationJSON(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

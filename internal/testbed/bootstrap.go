package testbed

import (
	"fmt"
	"net"
	"strconv"
	"time"
)

// bootstrap returns Envoy's bootstrap configuration (marshalled to JSON, which
// Envoy reads like YAML) with the given admin block; see [Envoy] for what it
// configures, plus the extra clusters and listeners opts asks for, and a
// file-based LDS at ldsPath unless it is "".
func bootstrap(admin map[string]any, up *Upstream, opts Options, ldsPath string) map[string]any {
	routes := []any{map[string]any{
		"match": map[string]any{"prefix": "/"},
		// timeout 0s disables the route timeout (default 15 s).
		"route": map[string]any{"cluster": HTTPCluster, "timeout": "0s"},
	}}
	if opts.InternalListener {
		routes = append([]any{map[string]any{
			"match": map[string]any{"prefix": ViaInternalPath},
			"route": map[string]any{"cluster": InternalCluster, "prefix_rewrite": "/", "timeout": "0s"},
		}}, routes...)
	}
	ingress := map[string]any{
		"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"stat_prefix": "ingress_http",
		"codec_type":  "AUTO", // HTTP/1.1, and h2c with prior knowledge
		"route_config": map[string]any{
			"name": "all",
			"virtual_hosts": []any{map[string]any{
				"name":    "all",
				"domains": []any{"*"},
				"routes":  routes,
			}},
		},
		"http_filters": []any{router()},
	}
	if opts.WebSocket {
		ingress["upgrade_configs"] = []any{map[string]any{"upgrade_type": "websocket"}}
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
				listener(TCPListener, tcpProxy("tcp")),
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
	if ldsPath != "" {
		b["dynamic_resources"] = map[string]any{"lds_config": map[string]any{
			"resource_api_version": "V3",
			"path_config_source":   map[string]any{"path": ldsPath},
		}}
	}
	if opts.InternalListener {
		// Istio-style: the HTTP listener routes ViaInternalPath to a cluster whose one endpoint is an
		// internal listener with its own HTTP manager; Envoy pools its connections to it.
		b["bootstrap_extensions"] = []any{map[string]any{
			"name":         "envoy.bootstrap.internal_listener",
			"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.bootstrap.internal_listener.v3.InternalListener"},
		}}
		internal := map[string]any{
			"name":              InternalListener,
			"internal_listener": map[string]any{},
			"filter_chains":     []any{map[string]any{"filters": []any{httpManager(InternalListener)}}},
		}
		res["listeners"] = append(res["listeners"].([]any), internal)
		c := cluster(InternalCluster, up.HTTPAddr)
		c["load_assignment"] = map[string]any{
			"cluster_name": InternalCluster,
			"endpoints": []any{map[string]any{"lb_endpoints": []any{map[string]any{"endpoint": map[string]any{
				"address": map[string]any{"envoy_internal_address": map[string]any{"server_listener_name": InternalListener}},
			}}}}},
		}
		res["clusters"] = append(res["clusters"].([]any), c)
	}
	if opts.SharedPrefixListener {
		l := listener(SharedPrefixListener, httpManager("ingress_http"))
		res["listeners"] = append(res["listeners"].([]any), l)
	}
	if opts.MixedListener {
		// No stat_prefix: its stats are named after its address, "listener.127.0.0.1_0" (the configured port).
		l := map[string]any{
			"name":    MixedListener,
			"address": socketAddress("127.0.0.1", 0),
			"filter_chains": []any{
				map[string]any{
					"filter_chain_match": map[string]any{"source_prefix_ranges": []any{
						map[string]any{"address_prefix": MixedTCPSource, "prefix_len": 32},
					}},
					"filters": []any{tcpProxy("mixed_tcp")},
				},
				map[string]any{"filters": []any{httpManager(MixedListener + "_http")}},
			},
		}
		res["listeners"] = append(res["listeners"].([]any), l)
	}
	if opts.ReadinessListener {
		res["listeners"] = append(res["listeners"].([]any), listener(ReadinessListener, readinessManager()))
	}
	if opts.HealthCheckedListener {
		m := httpManager(HealthCheckedListener)
		tc := m["typed_config"].(map[string]any)
		tc["http_filters"] = []any{healthCheckFilter(), router()}
		res["listeners"] = append(res["listeners"].([]any), listener(HealthCheckedListener, m))
	}
	if opts.AdminRouteListener {
		res["listeners"] = append(res["listeners"].([]any), listener(AdminRouteListener, adminRouteManager()))
		res["clusters"] = append(res["clusters"].([]any), map[string]any{
			"name":            AdminCluster,
			"type":            "STATIC",
			"connect_timeout": "1s",
			"load_assignment": map[string]any{
				"cluster_name": AdminCluster,
				"endpoints": []any{map[string]any{"lb_endpoints": []any{map[string]any{
					"endpoint": map[string]any{"address": admin["address"]},
				}}}},
			},
		})
	}
	return b
}

// adminRouteManager is an HTTP manager (stat_prefix AdminRouteManager) that passes GET ReadinessPath and
// /stats to AdminCluster: the admin answers /ready (200 while Envoy's health checks pass, 503 once they
// fail). Every other path answers 404.
func adminRouteManager() map[string]any {
	get := []any{map[string]any{"name": ":method", "string_match": map[string]any{"exact": "GET"}}}
	route := func(prefix string) map[string]any {
		return map[string]any{
			"match": map[string]any{"prefix": prefix, "headers": get},
			"route": map[string]any{"cluster": AdminCluster},
		}
	}
	return map[string]any{
		"name": "envoy.filters.network.http_connection_manager",
		"typed_config": map[string]any{
			"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
			"stat_prefix": AdminRouteManager,
			"route_config": map[string]any{
				"virtual_hosts": []any{map[string]any{
					"name":    "backend",
					"domains": []any{"*"},
					"routes":  []any{route(ReadinessPath), route("/stats")},
				}},
			},
			"http_filters": []any{router()},
		},
	}
}

// readinessManager is an HTTP manager (stat_prefix ReadinessListener) whose health_check filter answers
// ReadinessPath itself (not passed through); every other path answers 404.
func readinessManager() map[string]any {
	return map[string]any{
		"name": "envoy.filters.network.http_connection_manager",
		"typed_config": map[string]any{
			"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
			"stat_prefix": ReadinessListener,
			"route_config": map[string]any{
				"name":          ReadinessListener,
				"virtual_hosts": []any{map[string]any{"name": "all", "domains": []any{"*"}}},
			},
			"http_filters": []any{healthCheckFilter(), router()},
		},
	}
}

// healthCheckFilter is Envoy's health_check filter answering ReadinessPath itself (not passed through).
func healthCheckFilter() map[string]any {
	return map[string]any{
		"name": "envoy.filters.http.health_check",
		"typed_config": map[string]any{
			"@type":             "type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck",
			"pass_through_mode": false,
			"headers": []any{map[string]any{
				"name":         ":path",
				"string_match": map[string]any{"exact": ReadinessPath},
			}},
		},
	}
}

// tcpProxy returns a tcp_proxy filter with the given stat_prefix to TCPCluster.
func tcpProxy(statPrefix string) map[string]any {
	return map[string]any{
		"name": "envoy.filters.network.tcp_proxy",
		"typed_config": map[string]any{
			"@type":       "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
			"stat_prefix": statPrefix,
			"cluster":     TCPCluster,
		},
	}
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
			"http_filters": []any{router()},
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

// durationJSON is d in the JSON form of a protobuf Duration ("60s", "0.25s").
func durationJSON(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// router is the router HTTP filter, the last of every HTTP manager's filters.
func router() map[string]any {
	return map[string]any{
		"name":         "envoy.filters.http.router",
		"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
	}
}

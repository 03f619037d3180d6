package envoyadmin

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// ActiveFilter is the server-side filter (RE2, as Envoy's /stats?filter= takes it) that selects exactly the stats
// a drain needs: one small answer whatever the size of Envoy's configuration (Contour #6523: an unfiltered
// /stats/prometheus grew to 80 MB with 3000 routes). The gauges of work in flight (downstream_cx_active,
// downstream_rq_active, and the HTTP managers' downstream_cx_upgrades_active: WebSockets and other upgraded
// connections), and the two counters that show new traffic (listeners' downstream_cx_total, HTTP managers'
// downstream_rq_total), which the quiet period compares between polls; and, of an HTTP manager that runs
// Envoy's health_check filter, that filter's health_check.request_total (the requests it answered itself,
// the probes: no other manager has it), which the quiet period takes from downstream_rq_total on a manager
// that serves traffic too. Per listener that is one stat more than the gauges alone (and one per worker),
// per HTTP manager two (three with the health_check filter): about twice the bytes (measured by
// TestReadinessListenerConfig: 2,211 bytes against 1,075 for an Envoy with two workers, three listeners and
// three HTTP managers besides the admin's, one with the health_check filter).
//
// And per HTTP manager the three counters a drain reports the work the client side cut from
// (HTTPGauges.RequestsRxReset, RequestsTxReset and ConnectionsCutActive): three stats more per manager, 2,775
// bytes in all for the same Envoy (measured by TestReadinessListenerConfig on 1.36.2 to 1.40.0).
const ActiveFilter = `^(listener\..*\.downstream_cx_(active|total)|http\..*\.(downstream_(cx_active|cx_upgrades_active|rq_active|rq_total|rq_rx_reset|rq_tx_reset|cx_destroy_remote_active_rq)|health_check\.request_total))$`

// StatsQuery is the query of the drain's poll: ActiveFilter's stats, as JSON. It has no type= (counters and
// gauges both); no histogram matches the filter, so the answer holds none.
var StatsQuery = url.Values{"filter": {ActiveFilter}, "format": {"json"}}.Encode()

// Snapshot holds the live gauges that tell how much work Envoy has in flight, keyed by stat scope, and the
// counters that tell whether new work keeps arriving. Per-worker copies of listener stats are left out: they
// only split the listener's own total.
type Snapshot struct {
	// Listeners maps "listener.<address or stat_prefix>" to downstream_cx_active.
	Listeners map[string]int64
	// HTTP maps "http.<stat_prefix>" of each HTTP connection manager to its stats.
	HTTP map[string]HTTPGauges
	// ListenerTotals maps a listener's scope to downstream_cx_total: every connection it ever accepted. Nil
	// when the answer has none (a query for gauges only).
	ListenerTotals map[string]int64
}

// HTTPGauges are one HTTP connection manager's live gauges, and its request counter.
type HTTPGauges struct {
	Connections int64 // downstream_cx_active
	Requests    int64 // downstream_rq_active: requests and streams, upgraded ones included
	// Upgrades is downstream_cx_upgrades_active: connections upgraded to another protocol (WebSocket and
	// other upgrades), each also one of Connections and, while upgraded, one of Requests.
	Upgrades int64
	// RequestsTotal is downstream_rq_total: every request it ever received (a counter).
	RequestsTotal int64
	// HealthChecksTotal is health_check.request_total, the counter of Envoy's health_check filter: the
	// requests of RequestsTotal the filter answered itself, the probes. Envoy counts one once the filter
	// answers it: in pass_through_mode, only once health checks fail (before, it is passed on uncounted),
	// which is when the quiet period watches (checked on 1.36.2 and 1.40.0). 0 for a manager without the filter.
	HealthChecksTotal int64
	// RequestsRxReset is downstream_rq_rx_reset: requests reset while in flight, counted by Envoy's HTTP
	// manager once per request, whether the client reset the one stream (HTTP/2 RST_STREAM) or closed the
	// connection under it (HTTP/1.1, FIN or RST). Despite its name Envoy counts here every reset of a
	// downstream stream, the ones it transmits too (RequestsTxReset: an upstream reset mid-response also
	// counts one in each): checked on 1.36.2 and 1.40.0. A counter.
	RequestsRxReset int64
	// RequestsTxReset is downstream_rq_tx_reset: resets of downstream streams Envoy transmitted. A counter.
	RequestsTxReset int64
	// ConnectionsCutActive is downstream_cx_destroy_remote_active_rq: connections the peer closed while a
	// request was in flight on them (not HTTP/2 streams reset on a connection that stays open). A counter.
	ConnectionsCutActive int64
}

const (
	cxActive   = ".downstream_cx_active"
	rqActive   = ".downstream_rq_active"
	cxUpgrades = ".downstream_cx_upgrades_active"
	cxTotal    = ".downstream_cx_total"
	rqTotal    = ".downstream_rq_total"
	hcTotal    = ".health_check.request_total"
	rqRxReset  = ".downstream_rq_rx_reset"
	rqTxReset  = ".downstream_rq_tx_reset"
	cxCutRq    = ".downstream_cx_destroy_remote_active_rq"
)

// perWorker matches the scope suffix of a listener gauge's per-thread copy:
// "listener.0.0.0.0_10000.worker_1" or "listener.admin.main_thread".
var perWorker = regexp.MustCompile(`\.(worker_[0-9]+|main_thread)$`)

// ParseStats reads the JSON answer of GET /stats?format=json and keeps the stats ActiveFilter selects, of
// listeners and HTTP connection managers. Other stats are ignored, so the answer to a wider filter parses too. Envoy's shape: {"stats":[{"name":…,"value":…},…,{"histograms":…}]}.
func ParseStats(r io.Reader) (Snapshot, error) {
	var doc struct {
		Stats []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"stats"`
	}
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return Snapshot{}, fmt.Errorf("decoding stats: %w", err)
	}
	if doc.Stats == nil {
		return Snapshot{}, fmt.Errorf("decoding stats: no \"stats\" array")
	}
	s := Snapshot{Listeners: map[string]int64{}, HTTP: map[string]HTTPGauges{}}
	for _, st := range doc.Stats {
		scope, metric, ok := splitGauge(st.Name)
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(string(st.Value), 10, 64)
		if err != nil || v < 0 {
			return Snapshot{}, fmt.Errorf("decoding stats: %s: value %.40q is not a gauge", st.Name, st.Value)
		}
		switch {
		case strings.HasPrefix(scope, "listener."):
			if perWorker.MatchString(scope) {
				continue
			}
			switch metric {
			case cxActive:
				s.Listeners[scope] = v
			case cxTotal:
				if s.ListenerTotals == nil {
					s.ListenerTotals = map[string]int64{}
				}
				s.ListenerTotals[scope] = v
			}
		case strings.HasPrefix(scope, "http."):
			if metric == cxTotal {
				continue // not asked for (a wider filter's): an HTTP manager's new connections are its listener's
			}
			g := s.HTTP[scope]
			switch metric {
			case cxActive:
				g.Connections = v
			case rqActive:
				g.Requests = v
			case cxUpgrades:
				g.Upgrades = v
			case rqTotal:
				g.RequestsTotal = v
			case hcTotal:
				g.HealthChecksTotal = v
			case rqRxReset:
				g.RequestsRxReset = v
			case rqTxReset:
				g.RequestsTxReset = v
			case cxCutRq:
				g.ConnectionsCutActive = v
			}
			s.HTTP[scope] = g
		}
	}
	return s, nil
}

// splitGauge splits "listener.X.downstream_cx_active" into "listener.X" and ".downstream_cx_active" (and
// the other stats of ActiveFilter likewise).
func splitGauge(name string) (scope, metric string, ok bool) {
	for _, m := range []string{cxActive, rqActive, cxUpgrades, cxTotal, rqTotal, hcTotal, rqRxReset, rqTxReset, cxCutRq} {
		if scope, ok := strings.CutSuffix(name, m); ok && strings.Count(scope, ".") >= 1 && !strings.HasSuffix(scope, ".") {
			return scope, m, true
		}
	}
	return "", "", false
}

// ServerState is Envoy's own state as /server_info reports it.
type ServerState string

// The states Envoy reports. DRAINING follows /healthcheck/fail (and Envoy's own shutdown); a restarted
// Envoy comes back LIVE.
const (
	StateLive            ServerState = "LIVE"
	StateDraining        ServerState = "DRAINING"
	StatePreInitializing ServerState = "PRE_INITIALIZING"
	StateInitializing    ServerState = "INITIALIZING"
)

// ParseServerState reads the "state" field of GET /server_info's JSON answer.
func ParseServerState(r io.Reader) (ServerState, error) {
	var doc struct {
		State *string `json:"state"`
	}
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return "", fmt.Errorf("decoding server_info: %w", err)
	}
	if doc.State == nil || *doc.State == "" {
		return "", fmt.Errorf("decoding server_info: no \"state\" field")
	}
	return ServerState(*doc.State), nil
}

// ParseServerBootstrap reads where the answering Envoy got its bootstrap, from GET /server_info's
// command_line_options: config_path (-c) and config_yaml, as given on its command line (the same 1.36 and
// 1.40). Compared with BootstrapSource of a process's argv, it says whether that process owns this admin API.
func ParseServerBootstrap(r io.Reader) (path, inline string, err error) {
	var doc struct {
		Options *struct {
			ConfigPath string `json:"config_path"`
			ConfigYAML string `json:"config_yaml"`
		} `json:"command_line_options"`
	}
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return "", "", fmt.Errorf("decoding server_info: %w", err)
	}
	if doc.Options == nil {
		return "", "", fmt.Errorf("decoding server_info: no \"command_line_options\" field")
	}
	return doc.Options.ConfigPath, doc.Options.ConfigYAML, nil
}

package envoyadmin

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// ActiveFilter is the server-side filter (RE2, as Envoy's /stats?filter= takes it) that selects exactly the gauges
// a drain needs: one small answer whatever the size of Envoy's configuration (Contour #6523: an unfiltered
// /stats/prometheus grew to 80 MB with 3000 routes).
const ActiveFilter = `^(listener|http)\..*\.downstream_(cx|rq)_active$`

// Snapshot holds the live gauges that tell how much work Envoy has in flight, keyed by stat scope.
// Per-worker copies of listener gauges are left out: they only split the listener's own total.
type Snapshot struct {
	// Listeners maps "listener.<address or stat_prefix>" to downstream_cx_active.
	Listeners map[string]int64
	// HTTP maps "http.<stat_prefix>" of each HTTP connection manager to its gauges.
	HTTP map[string]HTTPGauges
}

// HTTPGauges are one HTTP connection manager's live gauges.
type HTTPGauges struct {
	Connections int64 // downstream_cx_active
	Requests    int64 // downstream_rq_active
}

const (
	cxActive = ".downstream_cx_active"
	rqActive = ".downstream_rq_active"
)

// perWorker matches the scope suffix of a listener gauge's per-thread copy:
// "listener.0.0.0.0_10000.worker_1" or "listener.admin.main_thread".
var perWorker = regexp.MustCompile(`\.(worker_[0-9]+|main_thread)$`)

// ParseStats reads the JSON answer of GET /stats?format=json and keeps the downstream_cx_active and
// downstream_rq_active gauges of listeners and HTTP connection managers. Other stats are ignored, so the
// answer to a wider filter parses too. Envoy's shape: {"stats":[{"name":…,"value":…},…,{"histograms":…}]}.
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
			if metric == cxActive && !perWorker.MatchString(scope) {
				s.Listeners[scope] = v
			}
		case strings.HasPrefix(scope, "http."):
			g := s.HTTP[scope]
			if metric == cxActive {
				g.Connections = v
			} else {
				g.Requests = v
			}
			s.HTTP[scope] = g
		}
	}
	return s, nil
}

// splitGauge splits "listener.X.downstream_cx_active" into "listener.X" and ".downstream_cx_active".
func splitGauge(name string) (scope, metric string, ok bool) {
	for _, m := range []string{cxActive, rqActive} {
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

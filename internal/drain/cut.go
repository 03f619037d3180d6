package drain

import "fmt"

// Cut is work in flight that the client side cut during a drain: requests Envoy's HTTP managers saw reset
// while in flight, less the resets Envoy sent itself (downstream_rq_rx_reset - downstream_rq_tx_reset: an
// HTTP/2 stream reset by the client, or an HTTP/1.1 connection closed under its request), and the
// connections closed by the peer with a request in flight (downstream_cx_destroy_remote_active_rq). A
// connection Envoy itself closes with requests in flight (overload, a timeout) resets them without a
// transmitted reset: such requests would count too. Envoy's own drain closes connections between requests
// (Connection: close, GOAWAY): test/integration's TestDrainNoCutWhenRequestsComplete counts 0 there. Envoy counts both alike whoever the peer is: a client that gave
// up, or a load balancer that killed its sessions when it marked the pod down (HAProxy's on-marked-down
// shutdown-sessions, AWS NLB's unhealthy connection termination). It cannot tell them apart, and neither can
// the drain: a cut says work was lost on the way to the client, not who cut it. Connections of a TCP proxy
// (and other non-HTTP filters) closed by their client are not counted: Envoy has no counter that tells such
// a close from the normal end of a connection.
type Cut struct {
	Requests    int64 `json:"requests"`
	Connections int64 `json:"connections"`
}

func (c Cut) zero() bool { return c.Requests == 0 && c.Connections == 0 }

// Text says what was cut, for reasons and Events: "the client side cut 3 requests in flight (closing 3
// connections under them) during the drain"; "" if nothing was.
func (c Cut) Text() string {
	if c.zero() {
		return ""
	}
	text := "the client side cut " + plural(c.Requests, "request") + " in flight"
	if c.Connections > 0 {
		text += fmt.Sprintf(" (closing %s under them)", plural(c.Connections, "connection"))
	}
	return text + " during the drain"
}

// CutCounters are one HTTP manager's counters of reset requests and cut connections (Counts.Cut).
type CutCounters struct {
	RxReset  int64 // downstream_rq_rx_reset: every reset of a downstream stream, the ones Envoy sent too
	TxReset  int64 // downstream_rq_tx_reset: the resets Envoy sent
	CxRemote int64 // downstream_cx_destroy_remote_active_rq: connections the peer closed with a request in flight
}

// cutWatch adds up the increase of the counters of Counts.Cut from its first poll (the baseline: the first
// poll after health checks failed) on. Requests cut by the client side are the resets less the ones Envoy
// sent (an upstream reset mid-response, passed on to the client, counts one in each: measured on 1.36.2 and
// 1.40.0). Envoy counts a reset it sends in both counters one after the other, which one /stats answer may
// read between: the total never goes down, so such a poll can only delay the count of a cut by a poll.
// A scope new to the watch starts from its values; a counter that fell (a listener replaced, its manager's
// stats new) starts again from its new value. Used by the drain's goroutine only.
type cutWatch struct {
	prev       map[string]CutCounters // nil before the first poll
	rx, tx, cx int64                  // the increases since the baseline
	total      Cut
}

// observe records a poll's counters and returns what the total rose by since the poll before.
func (w *cutWatch) observe(counters map[string]CutCounters) Cut {
	if w.prev != nil {
		for scope, v := range counters {
			p, ok := w.prev[scope]
			if !ok {
				continue
			}
			w.rx = addSat(w.rx, rise(p.RxReset, v.RxReset))
			w.tx = addSat(w.tx, rise(p.TxReset, v.TxReset))
			w.cx = addSat(w.cx, rise(p.CxRemote, v.CxRemote))
		}
	}
	if counters == nil {
		counters = map[string]CutCounters{}
	}
	w.prev = counters
	next := Cut{Requests: max(w.total.Requests, w.rx-w.tx), Connections: w.cx}
	added := Cut{Requests: next.Requests - w.total.Requests, Connections: next.Connections - w.total.Connections}
	w.total = next
	return added
}

// rise is how much a counter rose from p to v; 0 if it fell (it starts again from v).
func rise(p, v int64) int64 { return max(0, v-p) }

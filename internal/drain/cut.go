package drain

import "fmt"

// Cut is work in flight that the client side cut during a drain: requests Envoy's HTTP managers saw reset
// while in flight (downstream_rq_rx_reset: an HTTP/2 stream reset by the client, or an HTTP/1.1 connection
// closed under its request), and, of those, the connections closed by the peer with a request in flight
// (downstream_cx_destroy_remote_active_rq). Envoy counts both alike whoever the peer is: a client that gave
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

// cutWatch adds up the increase of the counters of Counts.Cut from its first poll (the baseline: the first
// poll after health checks failed) on. A scope new to the watch starts from its value; a counter that fell
// (a listener replaced, its manager's stats new) starts again from its new value. Used by the drain's
// goroutine only.
type cutWatch struct {
	prev  map[string]Cut // nil before the first poll
	total Cut
}

// observe records a poll's counters and returns what they rose by since the poll before.
func (w *cutWatch) observe(counters map[string]Cut) Cut {
	var added Cut
	if w.prev != nil {
		for scope, v := range counters {
			p, ok := w.prev[scope]
			if !ok {
				continue
			}
			if v.Requests > p.Requests {
				added.Requests = addSat(added.Requests, v.Requests-p.Requests)
			}
			if v.Connections > p.Connections {
				added.Connections = addSat(added.Connections, v.Connections-p.Connections)
			}
		}
	}
	if counters == nil {
		counters = map[string]Cut{}
	}
	w.prev = counters
	w.total = Cut{Requests: addSat(w.total.Requests, added.Requests), Connections: addSat(w.total.Connections, added.Connections)}
	return added
}

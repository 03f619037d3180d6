package drain

import (
	"fmt"
	"maps"
	"strings"
	"time"
)

// DefaultQuietPeriod is how long, after health checks fail, no new connection and no new request must
// arrive on the watched listeners before a drain may release (Config.QuietPeriod). Together with
// DefaultMinDuration (the floor) it was chosen so that:
//
//   - a drain with no traffic takes no longer than before the quiet period existed: the floor, 5 s, is the
//     longer of the two (measured by TestQuietPeriodDefaults on Envoy 1.36.2 and 1.40.0: 5.00-5.02 s);
//   - traffic through kube-proxy, which stops about 1 s after termination begins (measured in another
//     project's e2e: firebolt-kubernetes-operator #254), plus 3 s of quiet, still ends inside the 5 s floor:
//     a rollout behind kube-proxy is as fast as before (measured: a new connection every 100 ms until 1 s:
//     released at 5.00-5.02 s);
//   - a load balancer that keeps sending after 5 s (one with active health checks every 3 s and 2 failures
//     to mark a target down, as the issue measured with HAProxy: ~6-9 s; AWS NLB in IP mode: minutes) holds
//     the pod until it has moved, plus 3 s (measured: a new connection every 100 ms until 8 s: released at
//     10.97-11.00 s, 3 s after the last);
//   - sparse traffic (a request every 2-3 s per pod) keeps the pod held while it still arrives (measured: a
//     request every 2.5 s until 9 s: released at 10.54 s, 3 s after the last at 7.5 s);
//   - readiness probes never hold it (measured: a probe every 200 ms on the readiness listener: 5.01 s),
//     nor on a listener that also serves traffic, whose traffic does (TestQuietPeriodHealthCheckedListener:
//     probes alone 5.01 s; a request every 200 ms until 8 s, with probes throughout: 10.84-11.07 s).
//
// The trade-off: the quiet period cannot tell traffic that has moved from traffic that is merely sparse.
// A client sending less often than once per quiet period is not seen to continue: past the floor, the
// drain may release in one of its gaps while a slow load balancer still sends, and the client's next
// request fails. The floor is what protects such clients (it holds whatever arrives), so it stays 5 s; a
// longer quiet period protects sparser traffic at the cost of that much more time after the last request
// (every drain with traffic takes at least its last arrival plus the quiet period). 0 turns it off.
const DefaultQuietPeriod = 3 * time.Second

// quietWatch is one drain's view of new traffic, for the quiet period. It compares the counters of the
// watched scopes (Counts.Watched) between polls: a counter that rose means something new arrived since the
// poll before. Used by the drain's goroutine only.
type quietWatch struct {
	period  time.Duration
	failed  time.Time        // when health checks failed: the quiet is counted from there at the earliest
	last    time.Time        // the last poll that saw new traffic; failed while none has
	prev    map[string]int64 // the counters at the last poll that read them; nil before
	newCx   int64            // new connections seen since health checks failed
	newRq   int64            // new requests seen since health checks failed
	lastCx  bool             // the last new traffic included a connection
	lastRq  bool             // the last new traffic included a request
	watched bool             // the last poll had counters to watch (the listener configuration was read)
	basis   string           // why nothing is watched, when watched is false
	polled  bool             // some poll answered since health checks failed
	ended   string           // why the quiet phase ended; "" while it runs
}

func newQuietWatch(period time.Duration, failed time.Time) *quietWatch {
	return &quietWatch{period: period, failed: failed, last: failed}
}

// observe records a poll's watched counters, read at now. basis is the count's basis (why Watched is nil).
// rising are the scopes read at their highest value so far (Counts.Rising): one that falls keeps its high.
func (q *quietWatch) observe(now time.Time, watched map[string]int64, rising map[string]bool, basis string) (newCx, newRq int64) {
	q.polled = true
	q.watched, q.basis = watched != nil, basis
	if watched == nil {
		return 0, 0
	}
	if q.prev != nil {
		for scope, v := range watched {
			// A scope new to the watch (a listener added, a group newly watched) starts from its value;
			// a counter that fell (a listener replaced) starts again from its new value.
			p, ok := q.prev[scope]
			if !ok || v <= p {
				continue
			}
			if strings.HasPrefix(scope, "http.") {
				newRq = addSat(newRq, v-p)
			} else {
				newCx = addSat(newCx, v-p)
			}
		}
	}
	next, cloned := watched, false
	for scope := range rising {
		if p, ok := q.prev[scope]; ok && watched[scope] < p {
			if !cloned {
				next, cloned = maps.Clone(watched), true
			}
			next[scope] = p
		}
	}
	q.prev = next
	if newCx > 0 || newRq > 0 {
		q.last, q.lastCx, q.lastRq = now, newCx > 0, newRq > 0
		q.newCx, q.newRq = addSat(q.newCx, newCx), addSat(q.newRq, newRq)
	}
	return newCx, newRq
}

// met reports whether the quiet period has passed at now. Without counters to watch (no listener
// configuration), it is met at once: probes could not be told from traffic.
func (q *quietWatch) met(now time.Time) bool {
	return q.polled && (!q.watched || now.Sub(q.last) >= q.period)
}

// until is when the quiet period ends if nothing new arrives.
func (q *quietWatch) until() time.Time { return q.last.Add(q.period) }

// what names the kinds of the last new traffic: "connection", "request", "connection or request".
func (q *quietWatch) what() string {
	switch {
	case q.lastCx && q.lastRq, !q.lastCx && !q.lastRq:
		return "connection or request"
	case q.lastCx:
		return "connection"
	}
	return "request"
}

// reason says why the quiet phase ends at now: "no new connection for 3s, 7.2s after health checks failed".
func (q *quietWatch) reason(now time.Time) string {
	if !q.watched {
		return "quiet period not applied: new traffic cannot be told from health checks without the listener configuration (" + q.basis + ")"
	}
	after := now.Sub(q.failed).Round(time.Millisecond)
	if q.newCx == 0 && q.newRq == 0 {
		return fmt.Sprintf("no new connection or request for %s, %s after health checks failed", q.period, after)
	}
	return fmt.Sprintf("no new %s for %s, %s after health checks failed (%s and %s since they failed)",
		q.what(), q.period, after, plural(q.newCx, "new connection"), plural(q.newRq, "new request"))
}

// lastText says what the last new traffic was and when: "last new request 0.2s before, 1234 new
// connections and 5678 new requests since health checks failed".
func (q *quietWatch) lastText(now time.Time) string {
	if !q.polled {
		return "not watched: no poll answered"
	}
	return fmt.Sprintf("last new %s %s before, %s and %s since health checks failed", q.what(),
		now.Sub(q.last).Round(time.Millisecond), plural(q.newCx, "new connection"), plural(q.newRq, "new request"))
}

// status is the quiet period as /status shows it, at now.
func (q *quietWatch) status(now time.Time) *Quiet {
	s := &Quiet{Period: Seconds(q.period), NewConnections: q.newCx, NewRequests: q.newRq, Watched: q.watched, Ended: q.ended}
	if q.watched {
		s.QuietFor = Seconds(now.Sub(q.last))
	}
	if q.newCx > 0 || q.newRq > 0 {
		s.LastNew = new(q.last)
	}
	return s
}

// Quiet is the quiet period of a drain in /status.
type Quiet struct {
	Period         Seconds    `json:"period_seconds"`
	NewConnections int64      `json:"new_connections"` // seen on watched listeners since health checks failed
	NewRequests    int64      `json:"new_requests"`    // seen by watched HTTP managers since health checks failed
	LastNew        *time.Time `json:"last_new,omitempty"`
	QuietFor       Seconds    `json:"quiet_seconds"` // at the last poll: time since the last new traffic, or since health checks failed
	Watched        bool       `json:"watched"`       // false without the listener configuration: nothing is watched
	Ended          string     `json:"ended,omitempty"`
}

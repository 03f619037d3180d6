package drain

import (
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"
)

// The adaptive quiet period (Config.AdaptiveQuiet, the command line's default, --quiet-period=auto): past
// the floor, the drain releases once the silence since the last new connection or request is conclusive for
// the traffic seen since health checks failed. The silence needed is the longest of
//
//   - AdaptiveQuietMin, 0.5 s: a dense source that stops (a pod receiving hundreds of requests a second,
//     whose load balancer has moved) is released about half a second after its last arrival, where a fixed
//     3 s cost 2-3 s more than the physical limit (bench/results/SWEEP.md; the goal there is 1 s, which the
//     poll that sees the silence and Envoy's exit must fit in too);
//   - quietGapFactor (2) times the longest silence seen to end, between two polls that saw arrivals with at
//     least one poll between that saw none (or from health checks failing to the first arrival): a source
//     that was silent that long and still sent is not taken to have stopped after the same silence; this
//     is what holds a bursty source;
//   - the silence that a source still sending at the rate seen, for another 30 s, would show with a chance
//     of 5% at most (arrivals at random, a Poisson process of rate r: about r·30s·e^(-r·s) silences of s
//     or more in 30 s; s = ln(600·r)/r). Not a bound per gap: a source sending 3/s shows a 1 s silence once
//     in 20 gaps, several times a minute. The rate is taken low, (n-3)/t for n arrivals by the last one at t
//     after health checks failed (a margin for few arrivals): three arrivals or fewer cannot tell a stopped
//     source from a sparse one and need AdaptiveQuietMax;
//
// and never longer than AdaptiveQuietMax, 10 s: twice the gap of a source sending every 5 s (0.2/s), the
// sparsest the rule holds between two arrivals without fail once one arrival has been seen (with the 5 s
// floor, one every 5 s may show none inside it, at some phases: the first just before health checks
// fail, the next just after the floor); a sparser one is held through the floor and up to 10 s after each
// arrival seen. Arrivals are counted from the counters' rises (the larger of new connections and new
// requests in a poll), at poll resolution (every 25 ms or so past the floor, every --check-interval
// during it). The cost is where it belongs: traffic that stops after being sparse holds the pod up to
// 10 s after its last arrival, a drain with no traffic is released at the floor, a busy pod about half a
// second after its traffic stops (about 1 s at 10/s, 2.5 s at 3/s, 6.4 s at 1/s, the upper bound below
// about 0.6/s). The floor still protects what the rule cannot see: a source sending less than
// once per floor, or that stops after a short burst inside it (it looks like traffic that has moved, as
// kube-proxy's does about 1 s after termination begins).
//
// Measured on the real Envoy 1.36.2 to 1.40.0 with the 5 s floor (TestQuietPeriodDefaults, a new connection
// per request): no traffic, and traffic every 100 ms until 1 s: released at 5.08-5.55 s; every 100 ms until
// 8 s: 8.91-9.07 s, 0.95-1.03 s after the last (a fixed 3 s: 10.94-11.50 s); every 2.5 s until 9 s:
// 17.57-17.74 s, 10 s after the last; every 5 s from 1 s until 22 s: 31.11-31.34 s, never between two (a
// fixed 3 s: 8.05-8.13 s, between two, TestQuietPeriodFixed); readiness probes every 200 ms: 5.08-5.44 s.
//
// A fixed quiet period (Config.QuietPeriod, --quiet-period=3s) turns the rule off and waits that silence
// whatever the traffic, as before the rule existed; 0 (and no AdaptiveQuiet) turns the quiet period off.
const (
	AdaptiveQuietMin = 500 * time.Millisecond
	AdaptiveQuietMax = 10 * time.Second
	quietGapFactor   = 2
	quietRateMargin  = 3   // arrivals taken off the count for the rate: few arrivals say little about it
	quietHorizonOdds = 600 // 30 s (the horizon) / 5% (the chance): s = ln(600·r)/r
)

// quietWatch is one drain's view of new traffic, for the quiet period. It compares the counters of the
// watched scopes (Counts.Watched) between polls: a counter that rose means something new arrived since the
// poll before. Used by the drain's goroutine only.
type quietWatch struct {
	period   time.Duration    // the fixed silence; 0 with adaptive
	adaptive bool             // the silence needed is read from the traffic (see AdaptiveQuietMin)
	failed   time.Time        // when health checks failed: the quiet is counted from there at the earliest
	last     time.Time        // the last poll that saw new traffic; failed while none has
	prev     map[string]int64 // the counters at the last poll that read them; nil before
	newCx    int64            // new connections seen since health checks failed
	newRq    int64            // new requests seen since health checks failed
	arrivals int64            // the sum, poll by poll, of the larger of new connections and new requests
	longest  time.Duration    // the longest silence seen to end (see AdaptiveQuietMin)
	empty    bool             // a poll since the last one that saw new traffic saw none
	lastCx   bool             // the last new traffic included a connection
	lastRq   bool             // the last new traffic included a request
	watched  bool             // the last poll had counters to watch (the listener configuration was read)
	basis    string           // why nothing is watched, when watched is false
	polled   bool             // some poll answered since health checks failed
	ended    string           // why the quiet phase ended; "" while it runs
}

// newQuietWatch watches for a fixed silence of period, or, with adaptive, for the silence the traffic needs.
func newQuietWatch(period time.Duration, adaptive bool, failed time.Time) *quietWatch {
	return &quietWatch{period: period, adaptive: adaptive, failed: failed, last: failed}
}

// observe records a poll's watched counters, read at now. basis is the count's basis (why Watched is nil).
// rising are the scopes read at their highest value so far (Counts.Rising): one that falls keeps its high.
func (q *quietWatch) observe(now time.Time, watched map[string]int64, rising map[string]bool, basis string) (newCx, newRq int64) {
	q.polled = true
	q.watched, q.basis = watched != nil, basis
	if watched == nil {
		return 0, 0
	}
	baseline := q.prev == nil
	if !baseline {
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
	switch {
	case newCx > 0 || newRq > 0:
		if q.empty {
			// A silence the polls saw, ended by an arrival: as long as the quiet clock ran before it.
			q.longest = max(q.longest, now.Sub(q.last))
		}
		q.last, q.lastCx, q.lastRq, q.empty = now, newCx > 0, newRq > 0, false
		q.newCx, q.newRq = addSat(q.newCx, newCx), addSat(q.newRq, newRq)
		q.arrivals = addSat(q.arrivals, max(newCx, newRq))
	case !baseline:
		q.empty = true
	}
	return newCx, newRq
}

// needed is the silence needed since the last new traffic, with why (for the adaptive rule): the fixed
// period, or the adaptive rule's figure for the traffic seen so far (see AdaptiveQuietMin).
func (q *quietWatch) needed() (time.Duration, string) {
	if !q.adaptive {
		return q.period, ""
	}
	if q.arrivals == 0 {
		return AdaptiveQuietMin, "the lower bound, no new traffic seen"
	}
	if q.arrivals <= quietRateMargin {
		return AdaptiveQuietMax, fmt.Sprintf("the upper bound: %s, too few to tell a source that stopped from a sparse one",
			plural(q.arrivals, "arrival"))
	}
	// A source still sending at rate r for 30 s more shows about r·30s·e^(-r·s) silences of s or more:
	// 5% at most once s ≥ ln(600·r)/r. r is taken low: (n-3)/t.
	var byRate time.Duration
	if t := q.last.Sub(q.failed).Seconds(); t > 0 {
		r := float64(q.arrivals-quietRateMargin) / t
		byRate = time.Duration(math.Log(max(quietHorizonOdds*r, 1)) / r * float64(time.Second))
	}
	byGap := quietGapFactor * q.longest
	d, why := AdaptiveQuietMin, "the lower bound"
	if byRate > d {
		d, why = byRate, "a silence a source still sending at the rate seen shows in 30 s with a chance of 5% at most"
	}
	if byGap > d {
		d, why = byGap, fmt.Sprintf("%d × the longest silence that ended, %s", quietGapFactor, q.longest.Round(time.Millisecond))
	}
	if d > AdaptiveQuietMax {
		d, why = AdaptiveQuietMax, "the upper bound"
	}
	return d, why
}

// met reports whether the quiet period has passed at now. Without counters to watch (no listener
// configuration), it is met at once: probes could not be told from traffic.
func (q *quietWatch) met(now time.Time) bool {
	need, _ := q.needed()
	return q.polled && (!q.watched || now.Sub(q.last) >= need)
}

// until is when the quiet period ends if nothing new arrives.
func (q *quietWatch) until() time.Time {
	need, _ := q.needed()
	return q.last.Add(need)
}

// rate is the arrivals per second from health checks failing to the last new traffic.
func (q *quietWatch) rate() float64 {
	t := q.last.Sub(q.failed)
	if q.arrivals == 0 || t <= 0 {
		return 0
	}
	return float64(q.arrivals) / t.Seconds()
}

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

// reason says why the quiet phase ends at now: "no new connection for 3s, 7.2s after health checks failed";
// with the adaptive rule, "41 arrivals/s until 5.9s after health checks failed, then 1s of silence (...)".
func (q *quietWatch) reason(now time.Time) string {
	if !q.watched {
		return "quiet period not applied: new traffic cannot be told from health checks without the listener configuration (" + q.basis + ")"
	}
	after := now.Sub(q.failed).Round(time.Millisecond)
	if q.adaptive {
		need, why := q.needed()
		if q.arrivals == 0 {
			return fmt.Sprintf("no new connection or request for %s after health checks failed (adaptive quiet period: %s needed, %s)", after, need, why)
		}
		return fmt.Sprintf("%s arrivals/s until %s after health checks failed, then %s of silence (adaptive quiet period: %s needed, %s; %s and %s since they failed)",
			rateText(q.rate()), q.last.Sub(q.failed).Round(time.Millisecond), now.Sub(q.last).Round(time.Millisecond),
			need.Round(time.Millisecond), why, plural(q.newCx, "new connection"), plural(q.newRq, "new request"))
	}
	if q.newCx == 0 && q.newRq == 0 {
		return fmt.Sprintf("no new connection or request for %s, %s after health checks failed", q.period, after)
	}
	return fmt.Sprintf("no new %s for %s, %s after health checks failed (%s and %s since they failed)",
		q.what(), q.period, after, plural(q.newCx, "new connection"), plural(q.newRq, "new request"))
}

// rateText writes arrivals per second with two significant digits at most: "41", "2.5", "0.2", "0.05".
func rateText(r float64) string {
	switch {
	case r >= 10:
		return strconv.FormatFloat(r, 'f', 0, 64)
	case r >= 0.1:
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return strconv.FormatFloat(r, 'f', 2, 64)
}

// lastText says what the last new traffic was and when: "last new request 0.2s before, 1234 new
// connections and 5678 new requests since health checks failed"; with the adaptive rule, also the rate
// and the silence it needed.
func (q *quietWatch) lastText(now time.Time) string {
	if !q.polled {
		return "not watched: no poll answered"
	}
	text := fmt.Sprintf("last new %s %s before, %s and %s since health checks failed", q.what(),
		now.Sub(q.last).Round(time.Millisecond), plural(q.newCx, "new connection"), plural(q.newRq, "new request"))
	if q.adaptive {
		need, why := q.needed()
		text += fmt.Sprintf(", %s arrivals/s until %s after they failed; adaptive quiet period: %s of silence needed, %s",
			rateText(q.rate()), q.last.Sub(q.failed).Round(time.Millisecond), need.Round(time.Millisecond), why)
	}
	return text
}

// status is the quiet period as /status shows it, at now.
func (q *quietWatch) status(now time.Time) *Quiet {
	need, _ := q.needed()
	s := &Quiet{Period: Seconds(need), Adaptive: q.adaptive, NewConnections: q.newCx, NewRequests: q.newRq,
		Watched: q.watched, Ended: q.ended}
	if q.watched {
		s.QuietFor = Seconds(now.Sub(q.last))
	}
	if q.newCx > 0 || q.newRq > 0 {
		s.LastNew = new(q.last)
	}
	if q.adaptive {
		s.Rate = new(math.Round(q.rate()*1000) / 1000)
		s.LongestSilence = new(Seconds(q.longest))
	}
	return s
}

// Quiet is the quiet period of a drain in /status.
type Quiet struct {
	// Period is the silence needed since the last new traffic: --quiet-period, or the adaptive rule's
	// figure for the traffic seen so far.
	Period         Seconds `json:"period_seconds"`
	Adaptive       bool    `json:"adaptive"`        // the silence needed is read from the traffic (--quiet-period=auto)
	NewConnections int64   `json:"new_connections"` // seen on watched listeners since health checks failed
	NewRequests    int64   `json:"new_requests"`    // seen by watched HTTP managers since health checks failed
	// Rate is the arrivals per second from health checks failing to the last new traffic (adaptive only).
	Rate *float64 `json:"arrivals_per_second,omitempty"`
	// LongestSilence is the longest silence seen to end by new traffic (adaptive only).
	LongestSilence *Seconds   `json:"longest_silence_seconds,omitempty"`
	LastNew        *time.Time `json:"last_new,omitempty"`
	QuietFor       Seconds    `json:"quiet_seconds"` // at the last poll: time since the last new traffic, or since health checks failed
	Watched        bool       `json:"watched"`       // false without the listener configuration: nothing is watched
	Ended          string     `json:"ended,omitempty"`
}

package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// Phase is where a drain is.
type Phase string

const (
	PhaseIdle             Phase = "idle"              // no drain has started
	PhaseDelay            Phase = "delay"             // waiting --drain-delay, Envoy serving normally
	PhaseFailHealthChecks Phase = "fail_healthchecks" // asking Envoy to fail its health checks
	PhaseMinDuration      Phase = "min_duration"      // health checks failing, still accepting, not releasing yet
	PhaseQuiet            Phase = "quiet"             // past the floor, holding until no new traffic for the quiet period
	PhaseWaiting          Phase = "waiting"           // polling until the work in flight is at the threshold
	PhaseReleased         Phase = "released"          // finished: `outcome` says how
)

// Phases lists every phase, for metrics.
var Phases = []Phase{PhaseIdle, PhaseDelay, PhaseFailHealthChecks, PhaseMinDuration, PhaseQuiet, PhaseWaiting, PhaseReleased}

// Outcome is how a drain ended.
type Outcome string

const (
	OutcomeDrained       Outcome = "drained"       // the count fell to the threshold
	OutcomeTimeout       Outcome = "timeout"       // the deadline came first
	OutcomeEnvoyGone     Outcome = "envoy_gone"    // Envoy exited, or was shown not to be running (evidence.go says how)
	OutcomeError         Outcome = "error"         // Envoy could not be asked to drain before the deadline
	OutcomeCanceled      Outcome = "canceled"      // the engine was stopped
	OutcomeMisconfigured Outcome = "misconfigured" // the admin address refused while Envoy ran: a configuration error
)

// Outcomes lists every outcome, for metrics.
var Outcomes = []Outcome{OutcomeDrained, OutcomeTimeout, OutcomeEnvoyGone, OutcomeError, OutcomeCanceled, OutcomeMisconfigured}

// Result is a finished drain.
type Result struct {
	Outcome  Outcome
	Reason   string        // one line for humans: what happened, with counts and timing
	Open     OpenCount     // the last count read; Unknown if none was read
	Duration time.Duration // from trigger to release
	Phases   []PhaseEnd    // why each phase ended, in order
	// Cut is the work in flight the client side cut from the first poll after health checks failed to the
	// release (see Cut: a client giving up and a load balancer killing sessions look alike).
	Cut Cut
}

// PhaseEnd says when and why a phase of a drain ended.
type PhaseEnd struct {
	Phase   Phase   `json:"phase"`
	Elapsed Seconds `json:"elapsed_seconds"` // since the trigger
	Cause   Cause   `json:"cause"`
	Reason  string  `json:"reason"` // for humans: "no new connection for 3s, 7.2s after health checks failed"
}

// Cause is why a phase ended, in a word (a metric label).
type Cause string

const (
	CauseElapsed       Cause = "elapsed"       // its time passed (the delay, the floor)
	CauseDone          Cause = "done"          // its step was done (health checks failing)
	CauseQuiet         Cause = "quiet"         // no new traffic for the quiet period
	CauseDrained       Cause = "drained"       // the work in flight fell to the threshold
	CauseDeadline      Cause = "deadline"      // the drain's deadline came first
	CauseEnvoyGone     Cause = "envoy_gone"    // Envoy exited
	CauseError         Cause = "error"         // Envoy could not be asked to drain
	CauseCanceled      Cause = "canceled"      // the engine was stopped
	CauseMisconfigured Cause = "misconfigured" // the deadline came while the refusing admin address was shown wrong
)

// Causes lists every cause, for metrics.
var Causes = []Cause{CauseElapsed, CauseDone, CauseQuiet, CauseDrained, CauseDeadline, CauseEnvoyGone, CauseError, CauseCanceled, CauseMisconfigured}

// OpenCount is the work in flight as --count counts it, or Unknown before Envoy's stats were read.
// It encodes to JSON as a number, or null when unknown.
type OpenCount int64

// Unknown is the OpenCount of a drain that has not read Envoy's stats (yet).
const Unknown OpenCount = -1

// Known reports whether the count was read.
func (n OpenCount) Known() bool { return n >= 0 }

// MarshalJSON writes the count, or null when it is unknown.
func (n OpenCount) MarshalJSON() ([]byte, error) {
	return n.MarshalText()
}

// MarshalText writes the count, or null when it is unknown: slog's text format then says what its JSON format
// says (open=null, not open=-1).
func (n OpenCount) MarshalText() ([]byte, error) {
	if !n.Known() {
		return []byte("null"), nil
	}
	return strconv.AppendInt(nil, int64(n), 10), nil
}

// OK reports whether the drain reached its goal (drained, or Envoy already gone).
func (r Result) OK() bool { return r.Outcome == OutcomeDrained || r.Outcome == OutcomeEnvoyGone }

// Seconds is a duration that encodes to JSON as seconds.
type Seconds time.Duration

// MarshalJSON writes the duration in seconds, with millisecond precision.
func (s Seconds) MarshalJSON() ([]byte, error) {
	// Whole milliseconds divided once: Duration.Seconds adds the fraction separately (1.2349999999999999).
	ms := time.Duration(s).Round(time.Millisecond) / time.Millisecond
	return strconv.AppendFloat(nil, float64(ms)/1000, 'f', -1, 64), nil
}

// Status is a snapshot of the current or last drain, as GET /status shows it.
type Status struct {
	Phase     Phase        `json:"state"`
	Open      OpenCount    `json:"open"` // what --count counts; null before the first poll
	Listeners []ScopeCount `json:"listeners"`
	Excluded  []string     `json:"excluded,omitempty"`
	Groups    []Group      `json:"groups"`              // how the last poll was counted, group by group ([] before it)
	InFlight  *Kinds       `json:"in_flight,omitempty"` // the last poll's work in flight by kind
	// HealthChecksFailed is when Envoy started failing its health checks; the floor and the quiet period
	// count from there.
	HealthChecksFailed *time.Time `json:"health_checks_failed,omitempty"`
	Quiet              *Quiet     `json:"quiet,omitempty"` // the quiet period's view of new traffic; nil when it is off
	// CutByClient is the work in flight the client side cut since the first poll after health checks
	// failed, on the counted HTTP managers (see Cut); nil before that poll.
	CutByClient *Cut       `json:"cut_by_client,omitempty"`
	Phases      []PhaseEnd `json:"phases,omitempty"`      // the phases ended so far, and why
	CountBasis  string     `json:"count_basis,omitempty"` // "listener_config" or "fallback: <why>"
	Started     *time.Time `json:"started,omitempty"`
	Deadline    *time.Time `json:"deadline,omitempty"`
	Elapsed     Seconds    `json:"elapsed_seconds"`
	Outcome     Outcome    `json:"outcome,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	EnvoyState  string     `json:"envoy_state,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	// Misconfigured says why Envoy's admin address is wrong, once the drain has found it (see evidence.go).
	Misconfigured string `json:"misconfigured,omitempty"`
	Polls         int    `json:"polls"`
	// Set while Envoy's admin API, having answered, fails every poll (a wedged or stopped Envoy): when its
	// last good answer came. Open is then that answer's count, as old as this.
	AdminStalledSince *time.Time `json:"admin_unanswered_since,omitempty"`
	// Who started this drain, how many triggers joined it since, and a resume after it (see Engine.Resume).
	TriggeredBy *Caller  `json:"triggered_by,omitempty"`
	Joined      int64    `json:"joined"`
	Resumed     *Resumed `json:"resumed,omitempty"`
}

// drain is one drain, written as the plain sequence it is: the delay, health checks failed, then polls of
// Envoy's stats through the floor, the quiet period and the wait for the work in flight (run's methods below).
func (e *Engine) drain(parent context.Context, d *Drain) Result {
	r := e.newRun(parent, d)
	defer r.cancel()

	// 1. Keep serving for the delay: endpoints and load balancers are still being told.
	if err := e.wait(r.ctx, r.cfg.Delay); err != nil {
		if errors.Is(err, errEnvoyExited) {
			return r.gone()
		}
		return r.finish(OutcomeTimeout, "deadline %s reached during the drain delay", r.cfg.Timeout)
	}
	r.ended(CauseElapsed, fmt.Sprintf("drain delay %s passed", r.cfg.Delay))

	// 2. Fail health checks, retried: nothing drains until Envoy has been told.
	if res, ok := r.failHealthChecks(); !ok {
		return res
	}

	// 3 and 4. Keep accepting for the floor and the quiet period, then release once the work in flight is done.
	r.startPolls()
	for {
		polled := time.Now()
		err := r.poll(polled)
		if errors.Is(err, envoyadmin.ErrUnreachable) {
			// Envoy answered /healthcheck/fail: an admin API that now refuses connections means Envoy is gone.
			return r.gone()
		}
		now := time.Now()
		r.advance(now, err)
		if r.st.Phase == PhaseWaiting && err == nil && int64(r.st.Open) <= r.cfg.Threshold {
			return r.finish(OutcomeDrained, "%s after %s", openText(r.st.Open), since(d.started))
		}
		if err := e.wait(r.ctx, r.nextPoll(now, polled, err)); err != nil {
			if errors.Is(err, errEnvoyExited) {
				return r.gone()
			}
			return r.deadline()
		}
	}
}

// run is one drain's state, owned by the goroutine that runs it (Engine.drain): its Status, log and watches.
type run struct {
	e        *Engine
	d        *Drain
	cfg      Config
	parent   context.Context // the engine's: its end cancels the drain
	ctx      context.Context // parent, bounded by the drain's deadline
	cancel   context.CancelFunc
	st       Status
	log      *slog.Logger
	cut      cutWatch
	topo     *topologyReader
	stall    adminStall
	quiet    *quietWatch // nil without a quiet period
	settled  time.Time   // when the floor ends
	lastPoll time.Duration
}

func (e *Engine) newRun(parent context.Context, d *Drain) *run {
	cfg := e.cfg
	ctx, cancel := context.WithDeadline(parent, d.started.Add(cfg.Timeout))
	r := &run{e: e, d: d, cfg: cfg, parent: parent, ctx: ctx, cancel: cancel, st: *e.status.Load(),
		log: e.log.With("drain_timeout", cfg.Timeout.String(), "count", string(cfg.Mode))}
	r.log.Info("drain started", "drain_delay", cfg.Delay.String(), "min_drain_duration", cfg.MinDuration.String(),
		"quiet_period", quietText(cfg), "check_interval", cfg.Interval.String(), "min_open_connections", cfg.Threshold)
	return r
}

// ended records why the current phase ended: in Status, the log and the metrics.
func (r *run) ended(cause Cause, reason string) {
	pe := PhaseEnd{Phase: r.st.Phase, Elapsed: Seconds(time.Since(r.d.started)), Cause: cause, Reason: reason}
	r.st.Phases = append(slicesClip(r.st.Phases), pe)
	r.e.metrics.phaseEnded(pe)
	r.log.Info("drain phase ended", "phase", string(pe.Phase), "cause", string(cause), "reason", reason,
		"elapsed", time.Duration(pe.Elapsed).Round(time.Millisecond).String())
}

// finish ends the drain with an outcome and its reason.
func (r *run) finish(o Outcome, format string, args ...any) Result {
	res := Result{Outcome: o, Open: r.st.Open, Duration: time.Since(r.d.started), Reason: fmt.Sprintf(format, args...), Cut: r.cut.total}
	if r.parent.Err() != nil && o != OutcomeDrained && o != OutcomeEnvoyGone {
		// The engine was stopped: whatever the step was waiting for, say who stopped it.
		res.Outcome = OutcomeCanceled
		res.Reason = fmt.Sprintf("canceled by %s after %s with %s", cancelCause(r.parent), since(r.d.started), openText(r.st.Open))
	}
	if text := res.Cut.Text(); text != "" {
		// "0 in flight" alone would hide them: they left the count without being answered.
		res.Reason += "; " + text
	}
	cause := map[Outcome]Cause{OutcomeDrained: CauseDrained, OutcomeTimeout: CauseDeadline, OutcomeEnvoyGone: CauseEnvoyGone,
		OutcomeError: CauseError, OutcomeCanceled: CauseCanceled, OutcomeMisconfigured: CauseMisconfigured}[res.Outcome]
	r.ended(cause, res.Reason)
	res.Phases = r.st.Phases
	r.st.Phase, r.st.Outcome, r.st.Reason, r.st.Elapsed = PhaseReleased, res.Outcome, res.Reason, Seconds(res.Duration)
	r.e.publish(new(r.st))
	level := r.log.Info
	if !res.OK() {
		level = r.log.Warn
	}
	level("drain finished", "outcome", string(res.Outcome), "open", res.Open, "duration", res.Duration.Round(time.Millisecond).String(),
		"polls", r.st.Polls, "reason", res.Reason)
	return res
}

// gone ends the drain because Envoy exited.
func (r *run) gone() Result {
	return r.finish(OutcomeEnvoyGone, "envoy exited after %s, %s", since(r.d.started), openText(r.st.Open))
}

// failHealthChecks is step 2: it returns false with the drain's result if the drain ends there.
func (r *run) failHealthChecks() (Result, bool) {
	r.st.Phase = PhaseFailHealthChecks
	r.e.publish(new(r.st))
	if err := r.e.failHealthChecks(r.ctx, r.d, &r.st); err != nil {
		var refused *refusedError
		var wrong *misconfiguredError
		switch {
		case errors.Is(err, errEnvoyExited):
			return r.gone(), false
		case errors.As(err, &refused):
			return r.finish(OutcomeEnvoyGone, "envoy is not running: its admin API refused every connection for %s (%d attempts) and %s: %s",
				refused.For.Round(time.Millisecond), refused.Attempts, refused.Evidence, r.st.LastError), false
		case errors.As(err, &wrong):
			return r.finish(OutcomeMisconfigured, "deadline %s reached: %s", r.cfg.Timeout, wrong.reason(r.st.LastError)), false
		}
		return r.finish(OutcomeError, "could not fail envoy's health checks before the deadline %s: %s", r.cfg.Timeout, r.st.LastError), false
	}
	failed := time.Now()
	r.log.Info("envoy health checks failing", "elapsed", since(r.d.started))
	r.st.HealthChecksFailed = new(failed)
	r.ended(CauseDone, "envoy fails its health checks "+since(r.d.started)+" after the trigger")
	if r.cfg.ListenerDrain != ListenerDrainNone {
		if err := r.e.admin.DrainListeners(r.ctx, r.cfg.ListenerDrain == ListenerDrainInbound); err != nil {
			// Not fatal: health checks already fail and connections already drain-close.
			r.log.Warn("could not start envoy's listener drain", "err", err)
			r.st.LastError = err.Error()
		}
	}
	return Result{}, true
}

// startPolls begins steps 3 and 4: the floor from when health checks failed, the quiet period's watch.
func (r *run) startPolls() {
	failed := *r.st.HealthChecksFailed
	r.topo = newTopologyReader(r.e.admin, r.log)
	r.settled = failed.Add(r.cfg.MinDuration)
	if r.cfg.QuietPeriod > 0 || r.cfg.AdaptiveQuiet {
		r.quiet = newQuietWatch(r.cfg.QuietPeriod, r.cfg.AdaptiveQuiet, failed)
	}
	r.st.Phase = PhaseMinDuration
	r.e.publish(new(r.st))
}

// poll reads Envoy's stats once, begun at polled, into the Status: the work in flight, what the client side
// cut, the quiet period's new traffic. It returns the poll's error.
func (r *run) poll(polled time.Time) error {
	snap, err := r.e.admin.Stats(r.ctx)
	r.lastPoll = time.Since(polled)
	r.st.Polls++
	switch {
	case err == nil:
		r.stall.answered(r.log, polled, r.st.Open)
		r.st.AdminStalledSince = nil
		c := r.topo.count(r.ctx, snap, r.cfg.Mode, r.cfg.Selector)
		if OpenCount(c.Open) != r.st.Open {
			r.log.Debug("work in flight", "open", c.Open, "elapsed", since(r.d.started))
		}
		r.st.Open, r.st.Listeners, r.st.Excluded, r.st.LastError = OpenCount(c.Open), c.Scopes, c.Excluded, ""
		r.st.Groups, r.st.CountBasis, r.st.InFlight = c.Groups, c.Basis, new(c.Kinds)
		if added := r.cut.observe(c.Cut); !added.zero() {
			r.e.metrics.cutByClient(added)
			r.log.Warn("the client side cut work in flight", "requests", added.Requests, "connections", added.Connections,
				"elapsed", since(r.d.started))
		}
		r.st.CutByClient = new(r.cut.total)
		if r.quiet != nil && r.quiet.ended == "" {
			if cx, rq := r.quiet.observe(time.Now(), c.Watched, c.Rising, c.Basis); cx > 0 || rq > 0 {
				r.e.metrics.newTraffic(cx, rq)
				r.log.Debug("new traffic", "connections", cx, "requests", rq, "elapsed", since(r.d.started))
			}
		}
	case errors.Is(err, envoyadmin.ErrUnreachable):
		r.st.LastError = err.Error()
	default:
		r.st.LastError = err.Error()
		if r.ctx.Err() == nil { // a poll cut short by the deadline or a cancel is no failure of Envoy's
			r.st.AdminStalledSince = r.stall.failed(r.log, err, r.st.Open)
		}
	}
	return err
}

// advance moves the phase on at now, after a poll that returned err: the floor ends at settled, then the
// quiet period once it is met; it publishes the Status.
func (r *run) advance(now time.Time, err error) {
	if r.st.Phase == PhaseMinDuration && !now.Before(r.settled) {
		r.ended(CauseElapsed, fmt.Sprintf("minimum %s after health checks failed", r.cfg.MinDuration))
		r.st.Phase = PhaseWaiting
		if r.quiet != nil {
			r.st.Phase = PhaseQuiet
		}
	}
	if r.st.Phase == PhaseQuiet && err == nil && r.quiet.met(now) {
		r.quiet.ended = r.quiet.reason(now)
		if !r.quiet.watched {
			r.log.Warn("quiet period not applied", "reason", r.quiet.ended)
		}
		r.ended(CauseQuiet, r.quiet.ended)
		r.st.Phase = PhaseWaiting
	}
	if r.quiet != nil {
		r.st.Quiet = r.quiet.status(now)
	}
	r.e.publish(new(r.st))
}

// nextPoll is the wait before the next poll, after the one begun at polled that returned err.
func (r *run) nextPoll(now, polled time.Time, err error) time.Duration {
	next := r.cfg.Interval
	switch {
	case now.Before(r.settled):
		next = min(next, r.settled.Sub(now)) // poll exactly when the minimum duration ends
	case err == nil:
		next = pollGap(r.lastPoll, r.cfg.Interval)
	}
	if r.st.Phase == PhaseQuiet && r.quiet.watched {
		next = min(next, max(r.quiet.until().Sub(now), 0)) // and when the quiet period would end
	}
	// Whatever the flags and the phase, no poll comes sooner than minPollGap after the last one began.
	return max(next, minPollGap-time.Since(polled))
}

// deadline ends the drain at its deadline (or the engine's stop), saying what it was still waiting for.
func (r *run) deadline() Result {
	st, cfg := r.st, r.cfg
	switch {
	case st.LastError != "" && !st.Open.Known():
		return r.finish(OutcomeError, "deadline %s reached without reading envoy's stats: %s", cfg.Timeout, st.LastError)
	case st.AdminStalledSince != nil:
		return r.finish(OutcomeTimeout, "deadline %s reached: envoy's admin API stopped answering %s before "+
			"(%d polls failed since its last answer at %s, which counted %s): %s", cfg.Timeout,
			time.Since(r.stall.lastGood).Round(time.Millisecond), r.stall.fails,
			r.stall.lastGood.UTC().Format(time.RFC3339Nano), openText(st.Open), st.LastError)
	case st.Phase == PhaseQuiet && r.quiet.adaptive:
		return r.finish(OutcomeTimeout, "deadline %s reached before the silence since the last new traffic was conclusive (%s); %s",
			cfg.Timeout, r.quiet.lastText(time.Now()), inFlightText(st))
	case st.Phase == PhaseQuiet:
		return r.finish(OutcomeTimeout, "deadline %s reached while new traffic still arrived (%s); %s",
			cfg.Timeout, r.quiet.lastText(time.Now()), inFlightText(st))
	}
	return r.finish(OutcomeTimeout, "deadline %s reached with %s", cfg.Timeout, inFlightText(st))
}

// adminStall follows an admin API that stops answering the polls: the first failure and the recovery are
// logged as warnings (the polls between are not: one line per interval would flood the log of a wedged
// Envoy), and a drain that reaches its deadline meanwhile says so instead of reporting a stale count.
type adminStall struct {
	lastGood time.Time // when the last poll that answered began; zero before the first
	since    time.Time // when the first failed poll of this stall began; zero while polls answer
	fails    int
}

// answered records a poll that began at polled and answered; open is the count before this poll.
func (a *adminStall) answered(log *slog.Logger, polled time.Time, open OpenCount) {
	if !a.since.IsZero() {
		log.Warn("envoy admin API answers again", "failed_polls", a.fails,
			"unanswered_for", polled.Sub(a.lastGoodOr(a.since)).Round(time.Millisecond).String(), "last_open", open)
	}
	a.lastGood, a.since, a.fails = polled, time.Time{}, 0
}

// failed records a failed poll and returns when the admin API last answered, or nil if it never did.
func (a *adminStall) failed(log *slog.Logger, err error, open OpenCount) *time.Time {
	a.fails++
	if a.since.IsZero() {
		a.since = time.Now()
		attrs := []any{"err", err, "last_open", open}
		if !a.lastGood.IsZero() {
			attrs = append(attrs, "last_answer", a.lastGood.UTC().Format(time.RFC3339Nano),
				"last_answer_ago", time.Since(a.lastGood).Round(time.Millisecond).String())
		}
		log.Warn("envoy admin API stopped answering; holding the drain until it answers or the deadline", attrs...)
	}
	if a.lastGood.IsZero() {
		return nil
	}
	return new(a.lastGood)
}

func (a *adminStall) lastGoodOr(t time.Time) time.Time {
	if a.lastGood.IsZero() {
		return t
	}
	return a.lastGood
}

// While waiting to release, the engine polls as often as polls are cheap: pollCostFactor times what the
// last poll took (so Envoy's main thread, which answers /stats by scanning every stat, spends at most about
// 1/pollCostFactor of its time on us), never later than --check-interval. In every phase and whatever the
// flags (--check-interval=1ns included), two polls begin at least minPollGap apart. On a small configuration a poll takes well under a millisecond, so the drain releases
// within about minPollGap of the last request; with 10,000 clusters a poll takes ~90 ms (measured by
// `make bench`), so it polls every --check-interval.
const (
	pollCostFactor = 10
	minPollGap     = 25 * time.Millisecond
)

// pollGap is the wait before the next poll while waiting to release.
func pollGap(lastPoll, interval time.Duration) time.Duration {
	return min(max(pollCostFactor*lastPoll, minPollGap), interval)
}

var errEnvoyExited = errors.New("envoy exited")

// wait waits d, or less if ctx ends (its error) or Envoy exits (errEnvoyExited).
func (e *Engine) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.cfg.EnvoyExited:
		return errEnvoyExited
	}
}

// Backoff between failed POST /healthcheck/fail attempts: it doubles from the first to the last. Short at
// first (an Envoy still starting answers within ms), never longer than a second (the deadline is minutes).
const (
	firstBackoff = 50 * time.Millisecond
	lastBackoff  = time.Second
)

// DefaultGoneAfter is how long Envoy's admin API must refuse every connection (or its unix socket be
// missing) before a drain decides Envoy is not running and releases at once (outcome envoy_gone). About a
// second: long enough for several attempts and for an Envoy whose listener is being re-bound, far shorter
// than a drain timeout that would otherwise hold a crashed Envoy's pod for a minute. Any other answer or
// failure (a timeout, a 500) restarts the window: a hung admin API is not a gone Envoy.
const DefaultGoneAfter = time.Second

// refusedError reports that the admin API refused connections for the whole gone window, and the Witness's
// evidence that Envoy is gone.
type refusedError struct {
	For      time.Duration
	Attempts int
	Evidence string
}

func (r *refusedError) Error() string {
	return fmt.Sprintf("envoy admin refused connections for %s (%d attempts)", r.For, r.Attempts)
}

// failHealthChecks calls POST /healthcheck/fail until it succeeds, backing off, while ctx allows. If every
// attempt for GoneAfter is refused (nothing listens), it asks the Witness (refusedEvidence): it returns a
// *refusedError when Envoy is gone, and a *misconfiguredError at the deadline when the address was shown to
// be wrong and still refuses.
func (e *Engine) failHealthChecks(ctx context.Context, d *Drain, st *Status) error {
	backoff := firstBackoff
	var refusedSince time.Time // zero: the last attempt was not refused
	refused := 0
	wrong := "" // the misconfiguration the last gone window showed; "" after any other answer
	for attempt := 1; ; attempt++ {
		if text := e.anotherEnvoy(ctx, d, st); text != "" {
			// Never fail another Envoy's health checks: hold, asking again, until the deadline.
			if err := e.wait(ctx, backoff); err != nil {
				if errors.Is(err, errEnvoyExited) {
					return err
				}
				return &misconfiguredError{text: text}
			}
			backoff = min(2*backoff, lastBackoff)
			continue
		}
		err := e.admin.HealthcheckFail(ctx)
		if err == nil {
			st.LastError, st.Misconfigured = "", ""
			e.publish(new(*st))
			return nil
		}
		st.LastError = err.Error()
		e.publish(new(*st))
		wait := backoff
		if errors.Is(err, envoyadmin.ErrUnreachable) {
			if refusedSince.IsZero() {
				refusedSince = time.Now()
			}
			refused++
			if window := time.Since(refusedSince); window >= e.cfg.GoneAfter && refused >= 2 {
				text, err := e.refusedEvidence(ctx, d, st, window, refused)
				if err != nil {
					return err
				}
				wrong = text
				refusedSince, refused = time.Now(), 0 // the next window asks the Witness again
			}
			// Several attempts inside the window, and one right at its end.
			wait = min(wait, e.cfg.GoneAfter/4, max(e.cfg.GoneAfter-time.Since(refusedSince), firstBackoff))
		} else if ctx.Err() == nil { // an attempt cut short by the deadline shows nothing about the address
			refusedSince, refused, wrong = time.Time{}, 0, ""
		}
		e.log.Warn("failing envoy health checks failed; retrying", "attempt", attempt, "err", err, "retry_in", wait.String())
		if err := e.wait(ctx, wait); err != nil {
			if wrong != "" && !errors.Is(err, errEnvoyExited) {
				return &misconfiguredError{text: wrong}
			}
			return err
		}
		backoff = min(2*backoff, lastBackoff)
	}
}

// cancelCause names what stopped the engine, from the cause its context was canceled with.
func cancelCause(ctx context.Context) string {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		return c.Error()
	}
	return "the manager stopping"
}

// quietText is the quiet period as the log shows it: "auto" (the adaptive rule) or a duration.
func quietText(cfg Config) string {
	if cfg.AdaptiveQuiet {
		return "auto"
	}
	return cfg.QuietPeriod.String()
}

func since(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }

// inFlightText is openText with the kinds of work in flight: "3 in flight: 2 WebSocket/upgraded
// connections still open, 1 request (or stream)".
func inFlightText(st Status) string {
	text := openText(st.Open)
	if st.InFlight != nil && st.Open.Known() && st.Open > 0 {
		if k := st.InFlight.Text(); k != "" {
			text += ": " + k
		}
	}
	return text
}

func slicesClip[T any](s []T) []T { return s[:len(s):len(s)] }

func openText(n OpenCount) string {
	if !n.Known() {
		return "work in flight unknown"
	}
	return fmt.Sprintf("%d in flight", n)
}

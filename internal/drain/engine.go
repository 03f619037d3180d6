// Package drain is the drain engine: one drain of one Envoy at a time, in a fixed order, bounded in time.
//
// The order: wait Delay (keep serving), fail Envoy's health checks (and optionally start its graceful
// listener drain), keep accepting for MinDuration (the floor) and until no new traffic has arrived for
// QuietPeriod (or, with AdaptiveQuiet, for as long as the traffic seen needs), then poll the work in
// flight every Interval until it is at or below Threshold — or until Timeout since the start, or until Envoy is gone. Every outcome releases
// the waiters; none of them leaves a caller blocked past Timeout.
//
// Front ends (the HTTP API, the one-shot command, the agent) call Trigger and wait on the Drain's Done.
package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// Admin is what the engine needs of Envoy's admin API (envoyadmin.Client implements it).
type Admin interface {
	HealthcheckFail(ctx context.Context) error
	DrainListeners(ctx context.Context, inboundOnly bool) error
	Stats(ctx context.Context) (envoyadmin.Snapshot, error)
	ServerState(ctx context.Context) (envoyadmin.ServerState, error)
	HealthcheckOK(ctx context.Context) error
	// ListenerConfig reads which HTTP managers each listener owns; see topologyReader for when.
	ListenerConfig(ctx context.Context) (envoyadmin.Topology, error)
}

// ListenerDrain says whether, after failing health checks, the engine also starts Envoy's graceful listener drain.
type ListenerDrain string

const (
	ListenerDrainNone    ListenerDrain = "none"    // health checks only
	ListenerDrainInbound ListenerDrain = "inbound" // POST /drain_listeners?graceful&skip_exit&inboundonly
	ListenerDrainAll     ListenerDrain = "all"     // POST /drain_listeners?graceful&skip_exit
)

// ParseListenerDrain reads a --drain-listeners value.
func ParseListenerDrain(s string) (ListenerDrain, error) {
	switch l := ListenerDrain(s); l {
	case ListenerDrainNone, ListenerDrainInbound, ListenerDrainAll:
		return l, nil
	}
	return "", fmt.Errorf("%q is not one of none, inbound, all", s)
}

// The defaults of a drain's policy: the command line's, and the numbers inject sizes grace periods with.
const (
	DefaultDelay       = 0 * time.Second
	DefaultMinDuration = 5 * time.Second // the floor; see AdaptiveQuietMin for what it still protects
	DefaultTimeout     = 60 * time.Second
	DefaultInterval    = 250 * time.Millisecond
)

// Config is a drain's policy. Durations are wall-clock; Timeout counts from the trigger and bounds every step.
type Config struct {
	Delay       time.Duration // keep serving normally before failing health checks (endpoint propagation)
	MinDuration time.Duration // after failing health checks, never release sooner than this (the floor)
	// QuietPeriod: past the floor, hold until no new connection and no new request has arrived on the
	// counted listeners (readiness listeners apart) for this long, within Timeout. 0 turns it off.
	QuietPeriod time.Duration
	// AdaptiveQuiet: past the floor, hold until the silence is conclusive for the traffic seen (between
	// AdaptiveQuietMin and AdaptiveQuietMax, see there), within Timeout. QuietPeriod must then be 0.
	AdaptiveQuiet bool
	Timeout       time.Duration // release at the latest this long after the trigger
	Interval      time.Duration // between two polls of Envoy's stats
	Threshold     int64         // release when the count is at or below this
	Mode          Mode
	Selector      Selector
	ListenerDrain ListenerDrain
	// GoneAfter: the admin API refusing every connection this long, with the Witness's evidence, means Envoy
	// is gone; 0: DefaultGoneAfter.
	GoneAfter   time.Duration
	EnvoyExited <-chan struct{} // closed when Envoy's process is known to have exited (agent mode); may be nil
	// Witness says whether Envoy is gone when its admin address refuses from the start (see evidence.go);
	// nil: nothing can tell, and a refusing address holds the drain to its deadline.
	Witness Witness
}

// LeastQuiet is the shortest quiet period the drain may wait: QuietPeriod, or AdaptiveQuietMin with
// AdaptiveQuiet (what a drain with no new traffic waits after health checks failed, the floor apart).
func (c Config) LeastQuiet() time.Duration {
	if c.AdaptiveQuiet {
		return AdaptiveQuietMin
	}
	return c.QuietPeriod
}

// Validate reports the first invalid field as a *ConfigError.
func (c Config) Validate() error {
	switch {
	case c.Delay < 0:
		return invalid(SettingDelay, "must not be negative")
	case c.MinDuration < 0:
		return invalid(SettingMinDuration, "must not be negative")
	case c.QuietPeriod < 0:
		return invalid(SettingQuietPeriod, "must not be negative")
	case c.Timeout <= 0:
		return invalid(SettingTimeout, "must be positive")
	case c.Interval <= 0:
		return invalid(SettingInterval, "must be positive")
	case c.Threshold < 0:
		return invalid(SettingThreshold, "must not be negative")
	case c.GoneAfter < 0:
		return invalid(SettingGoneAfter, "must not be negative")
	case c.AdaptiveQuiet && c.QuietPeriod != 0:
		return invalid(SettingQuietPeriod, "must be 0 with the adaptive quiet period")
	case c.LeastQuiet() > c.MinDuration && AddDurations(c.Delay, c.LeastQuiet()) >= c.Timeout:
		floor := AddDurations(c.Delay, c.LeastQuiet())
		return &ConfigError{Setting: SettingTimeout, text: func(n Names) string {
			what := n.of(SettingQuietPeriod)
			if c.AdaptiveQuiet {
				what = "the adaptive " + what + "'s lower bound"
			}
			return fmt.Sprintf("%s (%s) must be longer than %s plus %s (%s)",
				n.of(SettingTimeout), c.Timeout, n.of(SettingDelay), what, floor)
		}}
	case AddDurations(c.Delay, c.MinDuration) >= c.Timeout:
		floor := AddDurations(c.Delay, c.MinDuration)
		return &ConfigError{Setting: SettingTimeout, text: func(n Names) string {
			return fmt.Sprintf("%s (%s) must be longer than %s plus %s (%s)",
				n.of(SettingTimeout), c.Timeout, n.of(SettingDelay), n.of(SettingMinDuration), floor)
		}}
	}
	if _, err := ParseMode(string(c.Mode)); err != nil {
		return invalidValue(SettingMode, err)
	}
	if _, err := ParseListenerDrain(string(c.ListenerDrain)); err != nil {
		return invalidValue(SettingListenerDrain, err)
	}
	return nil
}

// Engine runs at most one drain at a time. Triggers are idempotent: every caller during a drain gets the
// same Drain. Once a drain has finished, a new trigger starts a new drain only if Envoy is LIVE again
// (its container restarted, or a resume); otherwise it gets the finished drain. The engine never drains by
// itself.
//
// One goroutine (Run) owns the choice between starting, joining and answering with the finished drain.
// It never waits for Envoy: the state check after a finished drain runs on its own goroutine, one at a
// time, shared by every trigger that arrives meanwhile, and a non-LIVE answer is kept for stateCacheTTL.
type Engine struct {
	cfg      Config
	admin    Admin
	log      *slog.Logger
	metrics  *Metrics
	triggers chan triggerRequest
	resumes  chan resumeRequest
	stopped  chan struct{}

	// Written by the owner goroutine (Run) when a drain starts, and by that drain's goroutine after.
	status  atomic.Pointer[Status]
	last    atomic.Pointer[Drain]
	started atomic.Pointer[chan struct{}]
	// resumed is the last successful resume; resumeGen counts them, so a cached state read before a resume
	// is never used after it.
	resumed   atomic.Pointer[Resumed]
	resumeGen atomic.Uint64

	envoyState *envoyStateReader // for Status callers; not part of the drain's state
}

// stateCacheTTL is how long a non-LIVE answer of /server_info after a finished drain is reused. A flood of
// triggers then costs Envoy's admin at most one request per second; a restarted Envoy (LIVE again) is
// noticed at most a second late, and a resume clears the cache at once.
const stateCacheTTL = time.Second

// ErrStopped is returned by Trigger and Resume once Run has returned.
var ErrStopped = errors.New("drain engine stopped")

// ErrDrainRunning is returned by Resume without Force while a drain is running: its callers are waiting
// for it, and making Envoy LIVE under them would release them into a pod that is still serving.
var ErrDrainRunning = errors.New("a drain is running")

// ErrCanceledByResume is the cause of a drain canceled by a forced resume; its reason says so.
var ErrCanceledByResume = errors.New("resume")

// New validates cfg and returns an engine. Call Run to serve triggers. metrics may be nil.
func New(cfg Config, admin Admin, log *slog.Logger, metrics *Metrics) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.GoneAfter == 0 {
		cfg.GoneAfter = DefaultGoneAfter
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	e := &Engine{cfg: cfg, admin: admin, log: log, metrics: metrics,
		triggers: make(chan triggerRequest), resumes: make(chan resumeRequest), stopped: make(chan struct{}),
		envoyState: newEnvoyStateReader()}
	e.status.Store(&Status{Phase: PhaseIdle, Open: Unknown, Listeners: []ScopeCount{}})
	ch := make(chan struct{})
	e.started.Store(&ch)
	metrics.setPhase(PhaseIdle)
	return e, nil
}

type triggerRequest struct {
	by    Caller
	reply chan triggerReply // buffered: the owner never blocks on it
}

type triggerReply struct {
	d *Drain
}

// stateCheck is one /server_info read after a finished drain.
type stateCheck struct {
	state envoyadmin.ServerState
	err   error
	at    time.Time
	gen   uint64 // resumeGen when the read started
}

// Run serves triggers until ctx is done; a drain in progress is then cancelled (outcome "canceled").
// It returns after that drain has released its waiters.
func (e *Engine) Run(ctx context.Context) error {
	defer close(e.stopped)
	var (
		last     *Drain
		pending  []triggerRequest // waiting for the state check
		checking bool
		cached   stateCheck
		checked  = make(chan stateCheck, 1)
		resumes  sync.WaitGroup
	)
	fresh := func() bool {
		return !cached.at.IsZero() && time.Since(cached.at) < stateCacheTTL && cached.gen == e.resumeGen.Load()
	}
	for {
		select {
		case <-ctx.Done():
			if checking {
				<-checked
			}
			resumes.Wait()
			if last != nil {
				<-last.done
			}
			return nil
		case req := <-e.triggers:
			switch {
			case last == nil:
				e.logTrigger(req.by, "started")
				last = e.start(ctx, req.by)
				req.reply <- triggerReply{last}
			case !isDone(last):
				last.joined.Add(1)
				e.logTrigger(req.by, "joined")
				req.reply <- triggerReply{last}
			case fresh():
				e.logTrigger(req.by, "finished")
				req.reply <- triggerReply{last}
			default:
				pending = append(pending, req)
				if !checking {
					checking = true
					go func(gen uint64) {
						st, err := e.admin.ServerState(ctx)
						checked <- stateCheck{state: st, err: err, at: time.Now(), gen: gen}
					}(e.resumeGen.Load())
				}
			}
		case c := <-checked:
			checking = false
			cached = c
			if e.redrain(c) {
				cached = stateCheck{}
				e.logTrigger(pending[0].by, "started")
				last = e.start(ctx, pending[0].by)
				pending[0].reply <- triggerReply{last}
				for _, req := range pending[1:] {
					last.joined.Add(1)
					e.logTrigger(req.by, "joined")
					req.reply <- triggerReply{last}
				}
			} else {
				for _, req := range pending {
					e.logTrigger(req.by, "finished")
					req.reply <- triggerReply{last}
				}
			}
			pending = nil
		case req := <-e.resumes:
			var canceled *Drain
			if last != nil && !isDone(last) {
				if !req.Force {
					req.reply <- resumeReply{err: fmt.Errorf("%w (triggered by %s %s, %d joined); force to cancel it",
						ErrDrainRunning, last.by.Method, last.by.Remote, last.joined.Load())}
					break
				}
				canceled = last
				last.cancel(ErrCanceledByResume)
			}
			resumes.Go(func() { e.resume(ctx, req, canceled) })
		}
	}
}

// redrain reports whether a new drain should replace the finished one: only when Envoy is LIVE again,
// which means Envoy restarted or was resumed since (a drained Envoy stays DRAINING).
func (e *Engine) redrain(c stateCheck) bool {
	if c.err != nil {
		e.log.Info("drain already finished; envoy state unknown, not draining again", "err", c.err)
		return false
	}
	if c.state != envoyadmin.StateLive {
		return false
	}
	e.log.Info("envoy is live again after a finished drain: draining it", "envoy_state", string(c.state))
	return true
}

// logTrigger logs a trigger and what it did ("started", "joined", "finished"). The owner goroutine logs it
// before it starts the drain, so that "drain trigger" always comes before the drain's "drain started".
func (e *Engine) logTrigger(by Caller, how string) {
	e.log.Info("drain trigger", append(by.Attrs(), "drain", how)...)
}

func (e *Engine) start(ctx context.Context, by Caller) *Drain {
	dctx, cancel := context.WithCancelCause(ctx)
	d := &Drain{done: make(chan struct{}), misconfigured: make(chan struct{}), by: by, cancel: cancel}
	now := time.Now()
	d.started = now
	e.publish(&Status{Phase: PhaseDelay, Started: &now, Deadline: new(now.Add(e.cfg.Timeout)), Open: Unknown, Listeners: []ScopeCount{}, TriggeredBy: &d.by})
	e.last.Store(d)
	next := make(chan struct{})
	close(*e.started.Swap(&next))
	go func() {
		defer cancel(nil)
		r := e.drain(dctx, d)
		d.result = r
		e.metrics.finished(r)
		close(d.done)
	}()
	return d
}

// Trigger starts a drain, or joins the one in progress, and returns it; by is who asked (logged, and shown
// in Status). ctx bounds only the hand-over and, after a finished drain, the shared check of Envoy's state
// (at most one admin request timeout).
func (e *Engine) Trigger(ctx context.Context, by Caller) (*Drain, error) {
	reply := make(chan triggerReply, 1)
	select {
	case e.triggers <- triggerRequest{by: by, reply: reply}:
	case <-e.stopped:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-reply:
		return r.d, nil
	case <-e.stopped:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ResumeRequest asks the engine to make Envoy LIVE again.
type ResumeRequest struct {
	By    Caller
	Force bool // cancel a running drain (outcome canceled, reason "canceled by resume") instead of refusing
}

// ResumeResult is a resume that reached Envoy.
type ResumeResult struct {
	Canceled   bool                   // a running drain was canceled first
	EnvoyState envoyadmin.ServerState // read after POST /healthcheck/ok ("" if it could not be read)
}

type resumeRequest struct {
	ResumeRequest
	reply chan resumeReply
}

type resumeReply struct {
	res ResumeResult
	err error
}

// Resume makes a drained Envoy LIVE again (POST /healthcheck/ok), so that a mistaken trigger does not leave
// the pod unready for ever. While a drain is running it returns ErrDrainRunning, unless Force: then that
// drain is canceled first and its waiters released. The next trigger after a resume drains again.
// It does not undo Envoy's listener drain (--drain-listeners), which Envoy cannot reverse.
func (e *Engine) Resume(ctx context.Context, req ResumeRequest) (ResumeResult, error) {
	reply := make(chan resumeReply, 1)
	select {
	case e.resumes <- resumeRequest{req, reply}:
	case <-e.stopped:
		return ResumeResult{}, ErrStopped
	case <-ctx.Done():
		return ResumeResult{}, ctx.Err()
	}
	select {
	case r := <-reply:
		return r.res, r.err
	case <-ctx.Done():
		return ResumeResult{}, ctx.Err()
	}
}

// resume runs off the owner goroutine: it waits for a canceled drain to release, then tells Envoy.
func (e *Engine) resume(ctx context.Context, req resumeRequest, canceled *Drain) {
	log := e.log.With(req.By.Attrs()...)
	if canceled != nil {
		log.Warn("resume: canceling the running drain", "triggered_by", canceled.by.Method+" "+canceled.by.Remote)
		<-canceled.done
	}
	if err := e.admin.HealthcheckOK(ctx); err != nil {
		log.Warn("resume failed", "err", err)
		req.reply <- resumeReply{err: fmt.Errorf("making envoy live again: %w", err)}
		return
	}
	e.resumed.Store(&Resumed{By: req.By, At: time.Now()})
	e.resumeGen.Add(1)
	res := ResumeResult{Canceled: canceled != nil}
	st, err := e.admin.ServerState(ctx)
	if err == nil {
		res.EnvoyState = st
	}
	log.Info("resumed: envoy health checks pass again", "envoy_state", string(res.EnvoyState), "canceled_drain", res.Canceled)
	req.reply <- resumeReply{res: res}
}

// Current returns the drain started last, running or finished (nil before the first), and a channel
// closed when the next drain starts. It is the one way to follow the engine's drains: wait on d.Done() for
// the running drain's release, on next for the drain after it, then call Current again. The two are read
// together: a drain that starts after the call closes next; one that started before is d.
func (e *Engine) Current() (d *Drain, next <-chan struct{}) {
	next = *e.started.Load() // first: a drain starting between the two loads closes it
	return e.last.Load(), next
}

// Status returns a snapshot of the current or last drain. The caller may keep it; it is never changed.
func (e *Engine) Status() Status {
	s := *e.status.Load()
	if s.Listeners == nil {
		s.Listeners = []ScopeCount{} // JSON []: no scope counted, not "unknown"
	}
	if s.Groups == nil {
		s.Groups = []Group{}
	}
	if s.Started != nil && s.Outcome == "" {
		s.Elapsed = Seconds(time.Since(*s.Started))
	}
	if d := e.last.Load(); d != nil {
		s.Joined = d.joined.Load()
	}
	if r := e.resumed.Load(); r != nil && (s.Started == nil || r.At.After(*s.Started)) {
		s.Resumed = r
	}
	return s
}

func (e *Engine) publish(s *Status) {
	e.status.Store(s)
	e.metrics.setPhase(s.Phase)
	e.metrics.setOpen(s.Open)
	e.metrics.setKinds(s.InFlight)
}

// Drain is one drain. Done is closed when it has released; Result is valid from then on.
type Drain struct {
	started time.Time
	by      Caller // who started it
	joined  atomic.Int64
	cancel  context.CancelCauseFunc
	done    chan struct{}
	result  Result

	misconfigured     chan struct{} // see Misconfigured
	misconfiguredOnce sync.Once
	unsure            bool // the drain's goroutine has logged a refusal it has no evidence about
}

// Done is closed when the drain has released its waiters.
func (d *Drain) Done() <-chan struct{} { return d.done }

// Result is the drain's outcome; only valid once Done is closed.
func (d *Drain) Result() Result { return d.result }

// Started is when the drain was triggered.
func (d *Drain) Started() time.Time { return d.started }

// By is who started the drain.
func (d *Drain) By() Caller { return d.by }

// Released reports whether the drain has released its waiters (Done is closed).
func (d *Drain) Released() bool { return isDone(d) }

func isDone(d *Drain) bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

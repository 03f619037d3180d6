// Package drain is the drain engine: one drain of one Envoy at a time, in a fixed order, bounded in time.
//
// The order: wait Delay (keep serving), fail Envoy's health checks (and optionally start its graceful
// listener drain), keep accepting for MinDuration, then poll the work in flight every Interval until it is
// at or below Threshold — or until Timeout since the start, or until Envoy is gone. Every outcome releases
// the waiters; none of them leaves a caller blocked past Timeout.
//
// Front ends (the HTTP API, the one-shot command, the agent) call Trigger and wait on the Drain's Done.
package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
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

// Config is a drain's policy. Durations are wall-clock; Timeout counts from the trigger and bounds every step.
type Config struct {
	Delay         time.Duration // keep serving normally before failing health checks (endpoint propagation)
	MinDuration   time.Duration // after failing health checks, never release sooner than this
	Timeout       time.Duration // release at the latest this long after the trigger
	Interval      time.Duration // between two polls of Envoy's stats
	Threshold     int64         // release when the count is at or below this
	Mode          Mode
	Selector      Selector
	ListenerDrain ListenerDrain
	GoneAfter     time.Duration   // admin API refusing connections this long means Envoy is gone; 0: DefaultGoneAfter
	EnvoyExited   <-chan struct{} // closed when Envoy's process is known to have exited (agent mode); may be nil
}

// Validate reports the first invalid field, named as the flag that sets it.
func (c Config) Validate() error {
	switch {
	case c.Delay < 0:
		return fmt.Errorf("--drain-delay must not be negative")
	case c.MinDuration < 0:
		return fmt.Errorf("--min-drain-duration must not be negative")
	case c.Timeout <= 0:
		return fmt.Errorf("--drain-timeout must be positive")
	case c.Interval <= 0:
		return fmt.Errorf("--check-interval must be positive")
	case c.Threshold < 0:
		return fmt.Errorf("--min-open-connections must not be negative")
	case c.GoneAfter < 0:
		return fmt.Errorf("--envoy-gone-after must not be negative")
	case AddDurations(c.Delay, c.MinDuration) >= c.Timeout:
		return fmt.Errorf("--drain-timeout (%s) must be longer than --drain-delay plus --min-drain-duration (%s)",
			c.Timeout, AddDurations(c.Delay, c.MinDuration))
	}
	if _, err := ParseMode(string(c.Mode)); err != nil {
		return fmt.Errorf("--count: %w", err)
	}
	if _, err := ParseListenerDrain(string(c.ListenerDrain)); err != nil {
		return fmt.Errorf("--drain-listeners: %w", err)
	}
	return nil
}

// Engine runs at most one drain at a time. Triggers are idempotent: every caller during a drain gets the
// same Drain. Once a drain has finished, a new trigger starts a new drain only if Envoy is LIVE again
// (its container restarted); otherwise it gets the finished drain. The engine never drains by itself.
type Engine struct {
	cfg      Config
	admin    Admin
	log      *slog.Logger
	metrics  *Metrics
	triggers chan chan *Drain
	stopped  chan struct{}

	// Written by the owner goroutine (Run) when a drain starts, and by that drain's goroutine after.
	status  atomic.Pointer[Status]
	running atomic.Pointer[Drain]
	started atomic.Pointer[chan struct{}]
}

// ErrStopped is returned by Trigger once Run has returned.
var ErrStopped = errors.New("drain engine stopped")

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
		triggers: make(chan chan *Drain), stopped: make(chan struct{})}
	e.status.Store(&Status{Phase: PhaseIdle, Open: Unknown, Listeners: []ScopeCount{}})
	ch := make(chan struct{})
	e.started.Store(&ch)
	metrics.setPhase(PhaseIdle)
	return e, nil
}

// Run serves triggers until ctx is done; a drain in progress is then cancelled (outcome "canceled").
// It returns after that drain has released its waiters.
func (e *Engine) Run(ctx context.Context) error {
	defer close(e.stopped)
	var last *Drain
	for {
		select {
		case <-ctx.Done():
			if last != nil {
				<-last.done
			}
			return nil
		case reply := <-e.triggers:
			if last == nil || e.redrain(ctx, last) {
				last = e.start(ctx)
			}
			reply <- last
		}
	}
}

// redrain reports whether a new drain should replace the last one: only when it has finished and Envoy is
// LIVE again, which means Envoy restarted since (a drained Envoy stays DRAINING).
func (e *Engine) redrain(ctx context.Context, last *Drain) bool {
	select {
	case <-last.done:
	default:
		return false
	}
	st, err := e.admin.ServerState(ctx)
	if err != nil {
		e.log.Info("drain already finished; envoy state unknown, not draining again", "err", err)
		return false
	}
	if st != envoyadmin.StateLive {
		return false
	}
	e.log.Info("envoy is live again after a finished drain: draining it", "envoy_state", string(st))
	return true
}

func (e *Engine) start(ctx context.Context) *Drain {
	d := &Drain{done: make(chan struct{})}
	now := time.Now()
	d.started = now
	e.publish(&Status{Phase: PhaseDelay, Started: &now, Deadline: ptr(now.Add(e.cfg.Timeout)), Open: Unknown, Listeners: []ScopeCount{}})
	e.running.Store(d)
	next := make(chan struct{})
	close(*e.started.Swap(&next))
	go func() {
		r := e.drain(ctx, d)
		d.result = r
		e.metrics.finished(r)
		e.running.CompareAndSwap(d, nil)
		close(d.done)
	}()
	return d
}

// Trigger starts a drain, or joins the one in progress, and returns it; ctx bounds only the hand-over.
func (e *Engine) Trigger(ctx context.Context) (*Drain, error) {
	reply := make(chan *Drain, 1)
	select {
	case e.triggers <- reply:
	case <-e.stopped:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return <-reply, nil
}

// Running returns the drain in progress, or nil.
func (e *Engine) Running() *Drain { return e.running.Load() }

// NextStart returns a channel that is closed when the next drain starts. To wait for "a drain, running now or
// starting soon", take NextStart first, then check Running.
func (e *Engine) NextStart() <-chan struct{} { return *e.started.Load() }

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
	return s
}

func (e *Engine) publish(s *Status) {
	e.status.Store(s)
	e.metrics.setPhase(s.Phase)
	e.metrics.setOpen(s.Open)
}

// Drain is one drain. Done is closed when it has released; Result is valid from then on.
type Drain struct {
	started time.Time
	done    chan struct{}
	result  Result
}

// Done is closed when the drain has released its waiters.
func (d *Drain) Done() <-chan struct{} { return d.done }

// Result is the drain's outcome; only valid once Done is closed.
func (d *Drain) Result() Result { return d.result }

func ptr[T any](v T) *T { return &v }

// AddDurations adds durations, saturating at the largest (or smallest) Duration instead of wrapping:
// flag values such as --drain-delay=2562047h plus --min-drain-duration must not overflow past a check.
func AddDurations(ds ...time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		switch {
		case d > 0 && sum > math.MaxInt64-d:
			sum = math.MaxInt64
		case d < 0 && sum < math.MinInt64-d:
			sum = math.MinInt64
		default:
			sum += d
		}
	}
	return sum
}

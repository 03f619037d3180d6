package inject

import (
	"fmt"
	"math"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drainflag"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/supervisor"
)

// The grace period and the drain timeout.
//
// Kubelet kills (SIGKILL) whatever still runs terminationGracePeriodSeconds after the pod's deletion began.
// Envoy must be stopped by us before that, so the drain timeout is the grace period minus what has to
// happen outside the drain in that time; that remainder is the margin of each mode.
const (
	// HookMargin (hook and sidecar modes): before the drain starts, kubelet has to exec the hook through the
	// container runtime (or send its HTTP request), seconds on a busy node; after the drain releases, the
	// hook exits, kubelet sends SIGTERM and Envoy exits at once (milliseconds). Five seconds covers both.
	HookMargin = 5 * time.Second
	// agentMargin (agent mode) is what `run --termination-grace-period` keeps in hand beyond the drain:
	// run's default --stop-timeout and the stop's own 2 s (supervisor.StopMargin: the second between SIGTERM
	// and SIGKILL of the stop, and one for scheduling). `run` derives the same drain timeout from the same
	// numbers.
	agentMargin = supervisor.DefaultStopTimeout + supervisor.StopMargin
	// minWait is the shortest time a derived drain timeout leaves for work in flight after the drain delay
	// and the minimum drain duration; a grace period leaving less is raised.
	minWait = 10 * time.Second
	// defaultGrace is Kubernetes' terminationGracePeriodSeconds when a pod sets none.
	defaultGrace = 30 * time.Second
)

// maxGraceSeconds is the longest grace period a time.Duration holds in whole seconds (about 292 years). The
// API server accepts any terminationGracePeriodSeconds up to int64's largest; a longer one than this is
// kept as it is, and the drain gets this much of it (saturating arithmetic: a grace period is never cut
// short by an overflow, and agent mode's --termination-grace-period stays a duration `run` can parse).
const maxGraceSeconds = math.MaxInt64 / int64(time.Second)

// gracePlan is the outcome: the drain timeout and the grace period to set.
type gracePlan struct {
	timeout time.Duration // the drain timeout
	grace   int64         // terminationGracePeriodSeconds to set
	change  bool          // grace differs from what the pod had (or had none and needs more than the default)
}

// Margin is the part of the grace period a mode keeps beyond the drain (HookMargin; agent mode: run's stop).
func Margin(m Mode) time.Duration { return margin(m) }

// GraceNeeded is the terminationGracePeriodSeconds a pod injected in mode m with drain timeout timeout needs:
// the timeout in whole seconds (rounded up) plus the mode's Margin. planGrace raises a pod's grace period to
// it; `kubectl shutdown-manager check` compares a live pod's with it.
func GraceNeeded(m Mode, timeout time.Duration) int64 {
	return ceilSeconds(timeout) + int64(margin(m)/time.Second)
}

// DefaultGrace is Kubernetes' terminationGracePeriodSeconds when a pod sets none (30 s).
const DefaultGrace = defaultGrace

// margin is the part of the grace period a mode keeps beyond the drain.
func margin(m Mode) time.Duration {
	if m == ModeAgent {
		return agentMargin
	}
	return HookMargin
}

// planGrace derives the drain timeout from the pod's grace period (nil = Kubernetes' default, 30 s), or,
// when a drain timeout was requested, raises the grace period to fit it. A grace period is only ever
// raised, never lowered: a user's longer one stays, and the derived drain timeout then uses all of it (up
// to maxGraceSeconds). All in whole seconds of int64 where the grace period is concerned, so that nothing
// overflows.
func planGrace(s settings, current *int64) gracePlan {
	margin := margin(s.Mode)
	haveSecs := int64(defaultGrace / time.Second)
	if current != nil {
		haveSecs = *current
	}
	have := time.Duration(min(haveSecs, maxGraceSeconds)) * time.Second
	var timeout time.Duration
	if s.Drain.Timeout != nil {
		timeout = *s.Drain.Timeout
	} else {
		timeout = max(have-margin, drain.AddDurations(s.delay, max(s.minDuration, s.quiet), minWait))
		if s.DeregistrationDelay > 0 {
			timeout = max(timeout, DeregistrationNeed(s.DeregistrationDelay, s.Drain.QuietPeriod))
		}
	}
	need := GraceNeeded(s.Mode, timeout)
	if need <= haveSecs {
		if s.Drain.Timeout == nil {
			timeout = have - margin // use all of a longer grace period
		}
		return gracePlan{timeout: timeout, grace: haveSecs}
	}
	return gracePlan{timeout: timeout, grace: need, change: true}
}

// agentGrace is agent mode's --termination-grace-period for a grace period: at most what a duration holds.
func agentGrace(grace int64) string {
	return fmt.Sprintf("%ds", min(grace, maxGraceSeconds))
}

// ceilSeconds is d in whole seconds, rounded up (d >= 0).
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// DeregistrationNeed is the drain timeout a load balancer that may send new connections for lb after the pod
// starts terminating needs: past its floor the drain holds while arrivals continue, so the timeout covers lb
// and then the quiet period's longest silence (a fixed quiet period, or auto's upper bound,
// drain.AdaptiveQuietMax: a sparse source can need it all). quiet nil is auto.
func DeregistrationNeed(lb time.Duration, quiet *time.Duration) time.Duration {
	silence := drain.AdaptiveQuietMax
	if quiet != nil {
		silence = *quiet
	}
	return drain.AddDurations(lb, silence)
}

// DeregistrationGap is what a drain's settings lack to hold a pod through a load balancer's deregistration delay.
type DeregistrationGap int

const (
	GapNone    DeregistrationGap = iota
	GapFloor                     // no quiet period (the drain does not wait for arrivals to stop) and the floor < the delay
	GapTimeout                   // the drain timeout < the delay
	GapSilence                   // the timeout covers the delay, not the quiet period's longest silence after it
)

// DeregistrationFit is the gap of a drain with this timeout, floor (drain delay + minimum drain duration) and
// quiet period (nil: auto) behind a load balancer that may send new connections for lb: the one rule inject's
// warning and `check` both apply.
func DeregistrationFit(lb, timeout, floor time.Duration, quiet *time.Duration) DeregistrationGap {
	switch {
	case quiet != nil && *quiet == 0 && floor < lb:
		return GapFloor
	case timeout < lb:
		return GapTimeout
	case timeout < DeregistrationNeed(lb, quiet):
		return GapSilence
	}
	return GapNone
}

// RecordedDeregistrationDelay is the deregistration delay inject was given for the pod, from its status; 0: none.
func RecordedDeregistrationDelay(st Status) time.Duration {
	if d, err := time.ParseDuration(st.Settings[settingDeregistrationDelay]); err == nil && d > 0 {
		return d
	}
	return 0
}

// DeregistrationShortfall says, for a pod inject injected (its status annotation), why its drain timeout cannot
// hold it through the load balancer's deregistration delay it recorded, with the numbers and the settings that
// would; "" when it can, or when no delay was given. (A --drain-timeout given shorter is kept as given.)
func DeregistrationShortfall(st Status) string {
	lb := RecordedDeregistrationDelay(st)
	timeout, err := time.ParseDuration(st.DrainTimeout)
	if lb == 0 || err != nil {
		return ""
	}
	var quiet *time.Duration
	if q, err := time.ParseDuration(st.Settings[drainflag.QuietPeriod.Name]); err == nil {
		quiet = &q
	}
	delay := settingOr(st, drainflag.DrainDelay.Name, DefaultDrainDelay)
	floor := delay + settingOr(st, drainflag.MinDrainDuration.Name, DefaultMinDrainDuration)
	need := DeregistrationNeed(lb, quiet)
	fix := fmt.Sprintf("--drain-timeout %s and a grace period of %ds, or no --drain-timeout: inject then sizes both", need, GraceNeeded(st.Mode, need))
	switch DeregistrationFit(lb, timeout, floor, quiet) {
	case GapFloor:
		return fmt.Sprintf("quiet period 0s: the drain does not wait for new connections to stop, and its floor (drain delay + minimum drain duration: %s) < the load balancer's deregistration delay %s: Envoy stops while new connections may still come (want a quiet period, or --min-drain-duration %s)", floor, lb, lb-delay)
	case GapTimeout:
		return fmt.Sprintf("drain timeout %s < the load balancer's deregistration delay %s: the drain releases, and Envoy stops, while new connections may still come (want %s)", timeout, lb, fix)
	case GapSilence:
		return fmt.Sprintf("drain timeout %s leaves %s after the load balancer's deregistration delay %s, less than the %s of silence the quiet period may want (want %s)", timeout, timeout-lb, lb, need-lb, fix)
	}
	return ""
}

// settingOr is the duration the status records for the drain setting name, else def.
func settingOr(st Status, name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(st.Settings[name]); err == nil {
		return d
	}
	return def
}

// settingDeregistrationDelay is the key of Config.DeregistrationDelay in Status.Settings.
const settingDeregistrationDelay = "deregistration-delay"

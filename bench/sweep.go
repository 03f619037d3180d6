package main

// The propagation sweep (issue 19): a load balancer that takes P seconds to stop sending. Clients keep
// opening new connections for P s after termination begins while requests of several lengths run; each
// policy is measured against the physical limit of that traffic — the later of the last new connection and
// the end of the last request — which no policy can beat without knowing the future.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// The sweep's traffic. Every request opens its own connection (Connection: close), as a load balancer in
// TCP mode forwarding a client per request does, and nothing is retried: a request that fails is counted.
// Arrivals are open-loop (a fixed pace, whatever the answers), as a load balancer's clients do not slow
// down for a dying backend.
//
// The short requests are a load balancer's usual traffic: so short that nothing is in flight most of the
// time, which is what a policy that counts the work in flight sees between arrivals. The 1 s requests come
// every 2 s, so the work in flight falls to 0 for about a second between them while arrivals go on (a
// 1 s request every 250 ms, tried first, kept some work in flight until the arrivals stopped, and hid the
// difference between counting work in flight and watching for new traffic that this sweep is about).
const (
	sweepShortEvery  = 20 * time.Millisecond // a short request (GET /) on a new connection this often: 50/s
	sweepMediumEvery = 2 * time.Second       // a 1 s request on a new connection this often
	sweepMedium      = time.Second
)

// sweepLong are requests in flight when termination begins (started with it), one of each length: the
// load scenario's long lengths up to 6 s, so that in-flight work sets the limit while P <= 5 s and the
// arrivals set it at P = 10 s.
var sweepLong = []time.Duration{2 * time.Second, 4 * time.Second, 6 * time.Second}

// sweepPropagations are the P values, and 20 s: past Envoy Gateway's 10 s floor, where a cloud load
// balancer with slow health checks (or NLB in IP mode, minutes) still sends.
var sweepPropagations = []time.Duration{500 * time.Millisecond, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second}

// sweepPolicy is a policy of the sweep: a bench policy and the manager flags it runs with.
type sweepPolicy struct {
	p    policy
	tune tuning
}

// sweepPolicies are the sweep's policies in report order: fixed floors (sleep, then SIGTERM, as fixed5s),
// ours (the `serve` sidecar, hook mode) with its defaults, with a low floor and quiet period, and with the
// quiet period off (the behaviour before it), then the peers as the bench runs them.
func sweepPolicies(c *config) []sweepPolicy {
	var out []sweepPolicy
	for _, d := range []time.Duration{0, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second} {
		name := "fixed" + strings.ReplaceAll(secondsText(d), " ", "")
		out = append(out, sweepPolicy{p: fixedWait(d, name, "preStop sleeps "+secondsText(d)+", then SIGTERM: Envoy exits with whatever is in flight.")})
	}
	var serve policy
	for _, p := range allPolicies(c) {
		if p.name == "serve" {
			serve = p
		}
	}
	ours := func(name, label, describe string, args ...string) sweepPolicy {
		p := serve
		p.name, p.label, p.describe = name, label, describe
		return sweepPolicy{p: p, tune: tuning{managerArgs: args}}
	}
	out = append(out,
		ours("ours", "ours, defaults (floor 5 s, quiet auto)",
			"shutdown-manager serve with its defaults: --min-drain-duration=5s --quiet-period=auto (the silence read from the traffic, 0.5-10 s); preStop GET /shutdown, then SIGTERM."),
		ours("ours-fixed3", "ours, floor 5 s, fixed quiet 3 s",
			"shutdown-manager serve --quiet-period=3s: the defaults before the adaptive quiet period.", "--quiet-period=3s"),
		ours("ours-low", "ours, floor 1 s, quiet 1 s",
			"shutdown-manager serve --min-drain-duration=1s --quiet-period=1s.", "--min-drain-duration=1s", "--quiet-period=1s"),
		ours("ours-noquiet", "ours, quiet period off (floor 5 s)",
			"shutdown-manager serve --quiet-period=0: the floor, then the work in flight (the behaviour before the quiet period).",
			"--quiet-period=0s"),
	)
	for _, p := range []policy{contourPolicy(c), egPolicy(c)} {
		out = append(out, sweepPolicy{p: p})
	}
	if len(c.sweepPolicies) > 0 {
		out = slices.DeleteFunc(out, func(sp sweepPolicy) bool { return !slices.Contains(c.sweepPolicies, sp.p.name) })
	}
	return out
}

// SweepResults is what the sweep measured; plot.py reads it from sweep.json.
type SweepResults struct {
	Machine  Machine      `json:"machine"`
	Policies []PolicyInfo `json:"policies"`
	Traffic  string       `json:"traffic"`
	Cap      float64      `json:"cap_s"`
	Runs     []SweepRun   `json:"runs"`
	Seconds  float64      `json:"seconds"` // how long the sweep took
	Load     string       `json:"load"`    // the machine's load average before and after, from /proc/loadavg
}

// SweepRun is one termination of the sweep. Times are seconds from the start of termination.
type SweepRun struct {
	PropagationS float64        `json:"propagation_s"`
	Policy       string         `json:"policy"`
	Run          int            `json:"run"`
	Sent         int            `json:"sent"`
	Failed       int            `json:"failed"`
	Errors       map[string]int `json:"errors"`
	FailedByLen  map[string]int `json:"failed_by_length"`
	TerminateS   float64        `json:"time_to_terminate_s"` // -1: capped, or Envoy killed by the bench
	ReleaseS     float64        `json:"release_s"`
	LastNewS     float64        `json:"last_new_connection_s"`
	LastEndS     float64        `json:"last_request_end_s"` // see limitOf
	LimitS       float64        `json:"limit_s"`
	OverS        float64        `json:"over_limit_s"` // time to terminate - limit (meaningless when TerminateS is -1)
	Capped       bool           `json:"capped"`
	Outcome      string         `json:"outcome"`
	Hook         string         `json:"hook"`
	Sidecar      sidecarStory   `json:"sidecar"`
	EnvoyExit    string         `json:"envoy_exit"`
	Phases       []string       `json:"phases,omitempty"` // ours: why each phase of the drain ended (its log)
}

// sweepReq is one request of the sweep, as the client saw it.
type sweepReq struct {
	start  time.Time     // the connection was dialled
	length time.Duration // what it asked the upstream to take (0: GET /)
	end    time.Time     // the answer was read in full, or the request failed
	class  string        // "" for a 2xx read in full; else the failure class; "canceled" if the bench stopped it
}

// limitOf is the physical limit of a run's traffic, as times since origin: the later of the last new
// connection and the end of the last request. A request that succeeded ends when its answer was read; one
// that failed is taken to end when it would have (its start plus its length), so the limit does not move
// with the policy that cut it short. Canceled requests (the bench stopping) are left out.
func limitOf(origin time.Time, reqs []sweepReq) (lastNew, lastEnd, limit float64) {
	for _, r := range reqs {
		if r.class == "canceled" {
			continue
		}
		lastNew = max(lastNew, r.start.Sub(origin).Seconds())
		end := r.end
		if r.class != "" {
			end = r.start.Add(r.length)
		}
		lastEnd = max(lastEnd, end.Sub(origin).Seconds())
	}
	return lastNew, lastEnd, max(lastNew, lastEnd)
}

// sweepClient sends the sweep's requests, one connection each, and keeps every outcome.
type sweepClient struct {
	addr string
	wg   sync.WaitGroup
	mu   sync.Mutex
	reqs []sweepReq
}

// send runs one request of the given length in its own goroutine; it arrives now (a goroutine that starts
// late on a busy machine does not move the arrival).
func (s *sweepClient) send(ctx context.Context, length time.Duration) {
	start := time.Now()
	s.wg.Go(func() {
		r := sweepRequest(ctx, s.addr, start, length)
		s.mu.Lock()
		s.reqs = append(s.reqs, r)
		s.mu.Unlock()
	})
}

// pace sends a request of length every interval from now until stop is closed (or ctx is done).
func (s *sweepClient) pace(ctx context.Context, interval, length time.Duration, stop <-chan struct{}) {
	s.wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s.send(ctx, length)
			select {
			case <-t.C:
			case <-stop:
				return
			case <-ctx.Done():
				return
			}
		}
	})
}

// sweepRequest (arriving at start) dials addr and sends one GET (/ or /sleep?d=length) with Connection: close, bounded by
// length + testbed.RequestTimeout. A plain connection and http.ReadResponse: no client library that could
// retry or pool.
func sweepRequest(ctx context.Context, addr string, start time.Time, length time.Duration) sweepReq {
	r := sweepReq{start: start, length: length}
	rctx, cancel := context.WithTimeout(ctx, length+testbed.RequestTimeout)
	defer cancel()
	r.class = func() string {
		c, err := (&net.Dialer{}).DialContext(rctx, "tcp", addr)
		if err != nil {
			return sweepClass(ctx, err)
		}
		defer c.Close()
		defer context.AfterFunc(rctx, func() { c.SetDeadline(time.Now()) })()
		path := "/"
		if length > 0 {
			path = "/sleep?d=" + length.String()
		}
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n", path); err != nil {
			return sweepClass(ctx, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return sweepClass(ctx, err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return sweepClass(ctx, err)
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fmt.Sprintf("status_%dxx", resp.StatusCode/100)
		}
		return ""
	}()
	r.end = time.Now()
	return r
}

// sweepClass names a failure as testbed's generators do; "canceled" when the bench's own context ended it.
func sweepClass(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return "canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return testbed.ClassRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return testbed.ClassReset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return testbed.ClassEOF
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return testbed.ClassTimeout
	}
	return testbed.ClassOther
}

// scenarioSweep runs every sweep policy at every P, c.sweepRuns times, and writes sweep.json.
func scenarioSweep(ctx context.Context, c *config, res *Results) error {
	t0 := time.Now()
	sr := &SweepResults{Machine: res.Machine, Cap: c.capAfter.Seconds(), Load: loadAvg()}
	sr.Traffic = fmt.Sprintf("from %s before termination begins until P after: a GET / every %s and a %s request every %s, "+
		"each on a new connection (Connection: close, no retries); at the start of termination one request each of %s, "+
		"also on new connections", c.warmup, sweepShortEvery, sweepMedium, sweepMediumEvery, durationsText(sweepLong))
	pols := sweepPolicies(c)
	for _, sp := range pols {
		p := sp.p
		sr.Policies = append(sr.Policies, PolicyInfo{Name: p.name, Label: p.label, Recreated: p.recreated, Real: p.real,
			Envoy: p.envoy, Describe: p.describe, Available: p.available, Unavailble: p.unavailable})
	}
	var errs []error
	for run := 1; run <= c.sweepRuns; run++ {
		for _, P := range c.sweepP {
			for _, sp := range pols {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				r, err := sweepOnce(ctx, c, sp, P, run)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s P=%s run %d: %w", sp.p.name, P, run, err))
					fmt.Fprintf(os.Stderr, "bench: sweep %s P=%s run %d: %v\n", sp.p.name, P, run, err)
					continue
				}
				fmt.Printf("sweep P=%-5s %-13s run %d: failed %d of %d %v, release %.2fs, terminate %.2fs, limit %.2fs (last new %.2fs, last end %.2fs), over %+.2fs, %s %q\n",
					P, sp.p.name, run, r.Failed, r.Sent, r.Errors, r.ReleaseS, r.TerminateS, r.LimitS, r.LastNewS, r.LastEndS, r.OverS, r.Outcome, r.Phases)
				sr.Runs = append(sr.Runs, r)
			}
		}
	}
	sr.Seconds = time.Since(t0).Seconds()
	sr.Load += " -> " + loadAvg()
	sr.Machine.Finished = time.Now().UTC().Format(time.RFC3339)
	b, err := json.MarshalIndent(sr, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.out, "sweep.json"), b, 0o644); err != nil {
		return err
	}
	return errors.Join(errs...)
}

func durationsText(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, secondsText(d))
	}
	return strings.Join(s, ", ")
}

// loadAvg is the first three fields of /proc/loadavg: how busy the machine was.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// sweepOnce is one termination: traffic for c.warmup, then termination begins while the arrivals go on for
// P and the long requests run; the run ends when every request has ended.
func sweepOnce(ctx context.Context, c *config, sp sweepPolicy, P time.Duration, run int) (SweepRun, error) {
	out := SweepRun{PropagationS: P.Seconds(), Policy: sp.p.name, Run: run, Errors: map[string]int{}, FailedByLen: map[string]int{}}
	r, closeRig, err := newRig(ctx, c, sp.p, sp.tune, testbed.Options{})
	if err != nil {
		return out, err
	}
	defer closeRig()
	release, cleanup, err := sp.p.prepare(ctx, r, sp.tune)
	if err != nil {
		return out, err
	}
	if cleanup != nil {
		defer cleanup()
	}
	lctx, cancelLoad := context.WithCancel(ctx)
	defer cancelLoad()
	cl := &sweepClient{addr: r.e.HTTPAddr}
	stop := make(chan struct{})
	cl.pace(lctx, sweepShortEvery, 0, stop)
	cl.pace(lctx, sweepMediumEvery, sweepMedium, stop)
	if !sleepCtx(ctx, c.warmup) { // warm-up traffic (deliberate timing)
		close(stop)
		return out, ctx.Err()
	}
	// Termination begins: the long requests start, and the arrivals stop P later.
	origin := time.Now()
	for _, d := range sweepLong {
		cl.send(lctx, d)
	}
	stopTimer := time.AfterFunc(P, func() { close(stop) })
	t := terminate(ctx, c, r, sp.p, release)
	// Every request ends by itself: the arrivals stop at P, and each request is bounded by its length plus
	// testbed.RequestTimeout. The bench's cap bounds a client that hangs anyway.
	all := make(chan struct{})
	go func() { cl.wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(P + sweepLong[len(sweepLong)-1] + 2*testbed.RequestTimeout):
		cancelLoad()
		<-all
	case <-ctx.Done():
		stopTimer.Stop()
		cancelLoad()
		<-all
		return out, ctx.Err()
	}
	for _, q := range cl.reqs { // the warm-up's requests included: they count as sent (and could fail)
		if q.class == "canceled" {
			continue
		}
		out.Sent++
		if q.class == "" {
			continue
		}
		out.Failed++
		out.Errors[q.class]++
		out.FailedByLen[lengthName(q.length)]++
	}
	out.LastNewS, out.LastEndS, out.LimitS = limitOf(origin, cl.reqs)
	out.TerminateS, out.ReleaseS = secs(origin, t.exit), secs(origin, t.release)
	out.OverS = out.TerminateS - out.LimitS
	out.Capped, out.Outcome, out.Hook, out.EnvoyExit = t.capped, t.outcome, t.hook, envoyExit(r, t)
	if t.sidecar != nil {
		out.Sidecar = t.sidecar()
	}
	if sp.p.name == "ours" || strings.HasPrefix(sp.p.name, "ours-") {
		out.Phases = drainPhases(filepath.Join(r.dir, "manager.log"))
	}
	return out, nil
}

// lengthName names a request by its length: "short" (GET /) or "1s", "6s".
func lengthName(d time.Duration) string {
	if d == 0 {
		return "short"
	}
	return d.String()
}

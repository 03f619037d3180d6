package main

// The propagation sweep (issues 19 and 29): a load balancer that takes P seconds to stop sending, at several
// arrival rates. Clients keep opening new connections for P s after termination begins, at the row's rate,
// while requests of several lengths run; each policy is measured against the physical limit of that traffic —
// the later of the last new connection and the end of the last request — which no policy can beat without
// knowing the future.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
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
// Arrivals are open-loop (on a schedule drawn before the run, whatever the answers), as a load balancer's
// clients do not slow down for a dying backend.
//
// The arrivals are short requests (GET /), a load balancer's usual traffic: so short that nothing is in flight
// most of the time, which is what a policy that counts the work in flight sees between arrivals. They come
// from one source of a given rate (sweepRates), from c.warmup before termination begins until P after.
// Issue 19's sweep had one traffic shape (a GET / every 20 ms and a 1 s request every 2 s); issue 29 made the
// rate a dimension, because the adaptive quiet period reads it: the 1 s requests are left out, so that the
// rate named is the rate the manager sees.

// sweepLong are requests in flight when termination begins (started with it), one of each length: the
// load scenario's long lengths up to 6 s, so that in-flight work sets the limit while the arrivals stop
// before 6 s and the arrivals set it after.
var sweepLong = []time.Duration{2 * time.Second, 4 * time.Second, 6 * time.Second}

// sweepPropagations are issue 19's P values, and 20 s: past Envoy Gateway's 10 s floor, where a cloud load
// balancer with slow health checks (or NLB in IP mode, minutes) still sends.
var sweepPropagations = []time.Duration{500 * time.Millisecond, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second}

// sweepSource is an arrival process of the sweep: Poisson arrivals at perS a second, or, with burst > 0,
// bursts of burst requests every burstInt (burstPace apart within a burst, the first at termination's start).
type sweepSource struct {
	name      string
	perS      float64       // mean arrivals a second
	burst     int           // requests per burst; 0: Poisson arrivals at perS
	burstInt  time.Duration // a burst begins this often
	burstPace time.Duration // the requests of a burst are this far apart
	ps        []time.Duration
}

// sweepRates are the sweep's arrival rates (issue 29: about 50/s, 5/s, 0.5/s, 0.2/s and a bursty source),
// each with the P values it runs at. Arrivals are at random (a Poisson process: exponential gaps), the
// honest test of the adaptive rule, whose rate term assumes random arrivals (a fixed pace never shows a
// gap longer than its interval, which is kinder to any rule that reads gaps). Every policy of a row sees
// the same arrivals: the schedule is drawn from a seed of the rate, P and run.
//
// Only 50/s runs at every P: the sparser sources run at fewer, to keep the sweep under 25 minutes on 2 busy
// CPUs. At 5/s a P of 0.5 s holds 2 or 3 arrivals after termination begins and the 6 s request sets the
// limit, as at P = 2 s; at 0.5/s and 0.2/s a P of 0.5 or 2 s holds none in most runs (the row would repeat
// "no traffic"), and each of their rows costs up to 30 s per policy (ours holds up to 10 s after the last
// arrival). The bursty source (20 requests 20 ms apart every 3 s, 6.7/s on average, silent 2.6 s between
// bursts) is what the rule's "twice the longest silence" term is for; a P of 0.5 or 2 s holds one burst,
// which 50/s's rows cover (a dense source that stops), so it starts at the first P with two bursts.
var sweepRates = []sweepSource{
	{name: "50/s", perS: 50, ps: sweepPropagations},
	{name: "5/s", perS: 5, ps: sweepPropagations[1:]},
	{name: "0.5/s", perS: 0.5, ps: []time.Duration{5 * time.Second, 20 * time.Second}},
	{name: "0.2/s", perS: 0.2, ps: []time.Duration{10 * time.Second, 20 * time.Second}},
	{name: "bursty", perS: 20.0 / 3, burst: 20, burstInt: 3 * time.Second, burstPace: 20 * time.Millisecond,
		ps: []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second}},
}

// describe says what the source sends, for the report.
func (s sweepSource) describe() string {
	if s.burst > 0 {
		return fmt.Sprintf("bursts of %d requests %s apart every %s (%.1f/s on average), the first at the start of termination",
			s.burst, s.burstPace, secondsText(s.burstInt), s.perS)
	}
	return fmt.Sprintf("at random (Poisson), %g/s on average", s.perS)
}

// sweepSeed is the seed of a row's arrivals: the same for every policy of the row, different across rows
// and runs.
func sweepSeed(rate string, P time.Duration, run int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s %s %d", rate, P, run)
	return h.Sum64()
}

// schedule is the source's arrivals in [from, to), as offsets from the start of termination, in order.
func (s sweepSource) schedule(seed uint64, from, to time.Duration) []time.Duration {
	var out []time.Duration
	if s.burst > 0 {
		// Bursts at every multiple of burstInt, so that one begins with termination.
		first := -time.Duration(int64(-from)/int64(s.burstInt)) * s.burstInt
		for b := first; b < to; b += s.burstInt {
			for i := range s.burst {
				if at := b + time.Duration(i)*s.burstPace; at >= from && at < to {
					out = append(out, at)
				}
			}
		}
		return out
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	for at := from; ; {
		at += time.Duration(rng.ExpFloat64() / s.perS * float64(time.Second))
		if at >= to {
			return out
		}
		out = append(out, at)
	}
}

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
	pick := c.sweepPolicies
	switch {
	case len(pick) == 0:
		pick = sweepDefaultPolicies
	case slices.Equal(pick, []string{"all"}):
		return out
	}
	return slices.DeleteFunc(out, func(sp sweepPolicy) bool { return !slices.Contains(pick, sp.p.name) })
}

// sweepDefaultPolicies are the policies the sweep runs unless -sweep-policies names others ("all": every
// one): ours with its defaults, the former default beside it, Istio's fixed 5 s and the peers. The other
// fixed waits and ours' variants lose or win the same way at every rate (issue 19's SWEEP.md); with five
// rates they would take the sweep past 25 minutes.
var sweepDefaultPolicies = []string{"fixed5s", "ours", "ours-fixed3", "contour", "envoygateway"}

// SweepResults is what the sweep measured; plot.py reads it from sweep.json.
type SweepResults struct {
	Machine  Machine      `json:"machine"`
	Policies []PolicyInfo `json:"policies"`
	Traffic  string       `json:"traffic"`
	Rates    []SweepRate  `json:"rates"`
	Cap      float64      `json:"cap_s"`
	Runs     []SweepRun   `json:"runs"`
	Seconds  float64      `json:"seconds"` // how long the sweep took
	Load     string       `json:"load"`    // the machine's load average before and after, from /proc/loadavg
}

// SweepRate is a source of the sweep, for the report.
type SweepRate struct {
	Name     string    `json:"name"`
	PerS     float64   `json:"per_s"`
	Describe string    `json:"describe"`
	P        []float64 `json:"propagation_s"` // the P values it ran at
}

// SweepRun is one termination of the sweep. Times are seconds from the start of termination.
type SweepRun struct {
	Rate         string         `json:"rate"`
	PropagationS float64        `json:"propagation_s"`
	Arrivals     int            `json:"arrivals_after_start"` // the source's arrivals from the start of termination to P
	Policy       string         `json:"policy"`
	Run          int            `json:"run"`
	Sent         int            `json:"sent"`
	Failed       int            `json:"failed"`
	Errors       map[string]int `json:"errors"`
	FailedByLen  map[string]int `json:"failed_by_length"`
	TerminateS   float64        `json:"time_to_terminate_s"` // -1: capped, or Envoy killed by the bench
	ReleaseS     float64        `json:"release_s"`
	LastNewS     float64        `json:"last_new_connection_s"`
	LongestGapS  float64        `json:"longest_gap_s"`      // the longest silence between new connections the client left, from the start to the last one
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

// longestGap is the longest silence between two new connections the client opened, from origin to the last
// one, in seconds: what the manager could have seen of the source (a client starved on a busy machine sends
// late, and this shows it), to tell the source's silences from the manager's view of them.
func longestGap(origin time.Time, reqs []sweepReq) float64 {
	var starts []time.Time
	for _, r := range reqs {
		if r.class != "canceled" && !r.start.Before(origin) {
			starts = append(starts, r.start)
		}
	}
	slices.SortFunc(starts, time.Time.Compare)
	prev, gap := origin, 0.0
	for _, at := range starts {
		gap = max(gap, at.Sub(prev).Seconds())
		prev = at
	}
	return gap
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

// play sends a GET / at origin + at for each offset of schedule (in order), until ctx is done.
func (s *sweepClient) play(ctx context.Context, origin time.Time, schedule []time.Duration) {
	s.wg.Go(func() {
		t := time.NewTimer(time.Hour)
		defer t.Stop()
		for _, at := range schedule {
			if wait := time.Until(origin.Add(at)); wait > 0 {
				t.Reset(wait)
				select {
				case <-t.C:
				case <-ctx.Done():
					return
				}
			}
			s.send(ctx, 0)
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

// scenarioSweep runs every sweep policy at every rate and P, c.sweepRuns times, and writes sweep.json (after
// every run, so that an interrupted sweep keeps what it measured).
func scenarioSweep(ctx context.Context, c *config, res *Results) error {
	t0 := time.Now()
	sr := &SweepResults{Machine: res.Machine, Cap: c.capAfter.Seconds(), Load: loadAvg()}
	sr.Traffic = fmt.Sprintf("from %s before termination begins until P after, a GET / from the row's source (its rate: below), "+
		"each on a new connection (Connection: close, no retries); at the start of termination one request each of %s, "+
		"also on new connections", c.warmup, durationsText(sweepLong))
	rates, err := c.sweepSources()
	if err != nil {
		return err
	}
	for _, src := range rates {
		info := SweepRate{Name: src.name, PerS: src.perS, Describe: src.describe()}
		for _, P := range src.ps {
			info.P = append(info.P, P.Seconds())
		}
		sr.Rates = append(sr.Rates, info)
	}
	pols := sweepPolicies(c)
	for _, sp := range pols {
		p := sp.p
		sr.Policies = append(sr.Policies, PolicyInfo{Name: p.name, Label: p.label, Recreated: p.recreated, Real: p.real,
			Envoy: p.envoy, Describe: p.describe, Available: p.available, Unavailble: p.unavailable})
	}
	write := func() error {
		sr.Seconds = time.Since(t0).Seconds()
		sr.Machine.Finished = time.Now().UTC().Format(time.RFC3339)
		b, err := json.MarshalIndent(sr, "", " ")
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(c.out, "sweep.json"), b, 0o644)
	}
	var errs []error
	for run := 1; run <= c.sweepRuns; run++ {
		for _, src := range rates {
			for _, P := range src.ps {
				for _, sp := range pols {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					r, err := sweepOnce(ctx, c, sp, src, P, run)
					if err != nil {
						errs = append(errs, fmt.Errorf("%s %s P=%s run %d: %w", sp.p.name, src.name, P, run, err))
						fmt.Fprintf(os.Stderr, "bench: sweep %s %s P=%s run %d: %v\n", sp.p.name, src.name, P, run, err)
						continue
					}
					fmt.Printf("sweep %-6s P=%-5s %-13s run %d: failed %d of %d %v, release %.2fs, terminate %.2fs, limit %.2fs (last new %.2fs, last end %.2fs), over %+.2fs, %s %q\n",
						src.name, P, sp.p.name, run, r.Failed, r.Sent, r.Errors, r.ReleaseS, r.TerminateS, r.LimitS, r.LastNewS, r.LastEndS, r.OverS, r.Outcome, r.Phases)
					sr.Runs = append(sr.Runs, r)
					if err := write(); err != nil {
						return err
					}
				}
			}
		}
	}
	load := sr.Load
	sr.Load += " -> " + loadAvg()
	if err := write(); err != nil {
		sr.Load = load
		return err
	}
	return errors.Join(errs...)
}

// sweepSources are the rates -sweep-rates picks (all by default), each with its P values, or with -sweep-p's
// when that was given.
func (c *config) sweepSources() ([]sweepSource, error) {
	var out []sweepSource
	for _, src := range sweepRates {
		if len(c.sweepRates) == 0 || slices.Contains(c.sweepRates, src.name) {
			if c.sweepP != nil {
				src.ps = c.sweepP
			}
			out = append(out, src)
		}
	}
	for _, name := range c.sweepRates {
		if !slices.ContainsFunc(sweepRates, func(s sweepSource) bool { return s.name == name }) {
			return nil, fmt.Errorf("-sweep-rates: no rate %q (%s)", name, sweepRateNames())
		}
	}
	return out, nil
}

// sweepRateNames lists the rates' names: "50/s,5/s,0.5/s,0.2/s,bursty".
func sweepRateNames() string {
	var s []string
	for _, src := range sweepRates {
		s = append(s, src.name)
	}
	return strings.Join(s, ",")
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

// sweepOnce is one termination: the source's arrivals for c.warmup, then termination begins while they go
// on until P and the long requests run; the run ends when every request has ended.
func sweepOnce(ctx context.Context, c *config, sp sweepPolicy, src sweepSource, P time.Duration, run int) (SweepRun, error) {
	out := SweepRun{Rate: src.name, PropagationS: P.Seconds(), Policy: sp.p.name, Run: run, Errors: map[string]int{}, FailedByLen: map[string]int{}}
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
	schedule := src.schedule(sweepSeed(src.name, P, run), -c.warmup, P)
	for _, at := range schedule {
		if at >= 0 {
			out.Arrivals++
		}
	}
	// Termination begins at origin, c.warmup after the first possible arrival.
	origin := time.Now().Add(c.warmup)
	cl.play(lctx, origin, schedule)
	if !sleepCtx(ctx, time.Until(origin)) { // warm-up traffic (deliberate timing)
		cancelLoad()
		cl.wg.Wait()
		return out, ctx.Err()
	}
	for _, d := range sweepLong {
		cl.send(lctx, d)
	}
	t := terminate(ctx, c, r, sp.p, release)
	// Every request ends by itself: the arrivals stop at P, and each request is bounded by its length plus
	// testbed.RequestTimeout. The bench's cap bounds a client that hangs anyway.
	all := make(chan struct{})
	go func() { cl.wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(time.Until(origin.Add(P)) + sweepLong[len(sweepLong)-1] + 2*testbed.RequestTimeout):
		cancelLoad()
		<-all
	case <-ctx.Done():
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
	out.LongestGapS = longestGap(origin, cl.reqs)
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

package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// ---- 1. Failed requests and time to terminate under load ----

// LoadRun is one termination under load.
type LoadRun struct {
	Variant         string           `json:"variant"` // loadVariant.name
	Policy          string           `json:"policy"`
	Run             int              `json:"run"`
	Sent            int64            `json:"sent"`
	OK              int64            `json:"ok"`
	Failed          int64            `json:"failed"`
	Errors          map[string]int64 `json:"errors"`
	LongFailed      int64            `json:"long_failed"`
	TCPFailed       int64            `json:"tcp_failed"`
	PoolFIN         int              `json:"pool_fin"`
	PoolRST         int              `json:"pool_rst"`
	PoolOther       int              `json:"pool_other"`
	PoolOpen        int              `json:"pool_open"`
	ReleaseS        float64          `json:"release_s"`           // termination start -> release (-1: unknown/capped)
	TerminateS      float64          `json:"time_to_terminate_s"` // termination start -> Envoy exit (-1: capped)
	LastWorkS       float64          `json:"last_work_end_s"`     // termination start -> the last request or TCP connection ended
	Capped          bool             `json:"capped"`
	Outcome         string           `json:"outcome"`
	PoolConnections int              `json:"pool_connections"`
	Hook            string           `json:"hook"`    // how Envoy's preStop hook ended, as kubelet sees it
	Sidecar         sidecarStory     `json:"sidecar"` // the policy's own process: its hook, its exit, its verdict
	EnvoyExit       string           `json:"envoy_exit"`
}

// loadVariant is what a load scenario changes: the idle pool, and Envoy's HTTP idle timeout.
type loadVariant struct {
	name        string
	pool        int           // idle keep-alive connections of a load balancer's pool
	idleTimeout time.Duration // the HTTP manager's idle_timeout (0: Envoy's default, 1 h)
}

var (
	loadDefaults = loadVariant{name: "pool-idle1h", pool: loadPool}
	loadIdle60   = loadVariant{name: "pool-idle60s", pool: loadPool, idleTimeout: 60 * time.Second}
	loadNoPool   = loadVariant{name: "nopool-idle1h"}
)

// loadMix is the traffic of the load scenario.
const (
	loadKeepAlive     = 8                     // HTTP/1.1 keep-alive clients ...
	loadKeepAliveGap  = 20 * time.Millisecond // ... each sending GET / this far apart (a few hundred rps)
	loadH2Streams     = 4                     // HTTP/2 streams of GET /sleep?d=50ms on one connection
	loadLongPerLength = 2                     // clients per length of long requests (2, 4, 6, 8 s)
	loadTCPHold       = 10 * time.Second      // one TCP connection through the proxy, closed by the client
	loadPool          = 50                    // idle keep-alive connections of a load balancer's pool
)

var loadLongLengths = []time.Duration{2 * time.Second, 4 * time.Second, 6 * time.Second, 8 * time.Second}

func scenarioLoad(ctx context.Context, c *config, res *Results, series *seriesWriter, v loadVariant) error {
	for run := 1; run <= c.loadRuns; run++ {
		for _, p := range selectedPolicies(c) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			lr, err := loadOnce(ctx, c, p, run, series, v)
			if err != nil {
				return fmt.Errorf("%s run %d: %w", p.name, run, err)
			}
			fmt.Printf("load %s %-13s run %d: failed %d of %d %v, release %.2fs, terminate %.2fs, last work %.2fs, pool fin/rst %d/%d, %s, hook %s, %+v\n",
				v.name, p.name, run, lr.Failed, lr.Sent, lr.Errors, lr.ReleaseS, lr.TerminateS, lr.LastWorkS, lr.PoolFIN, lr.PoolRST,
				lr.Outcome, lr.Hook, lr.Sidecar)
			res.Load = append(res.Load, lr)
		}
	}
	return nil
}

func loadOnce(ctx context.Context, c *config, p policy, run int, series *seriesWriter, v loadVariant) (LoadRun, error) {
	lr := LoadRun{Variant: v.name, Policy: p.name, Run: run, PoolConnections: v.pool}
	r, closeRig, err := newRig(ctx, c, p, tuning{}, testbed.Options{HTTPIdleTimeout: v.idleTimeout})
	if err != nil {
		return lr, err
	}
	defer closeRig()
	release, cleanup, err := p.prepare(ctx, r, tuning{})
	if err != nil {
		return lr, err
	}
	if cleanup != nil {
		defer cleanup()
	}
	lctx, cancelLoads := context.WithCancel(ctx)
	defer cancelLoads()
	var pool *testbed.Pool
	if v.pool > 0 {
		if pool, err = testbed.IdlePool(lctx, r.e.HTTPAddr, v.pool); err != nil {
			return lr, err
		}
		defer pool.Close()
	}
	loads := map[string]*testbed.Load{
		"keepalive": testbed.KeepAlive(lctx, r.e.HTTPAddr, loadKeepAlive, loadKeepAliveGap, "/"),
		"http2":     testbed.HTTP2(lctx, r.e.HTTPAddr, loadH2Streams, "/sleep?d=50ms"),
		"tcp":       testbed.TCPHold(lctx, r.e.TCPAddr, loadTCPHold),
	}
	for _, d := range loadLongLengths {
		loads["long"+d.String()] = testbed.KeepAlive(lctx, r.e.HTTPAddr, loadLongPerLength, 0, "/sleep?d="+d.String())
	}
	failed := func() int64 {
		var n int64
		for _, l := range loads {
			n += l.Snapshot().Failed
		}
		return n
	}
	// Sample times are relative to the start of termination, known in advance.
	t0 := time.Now().Add(c.warmup)
	stopSampling := make(chan struct{})
	smp := startSampler(lctx, c, r, v.name, p.name, run, series, t0, failed, stopSampling)
	defer func() { close(stopSampling); <-smp.done }()
	// Record when each load finishes: the last work's end.
	var mu sync.Mutex
	var lastWork time.Time
	for _, l := range loads {
		go func() {
			<-l.Done()
			mu.Lock()
			lastWork = time.Now()
			mu.Unlock()
		}()
	}
	if !sleepCtx(ctx, time.Until(t0)) { // warm-up load (deliberate timing)
		return lr, ctx.Err()
	}
	// Endpoint removal: after the propagation delay clients start nothing new; what is in flight goes on.
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		if !sleepCtx(ctx, c.propagation) {
			return
		}
		var wg sync.WaitGroup
		for _, l := range loads {
			wg.Go(l.Drain)
		}
		wg.Wait()
	}()
	t := terminate(ctx, c, r, p, release)
	select {
	case <-drained:
	case <-time.After(30 * time.Second):
		cancelLoads() // bounded: a load stuck 30 s after Envoy is gone is aborted
		<-drained
	}
	// Envoy is gone: every idle connection of the pool has been ended by the kernel.
	var pc testbed.PoolCounts
	if pool != nil {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		pool.WaitEnded(wctx, v.pool)
		wcancel()
		pc = pool.Counts()
	}
	lr.PoolFIN, lr.PoolRST, lr.PoolOther, lr.PoolOpen = pc.FIN, pc.RST, pc.Other, pc.Open
	lr.Hook, lr.EnvoyExit = t.hook, envoyExit(r, t)
	if t.sidecar != nil {
		lr.Sidecar = t.sidecar()
	}
	lr.Errors = map[string]int64{}
	for name, l := range loads {
		res := l.Wait()
		lr.Sent += res.Sent
		lr.OK += res.OK
		lr.Failed += res.Failed
		for k, v := range res.Errors {
			lr.Errors[k] += v
		}
		if strings.HasPrefix(name, "long") {
			lr.LongFailed += res.Failed
		}
		if name == "tcp" {
			lr.TCPFailed += res.Failed
		}
	}
	if n := int64(pc.RST + pc.Other); n > 0 {
		lr.Failed += n
		lr.Errors["pool_reset"] += n
	}
	mu.Lock()
	lr.LastWorkS = secs(t.start, lastWork)
	mu.Unlock()
	lr.ReleaseS, lr.TerminateS, lr.Capped, lr.Outcome = secs(t.start, t.release), secs(t.start, t.exit), t.capped, t.outcome
	return lr, nil
}

// envoyExit says how Envoy ended: "exit N", "signal X", or that the bench killed it.
func envoyExit(r *rig, t termination) string {
	ps := r.e.Cmd.ProcessState
	switch {
	case ps == nil:
		return "running"
	case r.e.Killed() || t.capped && t.exit.IsZero():
		return "killed by the bench"
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit %d", ps.ExitCode())
}

// ---- 1b. No Envoy at all ----

// NoEnvoyRun is one termination of a pod whose Envoy is gone (crashed, OOM-killed, never started): what
// the policy does with nothing to drain.
type NoEnvoyRun struct {
	Policy   string       `json:"policy"`
	Run      int          `json:"run"`
	ReleaseS float64      `json:"release_s"` // termination start -> Envoy's hook returned (-1: never, capped)
	Capped   bool         `json:"capped"`
	Hook     string       `json:"hook"`
	Outcome  string       `json:"outcome"`
	Sidecar  sidecarStory `json:"sidecar"`
}

// scenarioNoEnvoy starts each sidecar policy beside an Envoy, kills Envoy (SIGKILL) and terminates the pod.
// Its cap is at least 75 s, so that a 60 s drain timeout shows as what it is, not as a cap.
func scenarioNoEnvoy(ctx context.Context, c *config, res *Results) error {
	capAfter := max(c.capAfter, 75*time.Second)
	for run := 1; run <= c.noEnvoyRuns; run++ {
		for _, p := range selectedPolicies(c) {
			if p.agent || p.name == "plain" || p.name == "fixed5s" { // no sidecar, nothing that could notice
				continue
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			nr, err := noEnvoyOnce(ctx, c, p, run, capAfter)
			if err != nil {
				return fmt.Errorf("%s run %d: %w", p.name, run, err)
			}
			fmt.Printf("noenvoy %-13s run %d: release %.2fs, hook %s, %s, %+v\n", p.name, run, nr.ReleaseS, nr.Hook, nr.Outcome, nr.Sidecar)
			res.NoEnvoy = append(res.NoEnvoy, nr)
		}
	}
	return nil
}

func noEnvoyOnce(ctx context.Context, c *config, p policy, run int, capAfter time.Duration) (NoEnvoyRun, error) {
	nr := NoEnvoyRun{Policy: p.name, Run: run}
	cc := *c
	cc.capAfter = capAfter // the pods' grace periods are bounded by the cap
	r, closeRig, err := newRig(ctx, &cc, p, tuning{}, testbed.Options{})
	if err != nil {
		return nr, err
	}
	defer closeRig()
	release, cleanup, err := p.prepare(ctx, r, tuning{})
	if err != nil {
		return nr, err
	}
	if cleanup != nil {
		defer cleanup()
	}
	r.e.Stop() // Envoy is gone before termination begins
	start := time.Now()
	capCtx, cancel := context.WithTimeout(ctx, capAfter)
	rr := release(capCtx)
	cancel()
	nr.Capped, nr.Hook, nr.Outcome = rr.capped, rr.hook, rr.outcome
	nr.ReleaseS = -1
	if !rr.capped && !rr.at.IsZero() {
		nr.ReleaseS = rr.at.Sub(start).Seconds()
	}
	if rr.sidecar != nil {
		nr.Sidecar = rr.sidecar()
	}
	return nr, nil
}

// ---- 2. Release latency ----

// LatencyRun is one measurement of the time from the end of the last work to the release.
type LatencyRun struct {
	Policy    string  `json:"policy"`
	Work      string  `json:"work"` // "http" (one long request) or "tcp" (one TCP connection)
	Run       int     `json:"run"`
	WorkS     float64 `json:"work_s"`     // how long the work lasted
	LatencyMS float64 `json:"latency_ms"` // work ended (client side) -> release; negative: released before the work ended
	Outcome   string  `json:"outcome"`
}

func scenarioLatency(ctx context.Context, c *config, res *Results) error {
	// The quiet period off: these scenarios measure the release after the last request (issue 19's sweep
	// measures the quiet period).
	ours := tuning{managerArgs: []string{"--min-drain-duration", "300ms", "--quiet-period", "0s", "--drain-timeout", "30s"}}
	byName := map[string]policy{}
	for _, p := range selectedPolicies(c) {
		byName[p.name] = p
	}
	type plan struct {
		p      policy
		work   string
		runs   int
		length func() time.Duration
		tune   tuning
	}
	var plans []plan
	if p, ok := byName["serve"]; ok {
		plans = append(plans,
			plan{p, "http", c.latencyRuns, uniform(700*time.Millisecond, 1300*time.Millisecond), ours},
			plan{p, "tcp", c.latencyTCP, uniform(700*time.Millisecond, 1300*time.Millisecond), ours})
	}
	if p, ok := byName["run"]; ok {
		plans = append(plans, plan{p, "http", max(c.peerRuns*2, 1), uniform(700*time.Millisecond, 1300*time.Millisecond), ours})
	}
	if p, ok := byName["contour"]; ok {
		plans = append(plans, plan{p, "http", c.peerRuns, uniform(time.Second, 6*time.Second), tuning{}})
	}
	if p, ok := byName["envoygateway"]; ok {
		plans = append(plans, plan{p, "http", c.peerRuns, uniform(10200*time.Millisecond, 11200*time.Millisecond), tuning{}})
	}
	for _, pl := range plans {
		var shared *rig // one Envoy for every run (health checks restored between runs), except for `run`
		if !pl.p.agent {
			r, closeRig, err := newRig(ctx, c, pl.p, pl.tune, testbed.Options{})
			if err != nil {
				return err
			}
			defer closeRig()
			shared = r
		}
		var lat []float64
		for i := 1; i <= pl.runs; i++ {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			lr, err := latencyOnce(ctx, c, pl.p, pl.tune, shared, pl.work, pl.length())
			if err != nil {
				return fmt.Errorf("%s %s run %d: %w", pl.p.name, pl.work, i, err)
			}
			lr.Run = i
			res.Latency = append(res.Latency, lr)
			lat = append(lat, lr.LatencyMS)
		}
		fmt.Printf("latency %-13s %-4s %d runs: median %.1f ms, max %.1f ms\n", pl.p.name, pl.work, len(lat), quantile(lat, 0.5), quantile(lat, 1))
	}
	return nil
}

func uniform(lo, hi time.Duration) func() time.Duration {
	return func() time.Duration { return lo + time.Duration(rand.Int64N(int64(hi-lo))) }
}

// latencyOnce runs one piece of work of length d as the only work in flight, begins termination while it
// runs, and measures from its end (client side) to the release.
func latencyOnce(ctx context.Context, c *config, p policy, tune tuning, shared *rig, work string, d time.Duration) (LatencyRun, error) {
	lr := LatencyRun{Policy: p.name, Work: work, WorkS: d.Seconds()}
	r := shared
	if r == nil {
		nr, closeRig, err := newRig(ctx, c, p, tune, testbed.Options{})
		if err != nil {
			return lr, err
		}
		defer closeRig()
		r = nr
	} else if _, err := r.e.AdminPost(ctx, "/healthcheck/ok"); err != nil { // LIVE again for the next drain
		return lr, err
	}
	release, cleanup, err := p.prepare(ctx, r, tune)
	if err != nil {
		return lr, err
	}
	if cleanup != nil {
		defer cleanup()
	}
	var l *testbed.Load
	var filter string
	if work == "tcp" {
		l = testbed.TCPHold(ctx, r.e.TCPAddr, d)
		filter = `^listener\.ingress_tcp\.downstream_cx_active$`
	} else {
		l = testbed.Long(ctx, r.e.HTTPAddr, 1, d)
		filter = `^http\.ingress_http\.downstream_rq_active$`
	}
	defer l.Stop()
	ended := make(chan time.Time, 1)
	go func() { <-l.Done(); ended <- time.Now() }()
	if err := awaitStat(ctx, r.e, filter, 2*time.Second, func(st map[string]int64) bool {
		for _, v := range st {
			if v >= 1 {
				return true
			}
		}
		return false
	}); err != nil {
		return lr, err
	}
	var rr releaseResult
	capCtx, cancel := context.WithTimeout(ctx, c.capAfter)
	defer cancel()
	if p.agent {
		t := terminate(ctx, c, r, p, release)
		rr = releaseResult{at: t.release, capped: t.capped, outcome: t.outcome}
	} else {
		rr = release(capCtx) // the Envoy stays: no SIGTERM, the next run restores its health checks
	}
	var end time.Time
	select {
	case end = <-ended:
	case <-time.After(d + testbed.RequestTimeout):
		return lr, fmt.Errorf("the work did not end")
	}
	if res := l.Wait(); res.Failed > 0 {
		lr.Outcome = "work failed: " + res.String() + "; "
	}
	lr.Outcome += rr.outcome
	if rr.capped || rr.at.IsZero() {
		lr.LatencyMS = -1
		lr.Outcome += " (no release time)"
		return lr, nil
	}
	lr.LatencyMS = float64(rr.at.Sub(end).Microseconds()) / 1000
	return lr, nil
}

// ---- 3. Idle termination ----

// IdleRun is one termination with no traffic at all.
type IdleRun struct {
	Policy   string  `json:"policy"`
	Run      int     `json:"run"`
	ReleaseS float64 `json:"release_s"`
	ExitS    float64 `json:"exit_s"`
	Capped   bool    `json:"capped"`
	Outcome  string  `json:"outcome"`
}

func scenarioIdle(ctx context.Context, c *config, res *Results) error {
	for run := 1; run <= c.idleRuns; run++ {
		for _, p := range selectedPolicies(c) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r, closeRig, err := newRig(ctx, c, p, tuning{}, testbed.Options{})
			if err != nil {
				return err
			}
			ir := IdleRun{Policy: p.name, Run: run}
			release, cleanup, err := p.prepare(ctx, r, tuning{})
			if err != nil {
				closeRig()
				return err
			}
			t := terminate(ctx, c, r, p, release)
			if cleanup != nil {
				cleanup()
			}
			closeRig()
			ir.ReleaseS, ir.ExitS, ir.Capped, ir.Outcome = secs(t.start, t.release), secs(t.start, t.exit), t.capped, t.outcome
			fmt.Printf("idle %-13s run %d: release %.3fs exit %.3fs %s\n", p.name, run, ir.ReleaseS, ir.ExitS, ir.Outcome)
			res.Idle = append(res.Idle, ir)
		}
	}
	return nil
}

// ---- 4. Poll cost vs configuration size ----

// PollRun is one poll of one query against one configuration.
type PollRun struct {
	Clusters   int     `json:"clusters"`
	Listeners  int     `json:"listeners"`
	Query      string  `json:"query"` // "ours", "contour", "envoygateway", "marin3r"
	Run        int     `json:"run"`
	Bytes      int     `json:"bytes"`
	MS         float64 `json:"ms"`           // fetch + parse, wall clock
	EnvoyCPUMS float64 `json:"envoy_cpu_ms"` // Envoy's CPU (utime+stime, 10 ms ticks) during the poll
	Samples    int     `json:"samples"`      // stats parsed
	StartS     float64 `json:"envoy_start_s"`
	EnvoyRSSMB float64 `json:"envoy_rss_mb"`
	// Error: a peer's query that got no answer (MARIN3R's unfiltered one can outlast the admin client's
	// timeout on a large configuration). It is that policy's measured cost, not a failure of the bench.
	Error string `json:"error,omitempty"`
}

// ourQuery is the manager's poll (envoyadmin.Client.Stats).
var ourQuery = "/stats?" + envoyadmin.StatsQuery

func scenarioPollCost(ctx context.Context, c *config, res *Results) error {
	plain := allPolicies(c)[0]
	for _, cfg := range splitList(c.pollConfigs) {
		cs, ls, ok := strings.Cut(cfg, ":")
		clusters, err1 := strconv.Atoi(cs)
		listeners, err2 := strconv.Atoi(ls)
		if !ok || err1 != nil || err2 != nil || clusters < 2 || listeners < 2 {
			return fmt.Errorf("-poll-configs %q: want clusters:listeners, each >= 2", cfg)
		}
		t0 := time.Now()
		// The testbed's own 2 clusters and 2 listeners count.
		r, closeRig, err := newRig(ctx, c, plain, tuning{}, testbed.Options{ExtraClusters: clusters - 2,
			ExtraListeners: listeners - 2, StartTimeout: 5 * time.Minute})
		if err != nil {
			return fmt.Errorf("%s: %w", cfg, err)
		}
		start := time.Since(t0).Seconds()
		pid := r.e.Cmd.Process.Pid
		ps, _ := readProc(pid)
		queries := []struct {
			name, path string
			parse      func([]byte) (int, error)
		}{
			{"ours", ourQuery, func(b []byte) (int, error) {
				s, err := envoyadmin.ParseStats(bytes.NewReader(b))
				return len(s.Listeners) + 2*len(s.HTTP), err
			}},
			{"envoygateway", egQuery, func(b []byte) (int, error) {
				_, err := sumJSONStats(b, func(n string) bool { return !egExcluded.MatchString(n) })
				return bytes.Count(b, []byte(`"name"`)), err
			}},
			{"contour", contourQuery, func(b []byte) (int, error) {
				_, n := contourConnections(b)
				return n, nil
			}},
			// MARIN3R (a port of early Contour) polls the whole Prometheus text and counts the same way.
			{"marin3r", "/stats/prometheus", func(b []byte) (int, error) {
				_, n := contourConnections(b)
				return n, nil
			}},
		}
		for _, q := range queries {
			for i := 1; i <= c.pollRuns; i++ {
				before, _ := readProc(pid)
				t := time.Now()
				body, err := adminDo(ctx, r, "GET", q.path)
				if err != nil && q.name != "ours" && ctx.Err() == nil {
					res.PollCost = append(res.PollCost, PollRun{Clusters: clusters, Listeners: listeners, Query: q.name, Run: i,
						MS: float64(time.Since(t).Microseconds()) / 1000, Error: err.Error(), StartS: start, EnvoyRSSMB: float64(ps.rssKB) / 1024})
					break // the next runs would only wait as long again
				}
				if err != nil {
					closeRig()
					return fmt.Errorf("%s %s: %w", cfg, q.name, err)
				}
				n, err := q.parse(body)
				ms := float64(time.Since(t).Microseconds()) / 1000
				after, _ := readProc(pid)
				if err != nil {
					closeRig()
					return fmt.Errorf("%s %s: parse: %w", cfg, q.name, err)
				}
				res.PollCost = append(res.PollCost, PollRun{Clusters: clusters, Listeners: listeners, Query: q.name, Run: i,
					Bytes: len(body), MS: ms, EnvoyCPUMS: float64((after.cpu - before.cpu).Milliseconds()), Samples: n,
					StartS: start, EnvoyRSSMB: float64(ps.rssKB) / 1024})
			}
			last := res.PollCost[len(res.PollCost)-1]
			if last.Error != "" {
				fmt.Printf("pollcost %5d clusters %4d listeners %-12s no answer after %.0f ms: %s\n", clusters, listeners, q.name, last.MS, last.Error)
				continue
			}
			fmt.Printf("pollcost %5d clusters %4d listeners %-12s %10d bytes %8.1f ms (last)\n", clusters, listeners, q.name, last.Bytes, last.MS)
		}
		closeRig()
	}
	return nil
}

// ---- 5. Footprint ----

// Footprint is the manager's size and idle cost, and the peers' when their binaries are given.
type Footprint struct {
	BinaryBytes int64           `json:"binary_bytes"`
	Idle        []IdleFootrint  `json:"idle"`
	Peers       []PeerFootprint `json:"peers,omitempty"`
}

// IdleFootrint is one mode of the manager, measured idle.
type IdleFootrint struct {
	Mode            string  `json:"mode"` // "serve" or "run"
	RSSKB           int64   `json:"rss_kb"`
	MeasuredS       float64 `json:"measured_s"`
	CPUSeconds      float64 `json:"cpu_s"`
	CPUSecPerMinute float64 `json:"cpu_s_per_min"`
	AdminRequests   int64   `json:"admin_requests"` // requests Envoy's admin served meanwhile, ours excluded
}

func scenarioFootprint(ctx context.Context, c *config, res *Results) error {
	fi, err := os.Stat(c.manager)
	if err != nil {
		return err
	}
	fp := &Footprint{BinaryBytes: fi.Size()}
	res.Footprint = fp
	if err := peerFootprints(ctx, c, fp); err != nil {
		return err
	}
	for _, p := range selectedPolicies(c) {
		if p.name != "serve" && p.name != "run" {
			continue
		}
		r, closeRig, err := newRig(ctx, c, p, tuning{}, testbed.Options{})
		if err != nil {
			return err
		}
		pid := r.e.Cmd.Process.Pid // `run`: the manager, Envoy's parent
		var m *testbed.Serve
		if p.name == "serve" {
			if m, err = testbed.StartServe(ctx, c.manager, r.dir, r.e.AdminURL); err != nil {
				closeRig()
				return err
			}
			pid = m.Pid()
		}
		sleepCtx(ctx, time.Second) // let the process settle before measuring (deliberate)
		adminReqs := func() int64 {
			st, _ := r.e.Stats(ctx, `^http\.admin\.downstream_rq_total$`)
			return st["http.admin.downstream_rq_total"]
		}
		a0 := adminReqs()
		p0, err := readProc(pid)
		if err != nil {
			closeRig()
			return err
		}
		sleepCtx(ctx, c.footIdle) // the measurement window
		p1, err := readProc(pid)
		if err != nil {
			closeRig()
			return err
		}
		a1 := adminReqs()
		f := IdleFootrint{Mode: p.name, RSSKB: p1.rssKB, MeasuredS: c.footIdle.Seconds(),
			CPUSeconds: (p1.cpu - p0.cpu).Seconds(), AdminRequests: a1 - a0 - 1} // -1: our own second query
		f.CPUSecPerMinute = f.CPUSeconds / c.footIdle.Seconds() * 60
		fmt.Printf("footprint %s: rss %d kB, cpu %.3fs over %s, admin requests %d\n", p.name, f.RSSKB, f.CPUSeconds, c.footIdle, f.AdminRequests)
		fp.Idle = append(fp.Idle, f)
		if m != nil {
			m.Stop()
		}
		closeRig()
	}
	return nil
}

// peerFootprints measures the sidecar server of each peer whose binary was given.
func peerFootprints(ctx context.Context, c *config, fp *Footprint) error {
	dir, err := os.MkdirTemp("", "smb")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if c.contourBin != "" {
		port, err := freePort()
		if err != nil {
			return err
		}
		pf, err := peerFootprint(ctx, c, "contour", contourPod(c.contourBin, dir, dir+"/admin.sock", port), dir)
		if err != nil {
			return fmt.Errorf("contour: %w", err)
		}
		fmt.Printf("footprint contour: binary %d bytes, rss %d kB\n", pf.BinaryBytes, pf.RSSKB)
		fp.Peers = append(fp.Peers, pf)
	}
	if c.egBin != "" {
		if err := portFree(egSidecarPort); err != nil {
			return err
		}
		pf, err := peerFootprint(ctx, c, "envoygateway", egPod(c.egBin), dir)
		os.Remove(egReadyFile)
		if err != nil {
			return fmt.Errorf("envoy gateway: %w", err)
		}
		fmt.Printf("footprint envoygateway: binary %d bytes, rss %d kB\n", pf.BinaryBytes, pf.RSSKB)
		fp.Peers = append(fp.Peers, pf)
	}
	return nil
}

// ---- 6. Scale: 10,000 keep-alive connections ----

// ScaleRun is one drain with many idle keep-alive connections and one long request.
type ScaleRun struct {
	Policy       string  `json:"policy"`
	Run          int     `json:"run"`
	Conns        int     `json:"conns"`
	EnvoyCx      int64   `json:"envoy_cx"` // Envoy's listener connections when the drain began
	PoolSetupS   float64 `json:"pool_setup_s"`
	ReleaseS     float64 `json:"release_s"`             // trigger -> release
	AfterWorkMS  float64 `json:"release_after_work_ms"` // the long request ended -> release
	ExitS        float64 `json:"exit_s"`                // trigger -> Envoy exit
	MgrCPUS      float64 `json:"mgr_cpu_s"`             // the manager's CPU, trigger -> release
	MgrCPUPerMin float64 `json:"mgr_cpu_s_per_min"`     // the same per minute of drain
	MgrRSSKB     int64   `json:"mgr_rss_kb"`            // at release
	MgrHWMKB     int64   `json:"mgr_hwm_kb"`            // peak RSS
	PoolFIN      int     `json:"pool_fin"`
	PoolRST      int     `json:"pool_rst"`
	PoolOther    int     `json:"pool_other"`
	PoolOpen     int     `json:"pool_open"`
	Outcome      string  `json:"outcome"`
}

// scaleWork is the one long request in flight during the scale drain; with the default minimum drain
// duration (5 s) it makes the drain wait for work, not just the minimum.
const scaleWork = 7 * time.Second

func scenarioScale(ctx context.Context, c *config, res *Results) error {
	var serve policy
	for _, p := range selectedPolicies(c) {
		if p.name == "serve" {
			serve = p
		}
	}
	if serve.name == "" {
		return nil
	}
	for run := 1; run <= c.scaleRuns; run++ {
		sr, err := scaleOnce(ctx, c, serve, run)
		if err != nil {
			return fmt.Errorf("run %d: %w", run, err)
		}
		fmt.Printf("scale run %d: %d conns (envoy %d), release %.2fs (%.0f ms after work), manager cpu %.3fs, hwm %d kB, pool fin/rst/open %d/%d/%d, %s\n",
			run, sr.Conns, sr.EnvoyCx, sr.ReleaseS, sr.AfterWorkMS, sr.MgrCPUS, sr.MgrHWMKB, sr.PoolFIN, sr.PoolRST, sr.PoolOpen, sr.Outcome)
		res.Scale = append(res.Scale, sr)
	}
	return nil
}

func scaleOnce(ctx context.Context, c *config, p policy, run int) (ScaleRun, error) {
	sr := ScaleRun{Policy: p.name, Run: run, Conns: c.scaleConns}
	r, closeRig, err := newRig(ctx, c, p, tuning{}, testbed.Options{Concurrency: 2})
	if err != nil {
		return sr, err
	}
	defer closeRig()
	m, err := testbed.StartServe(ctx, c.manager, r.dir, r.e.AdminURL)
	if err != nil {
		return sr, err
	}
	defer m.Stop()
	pctx, cancelPool := context.WithCancel(ctx)
	defer cancelPool()
	t := time.Now()
	pool, err := testbed.IdlePool(pctx, r.e.HTTPAddr, c.scaleConns)
	if err != nil {
		return sr, err
	}
	defer pool.Close()
	sr.PoolSetupS = time.Since(t).Seconds()
	l := testbed.Long(ctx, r.e.HTTPAddr, 1, scaleWork)
	defer l.Stop()
	ended := make(chan time.Time, 1)
	go func() { <-l.Done(); ended <- time.Now() }()
	if err := awaitStat(ctx, r.e, `^http\.ingress_http\.downstream_rq_active$`, 5*time.Second,
		func(st map[string]int64) bool { return st["http.ingress_http.downstream_rq_active"] >= 1 }); err != nil {
		return sr, err
	}
	st, _ := r.e.Stats(ctx, `^listener\.ingress_http\.downstream_cx_active$`)
	sr.EnvoyCx = st["listener.ingress_http.downstream_cx_active"]
	p0, err := readProc(m.Pid())
	if err != nil {
		return sr, err
	}
	trigger := time.Now()
	code, body, err := m.Shutdown(ctx)
	released := time.Now()
	if err != nil {
		return sr, err
	}
	p1, err := readProc(m.Pid())
	if err != nil {
		return sr, err
	}
	sr.Outcome = fmt.Sprintf("%d %s", code, body)
	sr.ReleaseS = released.Sub(trigger).Seconds()
	sr.MgrCPUS = (p1.cpu - p0.cpu).Seconds()
	sr.MgrCPUPerMin = sr.MgrCPUS / sr.ReleaseS * 60
	sr.MgrRSSKB, sr.MgrHWMKB = p1.rssKB, p1.hwmKB
	select {
	case end := <-ended:
		sr.AfterWorkMS = float64(released.Sub(end).Microseconds()) / 1000
	case <-time.After(time.Minute):
		return sr, fmt.Errorf("the long request did not end")
	}
	r.e.Signal(syscall.SIGTERM)
	select {
	case <-r.e.Exited():
		sr.ExitS = time.Since(trigger).Seconds()
	case <-time.After(30 * time.Second):
		return sr, fmt.Errorf("envoy did not exit 30 s after SIGTERM")
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	pool.WaitEnded(wctx, c.scaleConns)
	wcancel()
	pc := pool.Counts()
	sr.PoolFIN, sr.PoolRST, sr.PoolOther, sr.PoolOpen = pc.FIN, pc.RST, pc.Other, pc.Open
	return sr, nil
}

// ---- machine ----

func machine(ctx context.Context, c *config) Machine {
	m := Machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version(), EnvoyVersion: c.envoyBin.Version, Command: c.commandLine}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		m.NoFile = rl.Cur
	}
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(vctx, c.manager, "version").Output(); err == nil {
		m.Manager = strings.TrimSpace(string(out))
	}
	if cmd := os.Getenv("BENCH_COMMAND"); cmd != "" {
		m.Command = cmd
	}
	return m
}

// quantile returns the q-quantile (0..1) of xs by linear interpolation; NaN-free input expected.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	i := int(pos)
	if i >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[i] + (s[i+1]-s[i])*(pos-float64(i))
}

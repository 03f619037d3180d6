// Command bench measures how Envoy terminates under each shutdown policy: a plain SIGTERM, a fixed wait,
// the peers' policies (Contour's and Envoy Gateway's shutdown managers: their real binaries when given,
// -contour-bin and -envoy-gateway-bin, run in kubelet's order by package kubelet — bench/run.sh gives
// Contour's by default — else re-created in this program from their source), and the shutdown manager as `serve` (preStop hook) and
// as `run` (agent).
//
// It drives a real Envoy over loopback only, writes raw results to -out (results.json and
// load_series.csv), and leaves the tables and pictures to bench/plot.py. Run it with bench/run.sh
// (`make bench`), which installs Envoy, builds the manager and plots.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// config is the command line.
type config struct {
	manager    string   // the shutdown-manager binary
	contourBin string   // Contour's real binary (empty: the model runs)
	egBin      string   // Envoy Gateway's real binary (empty: the model runs)
	out        string   // results directory
	scenarios  []string // which scenarios to run
	policies   []string // which policies to run (empty: all available)

	loadRuns      int             // runs per policy of the load scenario
	latencyRuns   int             // release-latency runs of ours (HTTP)
	latencyTCP    int             // release-latency runs of ours (TCP)
	peerRuns      int             // release-latency runs of each peer
	idleRuns      int             // idle-termination runs per policy
	noEnvoyRuns   int             // no-Envoy runs per sidecar policy
	pollRuns      int             // polls per query and configuration
	scaleRuns     int             // runs of the 10,000-connection scenario
	scaleConns    int             // connections of the scale scenario
	footIdle      time.Duration   // how long the idle CPU is measured
	capAfter      time.Duration   // the bench's own bound on one termination
	warmup        time.Duration   // load before termination begins
	propagation   time.Duration   // clients keep sending new requests this long after termination begins
	sampleEvery   time.Duration   // stats sampling interval during the load scenario
	pollConfigs   string          // "clusters:listeners,..."
	sweepP        []time.Duration // the sweep's propagation delays, for every rate (nil: each rate's own)
	sweepRates    []string        // the sweep's rates (empty: all)
	sweepRuns     int             // runs of the sweep per P and policy
	sweepPolicies []string        // the sweep's policies (empty: sweepDefaultPolicies; "all": every one)
	noRun         bool            // leave out the `run` policy even if the binary has it
	quick         bool            // one run of everything, short caps: a smoke test
	commandLine   string          // how this run was started, for the report
	envoyVersion  string
	envoyBin      testbed.Binary
	runAvailable  bool
	runUnavailErr string
}

func main() {
	var c config
	var scen, pols, sweepP, sweepPols, sweepRateList string
	flag.StringVar(&c.manager, "manager", "bin/shutdown-manager", "the shutdown-manager binary")
	flag.StringVar(&c.contourBin, "contour-bin", os.Getenv("CONTOUR_BIN"),
		"Contour's `contour` binary to run instead of the model (env CONTOUR_BIN; bench/run.sh builds it by default)")
	flag.StringVar(&c.egBin, "envoy-gateway-bin", os.Getenv("ENVOY_GATEWAY_BIN"),
		"Envoy Gateway's `envoy-gateway` binary, built by you, to run instead of the model (env ENVOY_GATEWAY_BIN)")
	flag.StringVar(&c.out, "out", "bench/results", "directory for results.json and load_series.csv")
	flag.StringVar(&scen, "scenarios", strings.Join(scenarioNames, ","), "comma-separated scenarios to run")
	flag.StringVar(&pols, "policies", "", "comma-separated policies (default all): "+strings.Join(policyNames(), ","))
	flag.IntVar(&c.loadRuns, "load-runs", 3, "runs per policy of the load scenario")
	flag.IntVar(&c.latencyRuns, "latency-runs", 50, "release-latency runs of ours, one HTTP request as the last work")
	flag.IntVar(&c.latencyTCP, "latency-tcp-runs", 20, "release-latency runs of ours, one TCP connection as the last work")
	flag.IntVar(&c.peerRuns, "peer-latency-runs", 5, "release-latency runs of each peer")
	flag.IntVar(&c.idleRuns, "idle-runs", 3, "idle-termination runs per policy")
	flag.IntVar(&c.noEnvoyRuns, "noenvoy-runs", 2, "no-Envoy runs per sidecar policy (each peer's takes 60-75 s)")
	flag.IntVar(&c.pollRuns, "poll-runs", 10, "polls per query and configuration")
	flag.IntVar(&c.scaleRuns, "scale-runs", 3, "runs of the scale scenario")
	flag.IntVar(&c.scaleConns, "scale-conns", 10000, "idle keep-alive connections of the scale scenario")
	flag.DurationVar(&c.footIdle, "footprint-idle", 20*time.Second, "how long the idle manager's CPU is measured")
	flag.DurationVar(&c.capAfter, "cap", 90*time.Second, "the bench's own bound on one termination: a policy that has not released by then is reported as capped")
	flag.DurationVar(&c.warmup, "warmup", 3*time.Second, "load before termination begins")
	flag.DurationVar(&c.propagation, "propagation", time.Second, "clients keep starting new requests this long after termination begins (endpoint removal)")
	flag.DurationVar(&c.sampleEvery, "sample", 100*time.Millisecond, "stats sampling interval during the load scenario")
	flag.StringVar(&c.pollConfigs, "poll-configs", "10:10,1000:10,10000:10,10:500,10000:500", "clusters:listeners configurations of the poll-cost scenario")
	flag.StringVar(&sweepP, "sweep-p", "", "the sweep's propagation delays P for every rate (default: each rate's own, "+
		durationsList(sweepPropagations)+" at 50/s, fewer at the others): clients open new connections this long after termination begins")
	flag.StringVar(&sweepRateList, "sweep-rates", "", "comma-separated arrival rates of the sweep (default all): "+sweepRateNames())
	flag.IntVar(&c.sweepRuns, "sweep-runs", 1, "runs of the sweep per rate, P and policy")
	flag.StringVar(&sweepPols, "sweep-policies", "", "comma-separated policies of the sweep (default "+strings.Join(sweepDefaultPolicies, ",")+
		"; all: every one): fixed0s,fixed1s,fixed2s,fixed5s,fixed10s,ours,ours-fixed3,ours-low,ours-noquiet,contour,envoygateway")
	flag.BoolVar(&c.noRun, "no-run", false, "leave out the `run` policy")
	flag.BoolVar(&c.quick, "quick", false, "a smoke test: one run of everything, short caps (peers that need longer show as capped)")
	flag.Parse()
	c.scenarios = splitList(scen)
	c.policies = splitList(pols)
	c.sweepPolicies = splitList(sweepPols)
	c.sweepRates = splitList(sweepRateList)
	for _, f := range splitList(sweepP) {
		d, err := time.ParseDuration(f)
		if err != nil || d < 0 {
			fmt.Fprintf(os.Stderr, "bench: -sweep-p %q: want durations like 0.5s,2s\n", f)
			os.Exit(2)
		}
		c.sweepP = append(c.sweepP, d)
	}
	c.commandLine = strings.Join(os.Args, " ")
	if c.quick {
		c.loadRuns, c.latencyRuns, c.latencyTCP, c.peerRuns, c.idleRuns, c.pollRuns, c.scaleRuns = 1, 5, 2, 1, 1, 2, 1
		c.noEnvoyRuns = 1
		c.scaleConns = min(c.scaleConns, 1000)
		c.footIdle = 3 * time.Second
		c.capAfter = min(c.capAfter, 15*time.Second)
		c.pollConfigs = "10:10,1000:10"
		c.sampleEvery = 250 * time.Millisecond
		c.sweepRuns = 1
		if sweepP == "" {
			c.sweepP = []time.Duration{2 * time.Second, 10 * time.Second}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, &c); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// scenarioNames are the scenarios, in the order they run.
var scenarioNames = []string{"load", "load-idle60", "load-nopool", "noenvoy", "latency", "idle", "pollcost", "footprint", "scale", "sweep"}

// durationsList writes ds as a -sweep-p value: "500ms,2s".
func durationsList(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.String())
	}
	return strings.Join(s, ",")
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Results is everything one bench run measured; plot.py reads it.
type Results struct {
	Machine   Machine            `json:"machine"`
	Policies  []PolicyInfo       `json:"policies"`
	Notes     []string           `json:"notes"`
	Cap       float64            `json:"cap_s"` // the bench's own bound on one termination
	Load      []LoadRun          `json:"load,omitempty"`
	NoEnvoy   []NoEnvoyRun       `json:"noenvoy,omitempty"`
	Latency   []LatencyRun       `json:"latency,omitempty"`
	Idle      []IdleRun          `json:"idle,omitempty"`
	PollCost  []PollRun          `json:"pollcost,omitempty"`
	Footprint *Footprint         `json:"footprint,omitempty"`
	Scale     []ScaleRun         `json:"scale,omitempty"`
	Durations map[string]float64 `json:"scenario_seconds"`
}

// Machine describes where and how the results were produced.
type Machine struct {
	NProc        int    `json:"nproc"`
	CPU          string `json:"cpu"`
	Kernel       string `json:"kernel"`
	GoVersion    string `json:"go_version"`
	EnvoyVersion string `json:"envoy_version"`
	Manager      string `json:"manager_version"`
	NoFile       uint64 `json:"ulimit_nofile"`
	Command      string `json:"command"`
	Started      string `json:"started"`
	Finished     string `json:"finished"`
}

// PolicyInfo describes a policy for the report.
type PolicyInfo struct {
	Name       string `json:"name"`
	Label      string `json:"label"`
	Recreated  bool   `json:"recreated"`
	Real       bool   `json:"real"`
	Envoy      string `json:"envoy"` // how the policy's project runs Envoy
	Describe   string `json:"describe"`
	Available  bool   `json:"available"`
	Unavailble string `json:"unavailable,omitempty"`
}

func run(ctx context.Context, c *config) error {
	started := time.Now()
	bins, err := testbed.FindBinaries()
	if err != nil {
		return fmt.Errorf("finding envoy (run ./scripts/install-envoy.sh): %w", err)
	}
	// The primary version: $ENVOY_BIN's, else the newest test/envoy-versions.txt pins (FindBinaries sorts newest first).
	c.envoyBin = bins[0]
	if c.manager, err = filepath.Abs(c.manager); err != nil {
		return err
	}
	if _, err := os.Stat(c.manager); err != nil {
		return fmt.Errorf("the manager binary (run make build): %w", err)
	}
	for _, b := range []*string{&c.contourBin, &c.egBin} {
		if *b == "" {
			continue
		}
		if *b, err = filepath.Abs(*b); err != nil {
			return err
		}
		if fi, err := os.Stat(*b); err != nil || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("peer binary %s: not an executable file (%v)", *b, err)
		}
	}
	c.runAvailable, c.runUnavailErr = probeRun(ctx, c.manager)
	if c.noRun {
		c.runAvailable, c.runUnavailErr = false, "left out with -no-run"
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	res := &Results{Durations: map[string]float64{}, Cap: c.capAfter.Seconds()}
	res.Machine = machine(ctx, c)
	for _, p := range allPolicies(c) {
		res.Policies = append(res.Policies, PolicyInfo{Name: p.name, Label: p.label, Recreated: p.recreated, Real: p.real,
			Envoy: p.envoy, Describe: p.describe, Available: p.available, Unavailble: p.unavailable})
	}
	if !c.runAvailable {
		res.Notes = append(res.Notes, "policy `run` left out: "+c.runUnavailErr)
	}
	fmt.Printf("bench: envoy %s, manager %s (%s), nproc %d, out %s\n", c.envoyBin.Version, c.manager,
		res.Machine.Manager, runtime.NumCPU(), c.out)
	for _, p := range allPolicies(c) {
		if p.real || p.recreated {
			fmt.Printf("bench: %s\n", p.label)
		}
	}
	series := newSeriesWriter()
	steps := map[string]func() error{
		"load":        func() error { return scenarioLoad(ctx, c, res, series, loadDefaults) },
		"load-idle60": func() error { return scenarioLoad(ctx, c, res, series, loadIdle60) },
		"load-nopool": func() error { return scenarioLoad(ctx, c, res, series, loadNoPool) },
		"noenvoy":     func() error { return scenarioNoEnvoy(ctx, c, res) },
		"latency":     func() error { return scenarioLatency(ctx, c, res) },
		"idle":        func() error { return scenarioIdle(ctx, c, res) },
		"pollcost":    func() error { return scenarioPollCost(ctx, c, res) },
		"footprint":   func() error { return scenarioFootprint(ctx, c, res) },
		"scale":       func() error { return scenarioScale(ctx, c, res) },
		"sweep":       func() error { return scenarioSweep(ctx, c, res) },
	}
	var errs []error
	for _, s := range c.scenarios {
		step, ok := steps[s]
		if !ok {
			return fmt.Errorf("unknown scenario %q", s)
		}
		if ctx.Err() != nil {
			break
		}
		t0 := time.Now()
		fmt.Printf("\n=== scenario %s\n", s)
		if err := step(); err != nil {
			// Keep what the other scenarios measure; the error goes into the report.
			fmt.Fprintf(os.Stderr, "bench: scenario %s: %v\n", s, err)
			res.Notes = append(res.Notes, fmt.Sprintf("scenario %s failed: %v", s, err))
			errs = append(errs, fmt.Errorf("%s: %w", s, err))
		}
		res.Durations[s] = time.Since(t0).Seconds()
		fmt.Printf("=== scenario %s took %s\n", s, time.Since(t0).Round(time.Second))
	}
	res.Machine.Started = started.UTC().Format(time.RFC3339)
	res.Machine.Finished = time.Now().UTC().Format(time.RFC3339)
	if !slices.ContainsFunc(c.scenarios, func(s string) bool { return s != "sweep" }) {
		// The sweep alone (make bench-sweep): it wrote sweep.json; results.json keeps the last full run's.
		fmt.Printf("\nbench: wrote %s in %s\n", c.out, time.Since(started).Round(time.Second))
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
		}
		return errors.Join(errs...)
	}
	b, err := json.MarshalIndent(res, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.out, "results.json"), b, 0o644); err != nil {
		return err
	}
	if err := series.write(filepath.Join(c.out, "load_series.csv")); err != nil {
		return err
	}
	fmt.Printf("\nbench: wrote %s in %s\n", c.out, time.Since(started).Round(time.Second))
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

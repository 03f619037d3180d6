package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// policy is one way of terminating Envoy. Every policy but `run` leaves Envoy as the testbed starts it and,
// when termination begins, decides when to release (send Envoy SIGTERM); `run` starts Envoy under the
// manager and terminates by sending the manager SIGTERM.
type policy struct {
	name, label string
	recreated   bool // a peer's policy, re-created in this program from its documented behaviour
	describe    string
	available   bool
	unavailable string

	// agent: Envoy runs under the manager (Options.Wrapper); termination is SIGTERM to the manager.
	agent bool
	// prepare runs before termination begins (the sidecar is already running), and returns release, which
	// is called when termination begins and returns when the policy releases (or ctx, the bench's cap, is
	// done). cleanup, if not nil, is called once the run is over.
	prepare func(ctx context.Context, r *rig, tune tuning) (release func(ctx context.Context) releaseResult, cleanup func(), err error)
}

// tuning is what a scenario changes from the defaults of our manager.
type tuning struct {
	managerArgs []string // extra drain flags for `serve` and `run`
}

// releaseResult is when and how a policy let Envoy go.
type releaseResult struct {
	at      time.Time // when the release happened (zero: unknown or none)
	capped  bool      // the bench's cap came first
	outcome string    // the policy's own word: "drained", "timeout", "fixed", ...
}

// rig is one Envoy under test and what runs beside it.
type rig struct {
	c    *config
	e    *testbed.Envoy
	up   *testbed.Upstream
	dir  string
	opts testbed.Options
}

func policyNames() []string {
	return []string{"plain", "fixed5s", "contour", "envoygateway", "serve", "run"}
}

// allPolicies returns every policy, in report order.
func allPolicies(c *config) []policy {
	ps := []policy{
		{
			name: "plain", label: "plain SIGTERM",
			describe:  "SIGTERM to Envoy when termination begins (no preStop hook).",
			available: true,
			prepare: func(context.Context, *rig, tuning) (func(context.Context) releaseResult, func(), error) {
				return func(context.Context) releaseResult { return releaseResult{at: time.Now(), outcome: "immediate"} }, nil, nil
			},
		},
		{
			name: "fixed5s", label: "fixed wait 5 s",
			describe:  "preStop sleeps 5 s, then SIGTERM (Istio's default terminationDrainDuration, without EXIT_ON_ZERO_ACTIVE_CONNECTIONS).",
			available: true,
			prepare: func(context.Context, *rig, tuning) (func(context.Context) releaseResult, func(), error) {
				return func(ctx context.Context) releaseResult {
					t := time.NewTimer(5 * time.Second) // the policy itself, not synchronisation
					defer t.Stop()
					select {
					case <-t.C:
						return releaseResult{at: time.Now(), outcome: "fixed"}
					case <-ctx.Done():
						return releaseResult{capped: true}
					}
				}, nil, nil
			},
		},
		{
			name: "contour", label: "Contour (re-created)", recreated: true,
			describe: "Re-created from documented behaviour: POST /healthcheck/fail, then every 5 s an unfiltered GET " +
				"/stats/prometheus summing envoy_http_downstream_cx_active over HTTP managers except admin (TCP proxy " +
				"invisible); at <= 0 it writes its ok file, which the /shutdown handler checks every 1 s. No deadline " +
				"(the bench caps it).",
			available: true,
			prepare:   prepareContour,
		},
		{
			name: "envoygateway", label: "Envoy Gateway (re-created)", recreated: true,
			describe: "Re-created from documented behaviour: POST /healthcheck/fail, then every 1 s GET " +
				"/stats?filter=^listener\\..*\\.downstream_cx_active$&format=json summing listener connections except " +
				"admin/worker; releases at 0 once 10 s have passed, or at the 60 s drain timeout; its /shutdown/ready " +
				"handler checks the ready file every 1 s.",
			available: true,
			prepare:   prepareEnvoyGateway,
		},
		{
			name: "serve", label: "shutdown-manager serve",
			describe:  "Ours as a sidecar: preStop GET /shutdown (blocks until the drain releases), then SIGTERM. Defaults unless the scenario says otherwise.",
			available: true,
			prepare:   prepareServe,
		},
		{
			name: "run", label: "shutdown-manager run",
			describe:  "Ours as an agent: `shutdown-manager run [drain flags] -- envoy ...`; SIGTERM to the manager, which drains and stops Envoy.",
			available: c.runAvailable, unavailable: c.runUnavailErr,
			agent:   true,
			prepare: prepareRun,
		},
	}
	return ps
}

// selectedPolicies returns the available policies the command line asks for.
func selectedPolicies(c *config) []policy {
	var out []policy
	for _, p := range allPolicies(c) {
		if !p.available || (len(c.policies) > 0 && !slices.Contains(c.policies, p.name)) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// probeRun reports whether the manager has the `run` command.
func probeRun(ctx context.Context, manager string) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, manager, "run", "-h").CombinedOutput()
	s := string(out)
	if strings.Contains(s, "stop-timeout") || strings.Contains(s, "run [") || strings.Contains(s, "-- envoy") {
		return true, ""
	}
	return false, fmt.Sprintf("`%s run -h` does not describe a run command: %q", manager, firstLine(s))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// prepareServe starts our manager as a sidecar (`serve` on a unix socket); release is the preStop hook.
func prepareServe(ctx context.Context, r *rig, tune tuning) (func(context.Context) releaseResult, func(), error) {
	m, err := testbed.StartServe(ctx, r.c.manager, r.dir, r.e.AdminURL, tune.managerArgs...)
	if err != nil {
		return nil, nil, err
	}
	release := func(ctx context.Context) releaseResult {
		code, body, err := m.Shutdown(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return releaseResult{capped: true}
			}
			return releaseResult{at: time.Now(), outcome: "error: " + err.Error()}
		}
		outcome, _, _ := strings.Cut(body, ":")
		if code != 200 && code != 503 {
			outcome = fmt.Sprintf("http %d: %s", code, body)
		}
		return releaseResult{at: time.Now(), outcome: outcome}
	}
	return release, m.Stop, nil
}

// prepareRun is the agent: Envoy already runs under the manager (see rig setup); release is SIGTERM to the
// manager, and the release time is read from the manager's log line "drain finished".
func prepareRun(_ context.Context, r *rig, _ tuning) (func(context.Context) releaseResult, func(), error) {
	release := func(ctx context.Context) releaseResult {
		if err := r.e.Signal(syscall.SIGTERM); err != nil {
			return releaseResult{outcome: "error: " + err.Error()}
		}
		select {
		case <-r.e.Exited():
		case <-ctx.Done():
			return releaseResult{capped: true}
		}
		at, outcome := drainFinished(r.e.LogPath)
		return releaseResult{at: at, outcome: outcome}
	}
	return release, nil, nil
}

// wrapperFor returns the testbed Wrapper that runs Envoy under `shutdown-manager run` for policy p.
func wrapperFor(r *rig, p policy, tune tuning) []string {
	if !p.agent {
		return nil
	}
	args := []string{r.c.manager, "run", "--admin-address", "unix://" + r.dir + "/admin.sock", "--log-format", "json"}
	args = append(args, tune.managerArgs...)
	return append(args, "--")
}

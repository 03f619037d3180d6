package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
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
	real        bool // a peer's real binary, run as its project deploys it
	describe    string
	available   bool
	unavailable string
	// envoy says how the policy's project runs Envoy, and envoyOpts applies it to the test bed: what the
	// peer's deployment sets, whichever Envoy settings a scenario varies.
	envoy     string
	envoyOpts func(*testbed.Options)

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
	// hook is how Envoy's preStop hook ended as kubelet sees it: "answered 200", "answered 503",
	// "no response", "never returned"; "no hook" without one; "not modelled" for a re-created peer.
	hook string
	// sidecar, if not nil, waits until the policy's own sidecar container has stopped and tells its story.
	sidecar func() sidecarStory
}

// atCap is the hook outcome of a policy still holding Envoy at the bench's cap: not "never returned",
// which only a real grace period could show.
const atCap = "still running at the bench's cap"

// sidecarStory is what happened to a policy's own process during a termination.
type sidecarStory struct {
	Hook   string `json:"hook"`   // its exec preStop hook: "exit 0", "never returned"; "" without one
	Exit   string `json:"exit"`   // how its process ended
	Claims string `json:"claims"` // the policy's own verdict: "success (...)", "failure (...)", "no verdict (...)"
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
			envoy:     "Envoy's defaults",
			prepare: func(context.Context, *rig, tuning) (func(context.Context) releaseResult, func(), error) {
				return func(context.Context) releaseResult {
					return releaseResult{at: time.Now(), outcome: "immediate", hook: "no hook"}
				}, nil, nil
			},
		},
		fixedWait(5*time.Second, "fixed5s",
			"preStop sleeps 5 s, then SIGTERM (Istio's default terminationDrainDuration, without EXIT_ON_ZERO_ACTIVE_CONNECTIONS)."),
		contourPolicy(c),
		egPolicy(c),
		{
			name: "serve", label: "shutdown-manager serve",
			describe:  "Ours as a sidecar: preStop GET /shutdown (blocks until the drain releases), then SIGTERM. Defaults unless the scenario says otherwise.",
			available: true,
			envoy:     "Envoy's defaults (the project sets none)",
			prepare:   prepareServe,
		},
		{
			name: "run", label: "shutdown-manager run",
			describe:  "Ours as an agent: `shutdown-manager run [drain flags] -- envoy ...`; SIGTERM to the manager, which drains and stops Envoy.",
			available: c.runAvailable, unavailable: c.runUnavailErr,
			envoy:   "Envoy's defaults (the project sets none)",
			agent:   true,
			prepare: prepareRun,
		},
	}
	return ps
}

// fixedWait is a preStop hook that sleeps d, then kubelet's SIGTERM: Envoy exits at once, whatever is in
// flight. It does not fail Envoy's health checks (nothing tells Envoy it is leaving before the SIGTERM).
func fixedWait(d time.Duration, name, describe string) policy {
	return policy{
		name: name, label: "fixed wait " + secondsText(d),
		describe:  describe,
		available: true,
		envoy:     "Envoy's defaults",
		prepare: func(context.Context, *rig, tuning) (func(context.Context) releaseResult, func(), error) {
			return func(ctx context.Context) releaseResult {
				if !sleepCtx(ctx, d) { // the policy itself, not synchronisation
					return releaseResult{capped: true, hook: atCap}
				}
				return releaseResult{at: time.Now(), outcome: "fixed", hook: "sleep returned"}
			}, nil, nil
		},
	}
}

// secondsText writes d as "5 s", "0.5 s".
func secondsText(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

// contourPolicy is Contour's: its real binary when -contour-bin is given, else the model.
func contourPolicy(c *config) policy {
	p := policy{
		name: "contour", available: true,
		envoy: "HTTP idle_timeout 60 s (Contour sets it for its Envoys); admin on a unix socket",
	}
	if c.contourBin != "" {
		p.label, p.real = "Contour (real binary)", true
		p.describe = "The real `contour` binary (" + c.contourBin + ") as Contour deploys it: `contour envoy shutdown-manager` " +
			"as the sidecar, `contour envoy shutdown` as its exec preStop hook (admin over a unix socket), Envoy's " +
			"preStop GET /shutdown; kubelet's order. Grace period 300 s (the bench's cap if shorter)."
		p.envoyOpts = func(o *testbed.Options) { o.AdminUnix = true }
		p.prepare = prepareRealContour
		return p
	}
	p.label, p.recreated = "Contour (re-created)", true
	p.describe = "Re-created from its source: POST /healthcheck/fail, then every 5 s GET " +
		"/stats/prometheus?filter=^http\\..*\\.downstream_cx_active$ summing envoy_http_downstream_cx_active over " +
		"HTTP managers except admin (TCP proxy invisible); at <= 0 it writes its ok file and its hook returns, which ends Envoy's " +
		"hook (kubelet stops the sidecar; its /shutdown handler would look at the file only within 1 s). No deadline (the bench caps it)."
	p.prepare = prepareContour
	return p
}

// egPolicy is Envoy Gateway's: its real binary when -envoy-gateway-bin is given, else the model.
func egPolicy(c *config) policy {
	p := policy{
		name: "envoygateway", available: true,
		envoy: "--drain-strategy immediate --drain-time-s 60; no idle timeout (Envoy's 1 h); admin on 127.0.0.1:19000",
	}
	opts := func(o *testbed.Options) { o.DrainStrategy, o.DrainTime = "immediate", egDrainTimeout }
	if c.egBin != "" {
		p.label, p.real = "Envoy Gateway (real binary)", true
		p.describe = "The real `envoy-gateway` binary (" + c.egBin + ") as Envoy Gateway deploys it: `envoy-gateway envoy " +
			"shutdown-manager` as the sidecar (port 19002), `envoy-gateway envoy shutdown` as its exec preStop hook " +
			"(admin 127.0.0.1:19000, ready file /tmp/shutdown-ready), Envoy's preStop GET /shutdown/ready; kubelet's " +
			"order. Grace period 360 s (the bench's cap if shorter)."
		p.envoyOpts = func(o *testbed.Options) { opts(o); o.AdminPort = egAdminPort }
		p.prepare = prepareRealEG
		return p
	}
	p.label, p.recreated = "Envoy Gateway (re-created)", true
	p.describe = "Re-created from its source: POST /healthcheck/fail, then every 1 s GET " +
		"/stats?filter=^listener\\..*\\.downstream_cx_active$&format=json summing listener connections except " +
		"admin/worker; releases at 0 once 10 s have passed, or at the 60 s drain timeout; its /shutdown/ready " +
		"handler checks the ready file every 1 s."
	p.envoyOpts = opts
	p.prepare = prepareEnvoyGateway
	return p
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
				return releaseResult{capped: true, hook: atCap}
			}
			return releaseResult{at: time.Now(), outcome: "error: " + err.Error(), hook: "no response"}
		}
		outcome, _, _ := strings.Cut(body, ":")
		if code != 200 && code != 503 {
			outcome = fmt.Sprintf("http %d: %s", code, body)
		}
		story := sidecarStory{Claims: ourVerdict(outcome, fmt.Sprintf("answered %d", code))}
		return releaseResult{at: time.Now(), outcome: outcome, hook: fmt.Sprintf("answered %d", code),
			sidecar: func() sidecarStory { return story }}
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
			return releaseResult{capped: true, hook: "no hook (agent)"}
		}
		at, outcome := drainFinished(r.e.LogPath)
		exit := fmt.Sprintf("exit %d", r.e.Cmd.ProcessState.ExitCode())
		story := sidecarStory{Exit: exit, Claims: ourVerdict(outcome, exit)}
		return releaseResult{at: at, outcome: outcome, hook: "no hook (agent)", sidecar: func() sidecarStory { return story }}
	}
	return release, nil, nil
}

// ourVerdict is the manager's own word on a drain: only "drained" claims a drained Envoy; envoy_gone,
// timeout and error say what happened instead.
func ourVerdict(outcome, how string) string {
	if outcome == "drained" {
		return "success (" + how + " drained)"
	}
	return outcome + " (" + how + ")"
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

package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyproc"
)

// The drain's witnesses (drain.Witness): what each front end can show when Envoy's admin address refuses
// every connection before the drain reached Envoy. A refusal alone cannot tell a gone Envoy from a wrong
// address (port, family, a unix socket outside this container's mounts).
var (
	_ drain.Witness    = procWitness{}
	_ drain.Identifier = procWitness{} // optional: the engine finds it by a type assertion, so only this line checks it
	_ drain.Witness    = (*reachWitness)(nil)
)

// childWitness is Run's: Envoy is this process's child, and its reaping is the evidence. A child that lives
// while its admin address refuses means the address is wrong.
func childWitness(pid int, exited <-chan struct{}) drain.Witness {
	return drain.WitnessFunc(func(context.Context) drain.Evidence {
		select {
		case <-exited:
			return drain.Evidence{Verdict: drain.VerdictGone, Text: fmt.Sprintf("envoy (pid %d, this process's child) has exited", pid)}
		default:
			return drain.Evidence{Verdict: drain.VerdictMisconfigured, Text: fmt.Sprintf("envoy pid %d (this process's child) is running", pid)}
		}
	})
}

// procWitness is Drain's (the exec hook, run in Envoy's container): the Envoy processes /proc shows. None
// alive (zombies are not) is gone; one alive means the address is wrong. It assumes, as the hook is, that
// this process runs in Envoy's container (or shares its process namespace): elsewhere it sees no Envoy.
//
// It is a drain.Identifier too: an admin API whose /server_info names a bootstrap (-c, --config-yaml) that
// is on the command line of no live Envoy process here is another Envoy's, whose health checks the drain must
// not fail. The test reads no flag syntax (Envoy accepts several forms): each non-empty value must occur in
// some argument of one process. Only a clear absence counts; an answer it cannot read lets the drain go on.
type procWitness struct {
	root  string
	admin interface {
		ServerBootstrap(ctx context.Context) (path, inline string, err error)
	}
}

func (w procWitness) Gone(context.Context) drain.Evidence {
	p, err := envoyproc.Find(w.root)
	switch {
	case err == nil:
		return drain.Evidence{Verdict: drain.VerdictMisconfigured, Text: fmt.Sprintf("envoy pid %d is running", p.PID)}
	case errors.Is(err, envoyproc.ErrNotFound):
		return drain.Evidence{Verdict: drain.VerdictGone, Text: "no envoy process is running here (" + w.root + ")"}
	}
	return drain.Evidence{Verdict: drain.VerdictUnknown, Text: "envoy's processes cannot be seen: " + err.Error()}
}

func (w procWitness) Identify(ctx context.Context) drain.Evidence {
	unknown := drain.Evidence{Verdict: drain.VerdictUnknown}
	if w.admin == nil {
		return unknown
	}
	procs, err := envoyproc.All(w.root)
	if err != nil {
		return unknown
	}
	path, inline, err := w.admin.ServerBootstrap(ctx)
	if err != nil || (path == "" && inline == "") {
		return unknown
	}
	var pids []string
	for _, p := range procs {
		if onCommandLine(p.Args, path) && onCommandLine(p.Args, inline) {
			return unknown // one of the Envoys here (a hot restart shows two)
		}
		pids = append(pids, strconv.Itoa(p.PID))
	}
	shown := fmt.Sprintf("-c %q", path)
	if inline != "" {
		shown += fmt.Sprintf(" and --config-yaml of %d bytes", len(inline))
	}
	return drain.Evidence{Verdict: drain.VerdictMisconfigured, Text: fmt.Sprintf(
		"for another envoy: its bootstrap (%s) is not on the command line of envoy pid %s here", shown, strings.Join(pids, ", "))}
}

// onCommandLine reports whether value ("": nothing to find) occurs in some argument, in whatever flag form.
func onCommandLine(args []string, value string) bool {
	return value == "" || slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, value) })
}

// reachWitness is Serve's (the sidecar, which cannot see Envoy's processes): Envoy's admin API answering
// since serve started is the evidence that the address is Envoy's. Refused now but answered before: gone.
// Never answered: the address is wrong (or Envoy never started), a configuration error.
type reachWitness struct {
	started time.Time
	reached atomic.Pointer[time.Time] // the first answer; nil before
}

func newReachWitness() *reachWitness { return &reachWitness{started: time.Now()} }

func (r *reachWitness) Gone(context.Context) drain.Evidence {
	if t := r.reached.Load(); t != nil {
		return drain.Evidence{Verdict: drain.VerdictGone, Text: fmt.Sprintf("it answered serve at %s, so envoy has gone",
			t.UTC().Format(time.RFC3339))}
	}
	return drain.Evidence{Verdict: drain.VerdictMisconfigured, Text: fmt.Sprintf("it has never answered serve since serve started %s ago",
		time.Since(r.started).Round(time.Second))}
}

// reachWarnAfter is how long serve waits for Envoy's admin API to answer before it warns: an Envoy starting
// binds its admin address within a second or two; still nothing after 5 s is worth a loud line.
const reachWarnAfter = 5 * time.Second

// reachProbeEvery is the gap between two probes of an admin API that has not answered yet.
const reachProbeEvery = 500 * time.Millisecond

// probe asks Envoy's admin API (GET /server_info) until it first answers, or ctx ends. While it has not,
// a WARN line says so once after reachWarnAfter: a drain triggered meanwhile cannot tell a refusing address
// from a gone Envoy, and will take it for a configuration error.
func (r *reachWitness) probe(ctx context.Context, admin interface {
	ServerState(context.Context) (envoyadmin.ServerState, error)
}, addr envoyadmin.Address, log *slog.Logger) {
	warn := time.NewTimer(reachWarnAfter)
	defer warn.Stop()
	tick := time.NewTicker(reachProbeEvery)
	defer tick.Stop()
	warned := false
	var lastErr error
	for {
		_, err := admin.ServerState(ctx)
		if err == nil {
			now := time.Now()
			r.reached.Store(&now)
			level := log.Info
			if warned {
				level = log.Warn
			}
			level("envoy admin API reached", "admin_address", addr.String(), "after", time.Since(r.started).Round(time.Millisecond).String())
			return
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return
		case <-warn.C:
			warned = true
			log.Warn("envoy admin API has not answered since serve started; check --admin-address: a drain cannot tell this address from a gone envoy and will report a configuration error",
				"admin_address", addr.String(), "waited", reachWarnAfter.String(), "err", lastErr)
		case <-tick.C:
		}
	}
}

// adminOfRunningEnvoy finds Envoy's admin address from its process (its command line and bootstrap): inside
// Envoy's container an exec hook sees Envoy's process. Otherwise, or
// when the bootstrap names no fixed address, it keeps def, the default. It logs what it chose and why.
func adminOfRunningEnvoy(def envoyadmin.Address, log *slog.Logger) envoyadmin.Address {
	p, err := envoyproc.Find("/proc")
	if err != nil {
		log.Info("admin address: envoy's process not found; using the default", "admin_address", def.String(), "reason", err.Error())
		return def
	}
	addr, err := envoyadmin.AdminFromCommandLine(p.Args, p.ReadFile)
	if err != nil {
		// Envoy runs but its command line does not show which admin it uses (one Envoy would refuse, a
		// bootstrap without an admin address, a file this process cannot read): the default is a guess.
		log.Warn("admin address: envoy's command line does not show it; using the default, which may not be envoy's", "admin_address", def.String(),
			"envoy_pid", p.PID, "reason", err.Error())
		return def
	}
	log.Info("admin address: read from envoy's bootstrap", "admin_address", addr.String(), "envoy_pid", p.PID)
	return addr
}

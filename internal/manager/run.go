package manager

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/supervisor"
)

// RunConfig is the agent's: Envoy's command, how it is stopped, and the optional API.
type RunConfig struct {
	Engine      EngineConfig
	EnvoyPath   string      // the executable, looked up
	EnvoyArgs   []string    // argv, EnvoyArgs[0] as given
	Stdio       [3]*os.File // Envoy's stdin, stdout, stderr; nil: /dev/null
	StopTimeout time.Duration
	API         *APIConfig // nil: no API
}

// forwarded are the signals passed on to Envoy as they come.
var forwarded = []os.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2}

// Run supervises Envoy. The order of events is plain: start Envoy; on the first SIGTERM/SIGINT (or a
// /shutdown) drain; when the drain releases, stop Envoy; return Envoy's status as an ExitStatus. A second
// SIGTERM/SIGINT skips the rest of the drain. If Envoy exits by itself, return at once with its status. ctx is
// the signal-triggered drain's (its trigger's context); signals, not ctx, end the agent.
func Run(ctx context.Context, cfg RunConfig, log *slog.Logger) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGTERM, syscall.SIGINT}, forwarded...)...)
	defer signal.Stop(sigs)

	proc, err := supervisor.Start(cfg.EnvoyPath, cfg.EnvoyArgs, cfg.Stdio, log)
	if err != nil {
		log.Error("cannot start envoy", "err", err)
		return ErrReported
	}
	defer proc.Close() // whatever happens, Envoy does not outlive this process
	log.Info("envoy started", "pid", proc.Pid(), "command", cfg.EnvoyArgs, "admin_address", cfg.Engine.Admin.String(), "version", cfg.Engine.Version)

	cfg.Engine.Drain.EnvoyExited = proc.Exited()
	cfg.Engine.Drain.Witness = childWitness(proc.Pid(), proc.Exited())
	s, err := newStack(cfg.Engine, log, "run")
	if err != nil {
		return err
	}
	defer s.stop(nil)
	var apiErrs <-chan error
	if cfg.API != nil {
		apis, err := startAPI(*cfg.API, s, log)
		if err != nil {
			log.Error("cannot listen", "listen", cfg.API.Listen.String(), "err", err)
			return ErrReported
		}
		defer apis.stop()
		apiErrs = apis.errs
		log.Info("serving", "listen", apis.listen, "metrics_listen", apis.metricsListen, "token", cfg.API.Token.Secret != "")
	}

	r := supervised{ctx: ctx, proc: proc, s: s, sigs: sigs, apiErrs: apiErrs, log: log}
	released, exited := r.untilDrain()
	if !exited && released != nil {
		exited = r.untilReleased(released)
	}
	if exited {
		log.Error("envoy exited by itself; exiting with its status", "status", proc.Describe(), "pid", proc.Pid())
		return ExitStatus(proc.ExitCode())
	}
	if r := s.engine.Status(); r.Outcome != "" {
		log.Info("stopping envoy", "drain_outcome", string(r.Outcome), "drain_reason", r.Reason)
	}
	how := proc.Stop(s.admin.Quit, cfg.StopTimeout)
	log.Info("envoy stopped; exiting with its status", "by", how, "status", proc.Describe())
	return ExitStatus(proc.ExitCode())
}

// supervised is Run's wait on Envoy, in two phases: until a drain starts, then until it releases. Either ends
// early when Envoy exits by itself, or when the API fails (the drain, if one runs, is stopped first).
type supervised struct {
	ctx     context.Context
	proc    *supervisor.Process
	s       *stack
	sigs    <-chan os.Signal
	apiErrs <-chan error
	log     *slog.Logger
}

// untilDrain waits for the first SIGTERM/SIGINT (which triggers the drain) or a /shutdown (which started one)
// and returns the drain's Done; nil when there is no drain to wait for (the API failed, or the trigger did
// not start one). exited: Envoy exited by itself first.
func (r *supervised) untilDrain() (released <-chan struct{}, exited bool) {
	d, started := r.s.engine.Current()
	if d != nil { // a /shutdown came as the API opened
		return d.Done(), false
	}
	for {
		select {
		case <-r.proc.Exited():
			return nil, true
		case err := <-r.apiErrs:
			r.apiFailed(err)
			return nil, false
		case <-started: // a drain began through /shutdown
			d, _ := r.s.engine.Current()
			return d.Done(), false
		case sig := <-r.sigs:
			if r.forward(sig) {
				continue
			}
			r.log.Info("signal received; draining envoy", "signal", sig.String())
			d, err := r.s.engine.Trigger(r.ctx, signalCaller(sig))
			if err != nil {
				return nil, false
			}
			return d.Done(), false
		}
	}
}

// untilReleased waits for the drain to release. A second SIGTERM/SIGINT stops it at once (it then releases);
// the API failing stops it and ends the wait. exited: Envoy exited by itself first.
func (r *supervised) untilReleased(released <-chan struct{}) (exited bool) {
	for {
		select {
		case <-released:
			return false
		case <-r.proc.Exited():
			return true
		case err := <-r.apiErrs:
			r.apiFailed(err)
			return false
		case sig := <-r.sigs:
			if !r.forward(sig) {
				r.log.Warn("second signal: skipping the rest of the drain, stopping envoy now", "signal", sig.String())
				r.s.stop(signalCause(sig))
			}
		}
	}
}

// forward passes SIGHUP, SIGUSR1 and SIGUSR2 on to Envoy and reports whether sig was one of them.
func (r *supervised) forward(sig os.Signal) bool {
	if !slices.Contains(forwarded, sig) {
		return false
	}
	r.log.Info("forwarding signal to envoy", "signal", sig.String())
	if err := r.proc.Signal(sig); err != nil {
		r.log.Warn("forwarding signal failed", "err", err)
	}
	return true
}

// apiFailed stops the drain, if one runs, because the API it was asked through failed.
func (r *supervised) apiFailed(err error) {
	r.log.Error("serving failed; stopping envoy", "err", err)
	r.s.stop(fmt.Errorf("the API failing: %w", err))
}

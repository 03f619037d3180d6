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
// SIGTERM/SIGINT skips the rest of the drain. If Envoy exits by itself, return at once with its status.
func Run(cfg RunConfig, log *slog.Logger) error {
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

	var released <-chan struct{} // the drain's Done, once one runs
	d, started := s.engine.Current()
	if d != nil { // a /shutdown came as the API opened
		released, started = d.Done(), nil
	}
	for released == nil || !closed(released) {
		select {
		case <-proc.Exited():
			log.Error("envoy exited by itself; exiting with its status", "status", proc.Describe(), "pid", proc.Pid())
			return ExitStatus(proc.ExitCode())
		case err := <-apiErrs:
			log.Error("serving failed; stopping envoy", "err", err)
			apiErrs = nil
			s.stop(fmt.Errorf("the API failing: %w", err))
			released = closedChan
		case <-started: // a drain began through /shutdown
			started = nil
			if released == nil {
				d, _ := s.engine.Current()
				released = d.Done()
			}
		case sig := <-sigs:
			switch {
			case slices.Contains(forwarded, sig):
				log.Info("forwarding signal to envoy", "signal", sig.String())
				if err := proc.Signal(sig); err != nil {
					log.Warn("forwarding signal failed", "err", err)
				}
			case released == nil:
				log.Info("signal received; draining envoy", "signal", sig.String())
				d, err := s.engine.Trigger(context.Background(), signalCaller(sig))
				if err != nil {
					released = closedChan
					break
				}
				released = d.Done()
			default:
				log.Warn("second signal: skipping the rest of the drain, stopping envoy now", "signal", sig.String())
				s.stop(signalCause(sig))
			}
		case <-released:
		}
	}
	if r := s.engine.Status(); r.Outcome != "" {
		log.Info("stopping envoy", "drain_outcome", string(r.Outcome), "drain_reason", r.Reason)
	}
	how := proc.Stop(s.admin.Quit, cfg.StopTimeout)
	log.Info("envoy stopped; exiting with its status", "by", how, "status", proc.Describe())
	return ExitStatus(proc.ExitCode())
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

package manager

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
)

// ServeConfig is the sidecar's: the engine, its API, and how long a SIGTERM waits for a trigger.
type ServeConfig struct {
	Engine EngineConfig
	API    APIConfig
	// TriggerWait is how long, after SIGTERM with no drain running, to wait for a /shutdown that may be on
	// its way before exiting.
	TriggerWait time.Duration
}

// Serve runs the API until SIGTERM or SIGINT (or ctx), then returns once any drain has released: a drain
// in progress keeps the process, and so the pending /shutdown answers, alive.
func Serve(ctx context.Context, cfg ServeConfig, log *slog.Logger) error {
	// Before anything else: a SIGTERM that comes early must not kill the process with the default action.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	reach := newReachWitness()
	cfg.Engine.Drain.Witness = reach
	s, err := newStack(cfg.Engine, log, "serve")
	if err != nil {
		return err
	}
	defer s.stop(nil)
	probeCtx, stopProbe := context.WithCancel(context.Background())
	probed := make(chan struct{})
	go func() { defer close(probed); reach.probe(probeCtx, s.admin, cfg.Engine.Admin, log) }()
	defer func() { stopProbe(); <-probed }()
	apis, err := startAPI(cfg.API, s, log)
	if err != nil {
		log.Error("cannot listen", "listen", cfg.API.Listen.String(), "err", err)
		return ErrReported
	}
	log.Info("serving", "listen", apis.listen, "metrics_listen", apis.metricsListen, "token", cfg.API.Token.Secret != "",
		"admin_address", cfg.Engine.Admin.String(), "version", cfg.Engine.Version)

	select {
	case err := <-apis.errs:
		log.Error("serving failed", "err", err)
		return ErrReported
	case <-ctx.Done():
		log.Info("stopping", "reason", ctx.Err().Error())
	case sig := <-sigs:
		log.Info("signal received; exiting once any drain has released", "signal", sig.String())
		if second := awaitRelease(s.engine, cfg.TriggerWait, sigs, log); second != nil {
			// Cut the drain short first, so that its waiters are answered (503, "canceled by SIGTERM …")
			// before the API closes; then exit 1: this process left before its drain released.
			s.stop(signalCause(second))
			apis.stop()
			log.Warn("exiting before the drain released", "signal", second.String(), "drain_reason", s.engine.Status().Reason)
			return ErrReported
		}
	}
	apis.stop()
	log.Info("exiting")
	return nil
}

// awaitRelease waits for the drain in progress, or, if none has run yet, for one starting within wait, to
// release. Kubelet sends the Envoy container's preStop request and this container's SIGTERM at about the
// same moment, so the trigger may arrive just after the signal. A second signal ends the wait: it is
// returned when it cut a running drain short (nil otherwise).
func awaitRelease(engine *drain.Engine, wait time.Duration, sigs <-chan os.Signal, log *slog.Logger) os.Signal {
	d, next := engine.Current()
	if d == nil || d.Released() {
		if st := engine.Status(); d != nil && st.Resumed == nil {
			return nil // this pod's drain is over (and was not undone by a resume): no trigger is on its way
		}
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-next:
			d, _ = engine.Current()
		case <-timer.C:
			return nil
		case s := <-sigs:
			log.Info("second signal: exiting now; no drain was running", "signal", s.String())
			return nil
		}
	}
	if d.Released() { // the drain started and finished already
		return nil
	}
	log.Info("waiting for the drain to release")
	select {
	case <-d.Done():
		return nil
	case s := <-sigs:
		log.Warn("second signal: canceling the drain", "signal", s.String())
		return s
	}
}

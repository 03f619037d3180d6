package cli

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// serveConfig is `serve`'s validated configuration.
type serveConfig struct {
	drain       drain.Config
	listen      listenAddress
	api         apiConfig
	triggerWait time.Duration
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var df drainFlags
	var lf logFlags
	var af apiFlags
	df.register(fs)
	lf.register(fs)
	af.register(fs)
	listen := fs.String("listen", ":8090", "where the API listens: [IP]:PORT (an IP literal; no IP: all interfaces) or unix:///path/api.sock")
	triggerWait := fs.Duration("trigger-wait", 3*time.Second, "after SIGTERM with no drain running, wait this long for a /shutdown that may be on its way, then exit")
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	dcfg, addr, err := df.config()
	if err != nil {
		return err
	}
	la, err := parseListen(*listen)
	if err != nil {
		return usagef("--listen: %v", err)
	}
	if *triggerWait < 0 {
		return usagef("--trigger-wait must not be negative")
	}
	acfg, err := af.config()
	if err != nil {
		return err
	}
	if acfg.metrics != nil && *acfg.metrics == la && !strings.HasSuffix(la.addr, ":0") { // port 0: two ports chosen
		return usagef("--metrics-listen must differ from --listen")
	}
	log, closeLog, err := lf.logger(stdout, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	cfg := serveConfig{drain: dcfg, listen: la, api: acfg, triggerWait: *triggerWait}
	return serve(ctx, cfg, &df, addr, log)
}

// serve runs the API until SIGTERM or SIGINT (or ctx), then exits once any drain has released:
// a drain in progress keeps the process, and so the pending /shutdown answers, alive.
func serve(ctx context.Context, cfg serveConfig, df *drainFlags, addr envoyadmin.Address, log *slog.Logger) error {
	// Before anything else: a SIGTERM that comes early must not kill the process with the default action.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	s, err := newStack(df, cfg.drain, addr, log, "serve")
	if err != nil {
		return err
	}
	defer s.stop(nil)
	apis, err := startAPI(cfg.listen, cfg.api, s, log)
	if err != nil {
		log.Error("cannot listen", "listen", cfg.listen.String(), "err", err)
		return errReported
	}
	log.Info("serving", "listen", apis.listen, "metrics_listen", apis.metricsListen, "token", cfg.api.token != "",
		"admin_address", addr.String(), "version", Version)

	select {
	case err := <-apis.errs:
		log.Error("serving failed", "err", err)
		return errReported
	case <-ctx.Done():
		log.Info("stopping", "reason", ctx.Err().Error())
	case sig := <-sigs:
		log.Info("signal received; exiting once any drain has released", "signal", sig.String())
		if second := awaitRelease(s.engine, cfg.triggerWait, sigs, log); second != nil {
			// Cut the drain short first, so that its waiters are answered (503, "canceled by SIGTERM …")
			// before the API closes; then exit 1: this process left before its drain released.
			s.stop(signalCause(second))
			apis.stop()
			log.Warn("exiting before the drain released", "signal", second.String(), "drain_reason", s.engine.Status().Reason)
			return errReported
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
	next := engine.NextStart()
	d := engine.Running()
	if st := engine.Status(); d == nil && st.Phase == drain.PhaseReleased && st.Resumed == nil {
		return nil // this pod's drain is over (and was not undone by a resume): no trigger is on its way
	}
	if d == nil {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-next:
			d = engine.Running()
		case <-timer.C:
			return nil
		case s := <-sigs:
			log.Info("second signal: exiting now; no drain was running", "signal", s.String())
			return nil
		}
	}
	if d == nil { // the drain started and finished already
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

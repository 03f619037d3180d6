package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyproc"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/server"
)

// runDrain drains Envoy once and exits: 0 drained (or Envoy already gone), 1 timed out or failed.
// SIGINT or SIGTERM stop the wait (exit 1); Envoy stays draining.
//
// With --via it joins the drain of a serve sidecar instead (the sidecar mode's exec hook) and exits as
// the sidecar answers; when the sidecar gives no usable answer (not running, restarting, refusing the
// call) it drains Envoy itself with the same flags: a hook never skips the drain because of its
// surroundings.
func runDrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	var df drainFlags
	var lf logFlags
	df.register(fs)
	lf.register(fs)
	progress := fs.String("progress", "auto", "live progress line on stderr: auto (when stderr is a terminal), always, never")
	via := fs.String("via", "", "join the drain of a serve sidecar at this address (unix:///path/api.sock or http://IP:PORT) through /shutdown and wait for its answer, at most --drain-timeout plus 5s; if the sidecar cannot be reached, drain Envoy directly with these flags")
	tokenFile := fs.String("token-file", "", "with --via: send the secret in this file as \"Authorization: Bearer <secret>\" (the sidecar's --token-file)")
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	var sidecar *viaClient
	if *via != "" {
		var err error
		if sidecar, err = newViaClient(*via, ""); err != nil {
			return usagef("--via: %v", err)
		}
	} else if *tokenFile != "" {
		return usagef("--token-file needs --via")
	}
	cfg, addr, err := df.config()
	if err != nil {
		return err
	}
	showProgress, err := wantProgress(*progress, stderr)
	if err != nil {
		return err
	}
	if showProgress && !isFlagSet(fs, "log-level") {
		lf.level = "error" // the progress line says what info and warning logs would, without breaking it
	}
	if showProgress && !isFlagSet(fs, "log-format") {
		lf.format = "text"
	}
	log, closeLog, err := lf.logger(stdout, stderr)
	if err != nil {
		return err
	}
	defer closeLog()

	// SIGINT or SIGTERM stop the wait; the drain's reason names the signal.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case sig := <-sigs:
			cancel(signalCause(sig))
		case <-ctx.Done():
		}
	}()
	by := drain.Caller{Method: "command drain"}
	if sidecar != nil {
		if *tokenFile != "" {
			// A token that cannot be read is a runtime condition of the pod: the call goes without it, the
			// sidecar answers 401, and the hook drains by itself.
			tf, err := readToken(*tokenFile)
			if err != nil {
				log.Warn("cannot read --token-file; calling the sidecar without it", "err", err)
			}
			tf.warnMode(log)
			sidecar.token = tf.token
		}
		if joined, err := joinSidecar(ctx, sidecar, cfg.Timeout+viaMargin, log); joined {
			return err
		}
		by.Method = "command drain (sidecar fallback)"
	}
	if !isFlagSet(fs, "admin-address") { // only now: with a sidecar that answers, Envoy's admin is not ours to find
		addr = adminOfRunningEnvoy(addr, log)
	}
	metrics := drain.NewMetrics(nil)
	engine, err := drain.New(cfg, df.client(addr, metrics), log, metrics)
	if err != nil {
		return usageError{err}
	}
	engineCtx, stopEngine := context.WithCancelCause(ctx)
	defer stopEngine(nil)
	go func() { _ = engine.Run(engineCtx) }()
	// Only the process that drains records Events: a hook that joined the sidecar left them to it.
	stopEvents := startEvents(df.kubeconfig, "drain", engine, cfg.Timeout, log)
	defer stopEvents()
	d, err := engine.Trigger(ctx, by)
	if err != nil {
		return fmt.Errorf("starting the drain: %w", err)
	}
	if showProgress {
		showUntilDone(ctx, engine, d, stderr)
	} else {
		select {
		case <-d.Done():
		case <-ctx.Done():
		}
	}
	select {
	case <-d.Done():
	default:
		stopEngine(context.Cause(ctx))
		<-d.Done()
	}
	stopEvents() // the drain's last Event out (at most events.CloseWait) before the hook exits
	res := d.Result()
	if showProgress {
		fmt.Fprintf(stderr, "\r\033[K%s: %s\n", res.Outcome, res.Reason)
	}
	if !res.OK() {
		return errReported
	}
	return nil
}

// viaMargin is what drain --via waits beyond --drain-timeout for the sidecar's answer: the sidecar
// answers at its own deadline at the latest, plus the time its answer takes to come.
const viaMargin = 5 * time.Second

// joinSidecar joins the sidecar's drain and waits at most wait for its answer. joined is false when the
// sidecar gave no usable answer and the caller must drain by itself; otherwise err is the command's result
// (nil: drained).
func joinSidecar(ctx context.Context, c *viaClient, wait time.Duration, log *slog.Logger) (joined bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	log = log.With("via", c.addr.String())
	log.Info("joining the sidecar's drain", "wait", wait.String())
	code, line, header, err := c.callHeader(ctx, http.MethodPost, "/shutdown")
	switch {
	case errors.Is(err, errSidecarUnreachable):
		log.Warn("sidecar unreachable: draining envoy directly", "err", err)
		return false, nil
	case err != nil && ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		log.Error("sidecar did not answer in time", "wait", wait.String(), "err", err)
		return true, errReported
	case err != nil && ctx.Err() != nil:
		log.Warn("stopped waiting for the sidecar", "err", err)
		return true, errReported
	case err != nil:
		log.Warn("calling the sidecar failed: draining envoy directly", "err", err)
		return false, nil
	case code == http.StatusOK:
		log.Info("sidecar drained", "status", code, "reason", line)
		return true, nil
	case code == http.StatusServiceUnavailable && header.Get(server.OutcomeHeader) != "":
		log.Warn("sidecar's drain failed", "status", code, "outcome", header.Get(server.OutcomeHeader), "reason", line)
		return true, errReported
	default: // 401, 404, 429, a 503 that is no drain's result (the sidecar stopping): it did not take the call
		log.Warn("sidecar refused the call: draining envoy directly", "status", code, "answer", line)
		return false, nil
	}
}

// showUntilDone redraws one progress line on a terminal until the drain releases.
func showUntilDone(ctx context.Context, engine *drain.Engine, d *drain.Drain, w io.Writer) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		st := engine.Status()
		open := "?"
		if st.Open >= 0 {
			open = fmt.Sprint(st.Open)
		}
		deadline := ""
		if st.Started != nil && st.Deadline != nil {
			deadline = durationText(st.Deadline.Sub(*st.Started))
		}
		line := fmt.Sprintf("draining: %-17s in flight %-6s elapsed %-9s deadline %-6s", st.Phase, open, durationText(time.Duration(st.Elapsed)), deadline)
		if st.LastError != "" {
			line += " last error: " + st.LastError
		}
		if len(line) > 160 {
			line = line[:157] + "..."
		}
		fmt.Fprint(w, "\r\033[K"+line)
		select {
		case <-d.Done():
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// adminOfRunningEnvoy finds Envoy's admin address from its process (its command line and bootstrap) when
// --admin-address is not given: inside Envoy's container an exec hook sees Envoy's process. Otherwise, or
// when the bootstrap names no fixed address, it keeps def, the default. It logs what it chose and why.
func adminOfRunningEnvoy(def envoyadmin.Address, log *slog.Logger) envoyadmin.Address {
	p, err := envoyproc.Find("/proc")
	if err != nil {
		log.Info("admin address: envoy's process not found; using the default", "admin_address", def.String(), "reason", err.Error())
		return def
	}
	addr, err := adminFromCommandLine(p.Args, p.ReadFile)
	if err != nil {
		log.Info("admin address: not found from envoy's command line; using the default", "admin_address", def.String(),
			"envoy_pid", p.PID, "reason", err.Error())
		return def
	}
	log.Info("admin address: read from envoy's bootstrap", "admin_address", addr.String(), "envoy_pid", p.PID)
	return addr
}

// signalCause is the cause a signal cancels a context with: "SIGTERM".
func signalCause(sig os.Signal) error {
	if s, ok := sig.(syscall.Signal); ok {
		return errors.New(unix.SignalName(s))
	}
	return errors.New(sig.String())
}

func wantProgress(mode string, stderr io.Writer) (bool, error) {
	switch mode {
	case "always":
		return true, nil
	case "never":
		return false, nil
	case "auto":
		f, ok := stderr.(*os.File)
		if !ok {
			return false, nil
		}
		fi, err := f.Stat()
		return err == nil && fi.Mode()&os.ModeCharDevice != 0, nil
	}
	return false, usagef("--progress: %q is not one of auto, always, never", mode)
}

func isFlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/server"
)

// DrainConfig is one drain's: the engine, and how the drain is reached and shown.
type DrainConfig struct {
	Engine EngineConfig
	// FindAdmin: Engine.Admin is only the default; Envoy's own admin address is read from its process (its
	// command line and bootstrap) when this process can see it, as an exec hook in Envoy's container can.
	FindAdmin bool
	// Via joins the drain of a serve sidecar at this address first; if the sidecar gives no usable answer,
	// Drain drains Envoy itself.
	Via *envoyadmin.Address
	// TokenFile, with Via, holds the secret sent to the sidecar as a bearer token. It is read at run time:
	// a token that cannot be read is a condition of the pod, not of the command, and the call goes without it.
	TokenFile string
	// Progress gets a live progress line (a terminal); nil: none.
	Progress io.Writer
}

// Drain drains Envoy once: nil when drained (or Envoy gone, as /proc shows), ErrMisconfigured when Envoy's
// admin address refused while Envoy's process ran (procWitness), ErrReported when the drain timed out or
// failed. SIGINT or SIGTERM stop the wait (ErrReported); Envoy stays draining.
//
// With Via it joins the drain of a serve sidecar instead (the sidecar mode's exec hook) and returns as the
// sidecar answers; when the sidecar gives no usable answer (not running, restarting, refusing the call) it
// drains Envoy itself: a hook never skips the drain because of its surroundings.
func Drain(ctx context.Context, cfg DrainConfig, log *slog.Logger) error {
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
	if cfg.Via != nil {
		token := ""
		if cfg.TokenFile != "" {
			// Without its token the sidecar answers 401, and the hook drains by itself.
			tf, err := ReadToken(cfg.TokenFile)
			if err != nil {
				log.Warn("cannot read the token file; calling the sidecar without it", "err", err)
			}
			tf.WarnMode(log)
			token = tf.Secret
		}
		sidecar := newViaClient(*cfg.Via, token, cfg.Engine.Version)
		if joined, err := joinSidecar(ctx, sidecar, cfg.Engine.Drain.Timeout+viaMargin, log); joined {
			return err
		}
		by.Method = "command drain (sidecar fallback)"
	}
	if cfg.FindAdmin { // only now: with a sidecar that answers, Envoy's admin is not ours to find
		cfg.Engine.Admin = adminOfRunningEnvoy(cfg.Engine.Admin, log)
	}
	metrics := drain.NewMetrics(nil)
	admin := cfg.Engine.client(metrics)
	if cfg.Engine.Drain.Witness == nil {
		cfg.Engine.Drain.Witness = procWitness{root: "/proc", admin: admin} // the hook runs in Envoy's container
	}
	engine, err := drain.New(cfg.Engine.Drain, admin, log, metrics)
	if err != nil {
		return err
	}
	engineCtx, stopEngine := context.WithCancelCause(ctx)
	defer stopEngine(nil)
	go func() { _ = engine.Run(engineCtx) }()
	// Only the process that drains records Events: a hook that joined the sidecar left them to it.
	stopEvents := startEvents(cfg.Engine, "drain", engine, log)
	defer stopEvents()
	d, err := engine.Trigger(ctx, by)
	if err != nil {
		return fmt.Errorf("starting the drain: %w", err)
	}
	if cfg.Progress != nil {
		showUntilDone(ctx, engine, d, cfg.Progress)
	} else {
		select {
		case <-d.Done():
		case <-ctx.Done():
		}
	}
	if !d.Released() {
		stopEngine(context.Cause(ctx))
		<-d.Done()
	}
	stopEvents() // the drain's last Event out (at most events.CloseWait) before the hook exits
	res := d.Result()
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "\r\033[K%s: %s\n", res.Outcome, res.Reason)
	}
	switch {
	case res.Outcome == drain.OutcomeMisconfigured:
		return ErrMisconfigured
	case !res.OK():
		return ErrReported
	}
	return nil
}

// viaMargin is what Drain through a sidecar waits beyond the drain timeout for the sidecar's answer: the sidecar
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
		return true, ErrReported
	case err != nil && ctx.Err() != nil:
		log.Warn("stopped waiting for the sidecar", "err", err)
		return true, ErrReported
	case err != nil:
		log.Warn("calling the sidecar failed: draining envoy directly", "err", err)
		return false, nil
	case code == http.StatusOK:
		log.Info("sidecar drained", "status", code, "reason", line)
		return true, nil
	case code == http.StatusServiceUnavailable && header.Get(server.OutcomeHeader) != "":
		log.Warn("sidecar's drain failed", "status", code, "outcome", header.Get(server.OutcomeHeader), "reason", line)
		if header.Get(server.OutcomeHeader) == string(drain.OutcomeMisconfigured) {
			return true, ErrMisconfigured
		}
		return true, ErrReported
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

func durationText(d time.Duration) string { return fmt.Sprint(d.Round(time.Millisecond)) }

package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
)

// runDrain drains Envoy once and exits: 0 drained (or Envoy already gone), 1 timed out or failed.
// SIGINT or SIGTERM stop the wait (exit 1); Envoy stays draining.
func runDrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	var df drainFlags
	var lf logFlags
	df.register(fs)
	lf.register(fs)
	progress := fs.String("progress", "auto", "live progress line on stderr: auto (when stderr is a terminal), always, never")
	if err := parse(fs, args, stdout); err != nil {
		return err
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

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	metrics := drain.NewMetrics(nil)
	engine, err := drain.New(cfg, df.client(addr, metrics), log, metrics)
	if err != nil {
		return usageError{err}
	}
	engineCtx, stopEngine := context.WithCancel(ctx)
	defer stopEngine()
	go func() { _ = engine.Run(engineCtx) }()
	d, err := engine.Trigger(ctx, drain.Caller{Method: "command drain"})
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
		stopEngine()
		<-d.Done()
	}
	res := d.Result()
	if showProgress {
		fmt.Fprintf(stderr, "\r\033[K%s: %s\n", res.Outcome, res.Reason)
	}
	if !res.OK() {
		return errReported
	}
	return nil
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

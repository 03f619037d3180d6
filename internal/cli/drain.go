package cli

import (
	"context"
	"flag"
	"io"
	"os"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manager"
)

// runDrain drains Envoy once and exits (manager.Drain): 0 drained (or Envoy already gone), 1 timed out or
// failed, 3 misconfigured (Envoy's admin address refused while Envoy ran). With --via it joins a serve sidecar's drain, and drains by itself if the sidecar cannot be reached.
func runDrain(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	var df drainFlags
	var lf LogFlags
	df.register(fs)
	lf.Register(fs)
	fs.Lookup("admin-address").Usage += adminFound
	progress := fs.String("progress", "auto", "live progress line on stderr: auto (when stderr is a terminal), always, never")
	via := fs.String("via", "", "join the drain of a serve sidecar at this address (unix:///path/api.sock or http://IP:PORT) through /shutdown and wait for its answer, at most --drain-timeout plus 5s; if the sidecar cannot be reached, drain Envoy directly with these flags")
	tokenFile := fs.String("token-file", "", "with --via: send the secret in this file as \"Authorization: Bearer <secret>\" (the sidecar's --token-file)")
	if err := Parse(fs, args, stdout); err != nil {
		return err
	}
	var cfg manager.DrainConfig
	if *via != "" {
		addr, err := envoyadmin.ParseAddress(*via)
		if err != nil {
			return Usagef("--via: %v", err)
		}
		cfg.Via, cfg.TokenFile = &addr, *tokenFile
	} else if *tokenFile != "" {
		return Usagef("--token-file needs --via")
	}
	ecfg, err := df.config()
	if err != nil {
		return err
	}
	cfg.Engine, cfg.FindAdmin = ecfg, !IsFlagSet(fs, "admin-address")
	showProgress, err := wantProgress(*progress, stderr)
	if err != nil {
		return err
	}
	if showProgress {
		cfg.Progress = stderr
		if !IsFlagSet(fs, "log-level") {
			lf.level = "error" // the progress line says what info and warning logs would, without breaking it
		}
		if !IsFlagSet(fs, "log-format") {
			lf.format = "text"
		}
	}
	log, closeLog, err := lf.Logger(stdout, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	return manager.Drain(ctx, cfg, log)
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
	return false, Usagef("--progress: %q is not one of auto, always, never", mode)
}

package cli

import (
	"context"
	"flag"
	"io"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manager"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/supervisor"
)

// runFlags are `run`'s flags: the drain flags and its own.
type runFlags struct {
	drainFlags
	log         LogFlags
	api         apiFlags
	stopTimeout time.Duration
	listen      string
	grace       time.Duration
}

func (f *runFlags) register(fs *flag.FlagSet) {
	f.drainFlags.register(fs)
	f.log.Register(fs)
	f.api.register(fs)
	fs.DurationVar(&f.stopTimeout, "stop-timeout", supervisor.DefaultStopTimeout, "after the drain, wait this long for Envoy to exit after POST /quitquitquit, then SIGTERM, then SIGKILL 1s later")
	fs.StringVar(&f.listen, "listen", "", "also serve the HTTP API (/healthz, /shutdown, /status, /metrics) here: [IP]:PORT (an IP literal; no IP: all interfaces) or unix:///path (default: no API)")
	fs.DurationVar(&f.grace, "termination-grace-period", 0, "the pod's terminationGracePeriodSeconds: when given and --drain-timeout is not, the drain timeout is this minus --stop-timeout minus 2s")
}

// runRun is the agent: Envoy runs as this process's child; SIGTERM or SIGINT drains it, then stops it, and
// the process exits with Envoy's status (manager.Run).
func runRun(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var f runFlags
	f.register(fs)
	sep := slices.Index(args, "--")
	if sep < 0 {
		if err := Parse(fs, args, stdout); err != nil {
			return err
		}
		return Usagef("give Envoy's command after --, as in: shutdown-manager run -- envoy -c /etc/envoy/envoy.yaml")
	}
	if err := Parse(fs, args[:sep], stdout); err != nil {
		return err
	}
	cfg, err := f.config(fs, args[sep+1:])
	if err != nil {
		return err
	}
	// Envoy shares this process's standard files; a stream that is not a file (a test's buffer) is /dev/null.
	cfg.Stdio = [3]*os.File{asFile(stdin), asFile(stdout), asFile(stderr)}
	log, closeLog, err := f.log.Logger(stdout, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	return manager.Run(ctx, cfg, log)
}

func asFile(v any) *os.File {
	f, _ := v.(*os.File)
	return f
}

// config validates the parsed flags (fs tells which were set) and Envoy's command into the agent's configuration.
func (f *runFlags) config(fs *flag.FlagSet, envoyArgs []string) (manager.RunConfig, error) {
	if len(envoyArgs) == 0 {
		return manager.RunConfig{}, Usagef("give Envoy's command after --")
	}
	if f.stopTimeout <= 0 {
		return manager.RunConfig{}, Usagef("--stop-timeout must be positive")
	}
	if f.grace < 0 {
		return manager.RunConfig{}, Usagef("--termination-grace-period must not be negative")
	}
	// d is the drain's flags as the run uses them: the drain timeout derived from the grace period and the admin
	// address read from Envoy's command line fill in what was not given; the parsed flags stay as given.
	d := f.drainFlags
	if f.grace > 0 && !IsFlagSet(fs, "drain-timeout") {
		d.timeout = f.grace - f.stopTimeout - supervisor.StopMargin
		if d.timeout <= drain.AddDurations(d.delay, d.minDuration) {
			return manager.RunConfig{}, Usagef("--termination-grace-period %s leaves %s to drain after --stop-timeout and a 2s margin, not more than --drain-delay plus --min-drain-duration", f.grace, d.timeout)
		}
		if d.timeout <= drain.AddDurations(d.delay, d.quiet.least()) {
			return manager.RunConfig{}, Usagef("--termination-grace-period %s leaves %s to drain after --stop-timeout and a 2s margin, not more than --drain-delay plus --quiet-period", f.grace, d.timeout)
		}
	}
	if !IsFlagSet(fs, "admin-address") {
		addr, err := envoyadmin.AdminFromCommandLine(envoyArgs, os.ReadFile)
		if err != nil {
			return manager.RunConfig{}, Usagef("--admin-address not given and %v", err)
		}
		d.admin = addr.String()
	}
	ecfg, err := d.config()
	if err != nil {
		return manager.RunConfig{}, err
	}
	path, err := exec.LookPath(envoyArgs[0])
	if err != nil {
		return manager.RunConfig{}, Usagef("envoy command: %v", err)
	}
	cfg := manager.RunConfig{Engine: ecfg, EnvoyPath: path, EnvoyArgs: envoyArgs, StopTimeout: f.stopTimeout}
	var la manager.ListenAddress
	if f.listen != "" {
		if la, err = manager.ParseListen(f.listen); err != nil {
			return manager.RunConfig{}, Usagef("--listen: %v", err)
		}
	}
	acfg, err := f.api.config(la)
	if err != nil {
		return manager.RunConfig{}, err
	}
	switch {
	case f.listen != "":
		cfg.API = &acfg
	case f.api.metricsListen != "" || f.api.tokenFile != "":
		return manager.RunConfig{}, Usagef("--metrics-listen and --token-file need --listen")
	}
	return cfg, nil
}

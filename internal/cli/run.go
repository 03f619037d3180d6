package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/supervisor"
)

// graceMargin is what --termination-grace-period keeps in hand beyond --stop-timeout: the second between
// SIGTERM and SIGKILL of the stop, and one for scheduling, so kubelet's SIGKILL never comes first.
const graceMargin = 2 * time.Second

// runConfig is `run`'s validated configuration.
type runConfig struct {
	drain       drain.Config
	admin       envoyadmin.Address
	envoyPath   string
	envoyArgs   []string // argv, envoyArgs[0] as given
	stopTimeout time.Duration
	listen      *listenAddress // nil: no API
	api         apiConfig
}

// runFlags are `run`'s flags: the drain flags and its own.
type runFlags struct {
	drainFlags
	log         logFlags
	api         apiFlags
	stopTimeout time.Duration
	listen      string
	grace       time.Duration
}

func (f *runFlags) register(fs *flag.FlagSet) {
	f.drainFlags.register(fs)
	f.log.register(fs)
	f.api.register(fs)
	fs.DurationVar(&f.stopTimeout, "stop-timeout", 5*time.Second, "after the drain, wait this long for Envoy to exit after POST /quitquitquit, then SIGTERM, then SIGKILL 1s later")
	fs.StringVar(&f.listen, "listen", "", "also serve the HTTP API (/healthz, /shutdown, /status, /metrics) here: [IP]:PORT (an IP literal; no IP: all interfaces) or unix:///path (default: no API)")
	fs.DurationVar(&f.grace, "termination-grace-period", 0, "the pod's terminationGracePeriodSeconds: when given and --drain-timeout is not, the drain timeout is this minus --stop-timeout minus 2s")
}

// runRun is the agent: Envoy runs as this process's child; SIGTERM or SIGINT drains it, then stops it, and
// the process exits with Envoy's status.
func runRun(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var f runFlags
	f.register(fs)
	sep := slices.Index(args, "--")
	if sep < 0 {
		if err := parse(fs, args, stdout); err != nil {
			return err
		}
		return usagef("give Envoy's command after --, as in: shutdown-manager run -- envoy -c /etc/envoy/envoy.yaml")
	}
	if err := parse(fs, args[:sep], stdout); err != nil {
		return err
	}
	cfg, err := f.config(fs, args[sep+1:])
	if err != nil {
		return err
	}
	log, closeLog, err := f.log.logger(stdout, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	return runAgent(cfg, &f.drainFlags, log)
}

// config validates the parsed flags (fs tells which were set) and Envoy's command into a runConfig.
func (f *runFlags) config(fs *flag.FlagSet, envoyArgs []string) (runConfig, error) {
	if len(envoyArgs) == 0 {
		return runConfig{}, usagef("give Envoy's command after --")
	}
	if f.stopTimeout <= 0 {
		return runConfig{}, usagef("--stop-timeout must be positive")
	}
	if f.grace < 0 {
		return runConfig{}, usagef("--termination-grace-period must not be negative")
	}
	if f.grace > 0 && !isFlagSet(fs, "drain-timeout") {
		f.timeout = f.grace - f.stopTimeout - graceMargin
		if f.timeout <= drain.AddDurations(f.delay, f.minDuration) {
			return runConfig{}, usagef("--termination-grace-period %s leaves %s to drain after --stop-timeout and a 2s margin, not more than --drain-delay plus --min-drain-duration", f.grace, f.timeout)
		}
	}
	if !isFlagSet(fs, "admin-address") {
		addr, err := adminFromCommandLine(envoyArgs, os.ReadFile)
		if err != nil {
			return runConfig{}, usagef("--admin-address not given and %v", err)
		}
		f.admin = addr.String()
	}
	dcfg, addr, err := f.drainFlags.config()
	if err != nil {
		return runConfig{}, err
	}
	path, err := exec.LookPath(envoyArgs[0])
	if err != nil {
		return runConfig{}, usagef("envoy command: %v", err)
	}
	cfg := runConfig{drain: dcfg, admin: addr, envoyPath: path, envoyArgs: envoyArgs, stopTimeout: f.stopTimeout}
	if f.listen != "" {
		la, err := parseListen(f.listen)
		if err != nil {
			return runConfig{}, usagef("--listen: %v", err)
		}
		cfg.listen = &la
	}
	if cfg.api, err = f.api.config(); err != nil {
		return runConfig{}, err
	}
	if cfg.listen == nil && (f.api.metricsListen != "" || f.api.tokenFile != "") {
		return runConfig{}, usagef("--metrics-listen and --token-file need --listen")
	}
	return cfg, nil
}

// adminFromCommandLine reads the admin address from the bootstrap named on Envoy's command line, reading
// files with readFile.
func adminFromCommandLine(envoyArgs []string, readFile func(string) ([]byte, error)) (envoyadmin.Address, error) {
	path, inline := envoyadmin.BootstrapSource(envoyArgs)
	if inline != "" { // merged over the file by Envoy: it wins when it names an admin address
		if addr, found, err := envoyadmin.AdminFromBootstrap([]byte(inline)); found || err != nil {
			return addr, err
		}
	}
	if path == "" {
		return envoyadmin.Address{}, fmt.Errorf("envoy's command line names no bootstrap (-c)")
	}
	data, err := readFile(path)
	if err != nil {
		return envoyadmin.Address{}, fmt.Errorf("reading envoy's bootstrap: %w", err)
	}
	addr, found, err := envoyadmin.AdminFromBootstrap(data)
	if err != nil {
		return envoyadmin.Address{}, fmt.Errorf("%s: %w", path, err)
	}
	if !found {
		return envoyadmin.Address{}, fmt.Errorf("%s has no admin address", path)
	}
	return addr, nil
}

// forwarded are the signals passed on to Envoy as they come.
var forwarded = []os.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2}

// runAgent supervises Envoy. The order of events is plain: start Envoy; on the first SIGTERM/SIGINT (or a
// /shutdown) drain; when the drain releases, stop Envoy; exit with its status. A second SIGTERM/SIGINT
// skips the rest of the drain. If Envoy exits by itself, exit at once with its status.
func runAgent(cfg runConfig, df *drainFlags, log *slog.Logger) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGTERM, syscall.SIGINT}, forwarded...)...)
	defer signal.Stop(sigs)

	proc, err := supervisor.Start(cfg.envoyPath, cfg.envoyArgs, [3]*os.File{os.Stdin, os.Stdout, os.Stderr}, log)
	if err != nil {
		log.Error("cannot start envoy", "err", err)
		return errReported
	}
	defer proc.Close() // whatever happens, Envoy does not outlive this process
	log.Info("envoy started", "pid", proc.Pid(), "command", cfg.envoyArgs, "admin_address", cfg.admin.String(), "version", Version)

	cfg.drain.EnvoyExited = proc.Exited()
	s, err := newStack(df, cfg.drain, cfg.admin, log, "run")
	if err != nil {
		return err
	}
	defer s.stop(nil)
	var apiErrs <-chan error
	if cfg.listen != nil {
		apis, err := startAPI(*cfg.listen, cfg.api, s, log)
		if err != nil {
			log.Error("cannot listen", "listen", cfg.listen.String(), "err", err)
			return errReported
		}
		defer apis.stop()
		apiErrs = apis.errs
		log.Info("serving", "listen", apis.listen, "metrics_listen", apis.metricsListen, "token", cfg.api.token != "")
	}

	var released <-chan struct{} // the drain's Done, once one runs
	started := s.engine.NextStart()
	for released == nil || !closed(released) {
		select {
		case <-proc.Exited():
			log.Error("envoy exited by itself; exiting with its status", "status", proc.Describe(), "pid", proc.Pid())
			return exitCode(proc.ExitCode())
		case err := <-apiErrs:
			log.Error("serving failed; stopping envoy", "err", err)
			apiErrs = nil
			s.stop(fmt.Errorf("the API failing: %w", err))
			released = closedChan
		case <-started: // a drain began through /shutdown
			started = nil
			if released == nil {
				released = closedChan // it has already released, unless it is still running:
				if d := s.engine.Running(); d != nil {
					released = d.Done()
				}
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
	how := proc.Stop(s.admin.Quit, cfg.stopTimeout)
	log.Info("envoy stopped; exiting with its status", "by", how, "status", proc.Describe())
	return exitCode(proc.ExitCode())
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

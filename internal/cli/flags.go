package cli

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drainflag"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyproc"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manager"
)

// countFlags say where Envoy's admin API is and what counts as work in flight: all that `status` needs. They, the
// drainFlags and the LogFlags are registered from drainflag's table, which declares each one's name, help and
// default (inject names the flags it writes into pods by the same rows).
type countFlags struct {
	admin        string
	adminTimeout time.Duration
	count        string
	include      regexpList
	exclude      regexpList
}

func (f *countFlags) register(fs *flag.FlagSet) {
	drainflag.AdminAddress.Var(fs, &f.admin)
	drainflag.AdminTimeout.Var(fs, &f.adminTimeout)
	drainflag.Count.Var(fs, &f.count)
	drainflag.ListenerInclude.Var(fs, &f.include)
	drainflag.ListenerExclude.Var(fs, &f.exclude)
}

// adminFound ends the help of --admin-address for the commands that find Envoy themselves (drain, status, resume).
const adminFound = "\n(not given: read from the bootstrap on the command line of Envoy's process, when this process can see it, as an exec hook in Envoy's container does; with several Envoy processes, PID 1, else the oldest; no Envoy process or no fixed address in its bootstrap: the default)"

// config validates the counting flags.
func (f *countFlags) config() (manager.StatusConfig, error) {
	addr, err := envoyadmin.ParseAddress(f.admin)
	if err != nil {
		return manager.StatusConfig{}, Usagef("--admin-address: %v", err)
	}
	if f.adminTimeout <= 0 {
		return manager.StatusConfig{}, Usagef("--admin-timeout must be positive")
	}
	mode, err := drain.ParseMode(f.count)
	if err != nil {
		return manager.StatusConfig{}, Usagef("--count: %v", err)
	}
	return manager.StatusConfig{Admin: addr, AdminTimeout: f.adminTimeout, Mode: mode,
		Selector: drain.Selector{Include: f.include, Exclude: f.exclude, Names: drainflag.Named}}, nil
}

// drainFlags are the flags every front end of the drain engine shares (serve, drain, run).
type drainFlags struct {
	countFlags
	delay       time.Duration
	minDuration time.Duration
	quiet       quietFlag
	timeout     time.Duration
	interval    time.Duration
	threshold   int64
	listeners   string
	goneAfter   time.Duration
	kubeconfig  string
}

func (f *drainFlags) register(fs *flag.FlagSet) {
	f.countFlags.register(fs)
	drainflag.DrainDelay.Var(fs, &f.delay)
	drainflag.MinDrainDuration.Var(fs, &f.minDuration)
	drainflag.QuietPeriod.Var(fs, &f.quiet)
	drainflag.DrainTimeout.Var(fs, &f.timeout)
	drainflag.CheckInterval.Var(fs, &f.interval)
	drainflag.MinOpenConnections.Var(fs, &f.threshold)
	drainflag.DrainListeners.Var(fs, &f.listeners)
	drainflag.Kubeconfig.Var(fs, &f.kubeconfig)
	drainflag.EnvoyGoneAfter.Var(fs, &f.goneAfter)
}

// config validates the flags into the engine's configuration.
func (f *drainFlags) config() (manager.EngineConfig, error) {
	sc, err := f.countFlags.config()
	if err != nil {
		return manager.EngineConfig{}, err
	}
	ld, err := drain.ParseListenerDrain(f.listeners)
	if err != nil {
		return manager.EngineConfig{}, Usagef("--drain-listeners: %v", err)
	}
	if f.goneAfter <= 0 {
		return manager.EngineConfig{}, Usagef("--envoy-gone-after must be positive")
	}
	cfg := drain.Config{
		Delay:         f.delay,
		MinDuration:   f.minDuration,
		QuietPeriod:   f.quiet.d,
		AdaptiveQuiet: f.quiet.auto,
		Timeout:       f.timeout,
		Interval:      f.interval,
		Threshold:     f.threshold,
		Mode:          sc.Mode,
		Selector:      sc.Selector,
		ListenerDrain: ld,
		GoneAfter:     f.goneAfter,
	}
	if err := cfg.Validate(); err != nil {
		return manager.EngineConfig{}, flagError(err)
	}
	return manager.EngineConfig{Drain: cfg, Admin: sc.Admin, AdminTimeout: sc.AdminTimeout, Kubeconfig: f.kubeconfig, Version: Version}, nil
}

// flagError turns the drain's invalid setting into a usage error that names its flag.
func flagError(err error) error {
	if ce, ok := errors.AsType[*drain.ConfigError](err); ok {
		return Usagef("%s", ce.Text(drainflag.Named))
	}
	return usageError{err}
}

// quietFlag is --quiet-period: auto (the adaptive rule, the default) or a duration (a fixed silence; 0: off).
type quietFlag struct {
	d    time.Duration
	auto bool
}

func (q *quietFlag) String() string {
	if q.auto {
		return "auto"
	}
	return q.d.String()
}

func (q *quietFlag) Set(s string) error {
	if s == "auto" {
		*q = quietFlag{auto: true}
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want auto or a duration")
	}
	*q = quietFlag{d: d}
	return nil
}

// least is the shortest quiet period the drain may wait (drain.Config.LeastQuiet).
func (q quietFlag) least() time.Duration {
	return drain.Config{QuietPeriod: q.d, AdaptiveQuiet: q.auto}.LeastQuiet()
}

// IsFlagSet reports whether the command line set the flag name (as opposed to its default).
func IsFlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// regexpList is a repeatable flag of regular expressions.
type regexpList []*regexp.Regexp

func (l *regexpList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, re := range *l {
		s[i] = re.String()
	}
	return strings.Join(s, ",")
}

func (l *regexpList) Set(v string) error {
	re, err := regexp.Compile(v)
	if err != nil {
		return err
	}
	*l = append(*l, re)
	return nil
}

// LogFlags choose the log's format, level and destination.
type LogFlags struct {
	format string
	level  string
	output string
}

func (f *LogFlags) Register(fs *flag.FlagSet) {
	drainflag.LogFormat.Var(fs, &f.format)
	drainflag.LogLevel.Var(fs, &f.level)
	drainflag.LogOutput.Var(fs, &f.output)
}

// logger builds the logger; the returned closer closes an opened destination. Only a bad flag value is an
// error: a destination that cannot be opened at run time (another user's process, a socket, a read-only
// file system) falls back to stderr, with one warning there, because a hook that exits instead of
// draining lets Envoy's SIGTERM through with requests in flight.
func (f *LogFlags) Logger(stdout, stderr io.Writer) (*slog.Logger, func(), error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.level)); err != nil {
		return nil, nil, Usagef("--log-level: %q is not one of debug, info, warn, error", f.level)
	}
	if f.format != "json" && f.format != "text" {
		return nil, nil, Usagef("--log-format: %q is not one of json, text", f.format)
	}
	if f.output == "" {
		return nil, nil, Usagef("--log-output must not be empty")
	}
	w, closer, openErr := openLogOutput(f.output, stdout, stderr)
	opts := &slog.HandlerOptions{Level: level}
	var log *slog.Logger
	if f.format == "text" {
		log = slog.New(slog.NewTextHandler(w, opts))
	} else {
		log = slog.New(slog.NewJSONHandler(w, opts))
	}
	if openErr != nil {
		log.Warn("log destination unavailable; logging to stderr", "log_output", f.output, "err", openErr)
	}
	return log, closer, nil
}

// openLogOutput opens a --log-output destination; when it cannot, it returns stderr and the reason.
func openLogOutput(output string, stdout, stderr io.Writer) (io.Writer, func(), error) {
	var file *os.File
	var err error
	switch output {
	case "stderr":
		return stderr, func() {}, nil
	case "stdout":
		return stdout, func() {}, nil
	case "envoy", "pid1":
		var p envoyproc.Process
		if p, err = envoyproc.Find("/proc"); err == nil {
			file, err = p.OpenStdout()
		}
	default:
		file, err = os.OpenFile(output, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	}
	if err != nil {
		return stderr, func() {}, err
	}
	return file, func() { file.Close() }, nil
}

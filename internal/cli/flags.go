package cli

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// drainFlags are the flags every front end of the drain engine shares (serve, drain, run).
type drainFlags struct {
	admin        string
	adminTimeout time.Duration
	delay        time.Duration
	minDuration  time.Duration
	timeout      time.Duration
	interval     time.Duration
	threshold    int64
	count        string
	include      regexpList
	exclude      regexpList
	listeners    string
}

func (f *drainFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.admin, "admin-address", "http://127.0.0.1:9901", "Envoy's admin API: http://IP:PORT, IP:PORT (no scheme means http) or unix:///path/admin.sock (an IP, not a name: localhost may resolve to ::1)")
	fs.DurationVar(&f.adminTimeout, "admin-timeout", time.Second, "timeout of each admin API request")
	fs.DurationVar(&f.delay, "drain-delay", 0, "keep serving normally this long before failing health checks (endpoint propagation, external load balancers)")
	fs.DurationVar(&f.minDuration, "min-drain-duration", 5*time.Second, "after failing health checks, keep accepting at least this long before releasing")
	fs.DurationVar(&f.timeout, "drain-timeout", 60*time.Second, "release at the latest this long after the trigger, whatever is still in flight")
	fs.DurationVar(&f.interval, "check-interval", 250*time.Millisecond, "longest time between two polls of Envoy's stats; while waiting to release, polls come sooner when they are cheap (10x the last poll's duration, at least 25ms apart)")
	fs.Int64Var(&f.threshold, "min-open-connections", 0, "release when the work in flight is at or below this")
	fs.StringVar(&f.count, "count", string(drain.ModeInflight), "what counts as work in flight: inflight (HTTP requests + non-HTTP connections), connections (every downstream connection), requests (HTTP requests)")
	fs.Var(&f.include, "listener-include", "regular expression on stat scopes (listener.<addr>, http.<prefix>): only matching ones count (repeatable)")
	fs.Var(&f.exclude, "listener-exclude", "regular expression on stat scopes (listener.<addr>, http.<prefix>): matching ones do not count (repeatable)")
	fs.StringVar(&f.listeners, "drain-listeners", string(drain.ListenerDrainNone), "also start Envoy's graceful listener drain after failing health checks: none, inbound, all (for listeners with drain_type MODIFY_ONLY)")
}

// config validates the flags into the engine's Config and the admin address.
func (f *drainFlags) config() (drain.Config, envoyadmin.Address, error) {
	addr, err := envoyadmin.ParseAddress(f.admin)
	if err != nil {
		return drain.Config{}, envoyadmin.Address{}, usagef("--admin-address: %v", err)
	}
	if f.adminTimeout <= 0 {
		return drain.Config{}, envoyadmin.Address{}, usagef("--admin-timeout must be positive")
	}
	mode, err := drain.ParseMode(f.count)
	if err != nil {
		return drain.Config{}, envoyadmin.Address{}, usagef("--count: %v", err)
	}
	ld, err := drain.ParseListenerDrain(f.listeners)
	if err != nil {
		return drain.Config{}, envoyadmin.Address{}, usagef("--drain-listeners: %v", err)
	}
	cfg := drain.Config{
		Delay:         f.delay,
		MinDuration:   f.minDuration,
		Timeout:       f.timeout,
		Interval:      f.interval,
		Threshold:     f.threshold,
		Mode:          mode,
		Selector:      drain.Selector{Include: f.include, Exclude: f.exclude},
		ListenerDrain: ld,
	}
	if err := cfg.Validate(); err != nil {
		return drain.Config{}, envoyadmin.Address{}, usageError{err}
	}
	if f.delay+f.minDuration >= f.timeout {
		return drain.Config{}, envoyadmin.Address{}, usagef("--drain-timeout (%s) must be longer than --drain-delay plus --min-drain-duration (%s)", f.timeout, f.delay+f.minDuration)
	}
	return cfg, addr, nil
}

func (f *drainFlags) client(addr envoyadmin.Address, m *drain.Metrics) *envoyadmin.Client {
	return envoyadmin.New(addr, envoyadmin.Options{Timeout: f.adminTimeout, Observe: m.AdminRequest})
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

// logFlags choose the log's format, level and destination.
type logFlags struct {
	format string
	level  string
	output string
}

func (f *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.format, "log-format", "json", "log format: json or text")
	fs.StringVar(&f.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&f.output, "log-output", "stderr", "where logs go: stderr, stdout, pid1 (PID 1's stdout, so an exec hook's logs show in kubectl logs), or a file path")
}

// logger builds the logger; the returned closer closes an opened file.
func (f *logFlags) logger(stdout, stderr io.Writer) (*slog.Logger, func(), error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.level)); err != nil {
		return nil, nil, usagef("--log-level: %q is not one of debug, info, warn, error", f.level)
	}
	if f.format != "json" && f.format != "text" {
		return nil, nil, usagef("--log-format: %q is not one of json, text", f.format)
	}
	w, closer := stderr, func() {}
	switch f.output {
	case "stderr":
	case "stdout":
		w = stdout
	default:
		path := f.output
		if path == "pid1" {
			path = "/proc/1/fd/1"
		}
		file, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, nil, usagef("--log-output: %v", err)
		}
		w, closer = file, func() { file.Close() }
	}
	opts := &slog.HandlerOptions{Level: level}
	if f.format == "text" {
		return slog.New(slog.NewTextHandler(w, opts)), closer, nil
	}
	return slog.New(slog.NewJSONHandler(w, opts)), closer, nil
}

func durationText(d time.Duration) string { return fmt.Sprint(d.Round(time.Millisecond)) }

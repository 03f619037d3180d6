// Package drainflag declares the drain's settings as flags, once: each one's name, help and default. The pod's
// commands register their flags from this table (drain, serve and run every row; status the counting ones), and
// inject, which carries settings into the commands it writes into pods, names each flag it writes by one of these
// rows (inject.DrainSettings), so that a setting's flag is spelled in one place.
//
// It is a package of its own, below inject and cli, because the two sides may not import each other: cli is the
// pod binary, which links no Kubernetes API type, and inject brings them. It imports only the drain (the defaults
// and the settings its errors name) and podenv.
package drainflag

import (
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/podenv"
)

// Flag is one row of the table: a flag of drain, serve and run.
type Flag struct {
	Name string
	// Default is the flag's default: a time.Duration, an int64 or a string, the type of the value it is
	// registered with (Var); for a flag.Value, a string it is Set to first, or nil (the Value's zero).
	Default any
	Help    string
	// Setting is the field of drain.Config the flag sets ("" = none): the drain's errors name it, and the
	// commands spell it as this flag (Named).
	Setting drain.Setting
}

// Var registers the flag on fs with its name, default and help; p holds its value: a *time.Duration, *int64,
// *string or a flag.Value. A p of another type than Default's is a programming error: Var panics.
func (f Flag) Var(fs *flag.FlagSet, p any) {
	switch p := p.(type) {
	case *time.Duration:
		fs.DurationVar(p, f.Name, f.Default.(time.Duration), f.Help)
	case *int64:
		fs.Int64Var(p, f.Name, f.Default.(int64), f.Help)
	case *string:
		fs.StringVar(p, f.Name, f.Default.(string), f.Help)
	case flag.Value:
		if d, ok := f.Default.(string); ok {
			if err := p.Set(d); err != nil {
				panic(fmt.Sprintf("drainflag: --%s: default %q: %v", f.Name, d, err))
			}
		}
		fs.Var(p, f.Name, f.Help)
	default:
		panic(fmt.Sprintf("drainflag: --%s: value of type %T", f.Name, p))
	}
}

// DefaultAdmin is --admin-address's default (resume's too).
const DefaultAdmin = "http://127.0.0.1:9901"

// The table's rows: every one is a flag of drain, serve and run.
var (
	AdminAddress = Flag{Name: "admin-address", Default: DefaultAdmin,
		Help: "Envoy's admin API: http://IP:PORT, IP:PORT (the same: plain HTTP) or unix:///path/admin.sock; an IP, not a name (localhost may resolve to ::1)"}
	AdminTimeout = Flag{Name: "admin-timeout", Default: time.Second,
		Help: "timeout of each admin API request"}
	Count = Flag{Name: "count", Default: string(drain.ModeInflight), Setting: drain.SettingMode,
		Help: "what counts as work in flight: inflight (HTTP requests + non-HTTP connections), connections (every downstream connection), requests (HTTP requests)"}
	ListenerInclude = Flag{Name: "listener-include", Setting: drain.SettingListenerInclude,
		Help: "regular expression on stat scopes (listener.<addr>, http.<prefix>): only groups with a matching member count (repeatable)"}
	ListenerExclude = Flag{Name: "listener-exclude", Setting: drain.SettingListenerExclude,
		Help: "regular expression on stat scopes (listener.<addr>, http.<prefix>): groups with a matching member do not count (repeatable)"}

	DrainDelay = Flag{Name: "drain-delay", Default: drain.DefaultDelay, Setting: drain.SettingDelay,
		Help: "keep serving normally this long before failing health checks (endpoint propagation, external load balancers)"}
	MinDrainDuration = Flag{Name: "min-drain-duration", Default: drain.DefaultMinDuration, Setting: drain.SettingMinDuration,
		Help: "after failing health checks, keep accepting at least this long before releasing (the floor)"}
	QuietPeriod = Flag{Name: "quiet-period", Default: "auto", Setting: drain.SettingQuietPeriod,
		Help: "past --min-drain-duration, keep accepting until no new connection and no new request has arrived for this long (readiness listeners' probes apart), within --drain-timeout: auto reads the silence needed from the traffic seen since health checks failed (at least 0.5s, at most 10s); a `duration` is a fixed silence; 0 turns it off"}
	DrainTimeout = Flag{Name: "drain-timeout", Default: drain.DefaultTimeout, Setting: drain.SettingTimeout,
		Help: "release at the latest this long after the trigger, whatever is still in flight"}
	CheckInterval = Flag{Name: "check-interval", Default: drain.DefaultInterval, Setting: drain.SettingInterval,
		Help: "longest time between two polls of Envoy's stats; while waiting to release, polls come sooner when they are cheap (10x the last poll's duration); never less than 25ms apart, whatever this says"}
	MinOpenConnections = Flag{Name: "min-open-connections", Default: int64(0), Setting: drain.SettingThreshold,
		Help: "release when the work in flight is at or below this"}
	DrainListeners = Flag{Name: "drain-listeners", Default: string(drain.ListenerDrainNone), Setting: drain.SettingListenerDrain,
		Help: "also start Envoy's graceful listener drain after failing health checks: none, inbound, all (for listeners with drain_type MODIFY_ONLY)"}
	Kubeconfig = Flag{Name: "kubeconfig", Default: "",
		Help: "record Kubernetes Events (DrainStarted, Drained, …) on this pod through the API server of this kubeconfig file (default: the in-cluster config, when running in a pod); the pod is named by " + podenv.Name + " and " + podenv.Namespace + "; without them or without access: one warning, no Events, the drain unaffected"}
	EnvoyGoneAfter = Flag{Name: "envoy-gone-after", Default: drain.DefaultGoneAfter, Setting: drain.SettingGoneAfter,
		Help: "if Envoy's admin API refuses every connection (or its socket is missing) this long and Envoy is shown gone (drain: no Envoy process in its container; serve: the admin answered before; run: Envoy exited), release at once (outcome envoy_gone, exit 0); Envoy shown running there: a configuration error, held to the deadline (outcome misconfigured, drain exits 3)"}

	LogFormat = Flag{Name: "log-format", Default: "json",
		Help: "log format: json or text"}
	LogLevel = Flag{Name: "log-level", Default: "info",
		Help: "log level: debug, info, warn, error"}
	LogOutput = Flag{Name: "log-output", Default: "stderr",
		Help: "where logs go: stderr, stdout, envoy (the stdout of Envoy's process, found in /proc, so an exec hook's log shows in kubectl logs of Envoy's container; pid1 is an old name for it), or a file path; a destination that cannot be opened falls back to stderr with a warning"}
)

// The table in groups: CountFlags change what counts as work in flight (status has them), DrainFlags are the
// drain's timing and its Events, LogFlags the log's; All is every row.
var (
	CountFlags = []Flag{AdminAddress, AdminTimeout, Count, ListenerInclude, ListenerExclude}
	DrainFlags = []Flag{DrainDelay, MinDrainDuration, QuietPeriod, DrainTimeout, CheckInterval, MinOpenConnections, DrainListeners, Kubeconfig, EnvoyGoneAfter}
	LogFlags   = []Flag{LogFormat, LogLevel, LogOutput}
	All        = slices.Concat(CountFlags, DrainFlags, LogFlags)
)

// Named spells a drain setting as its flag, --Name; a setting no row sets is its field's name (drain.Names).
func Named(s drain.Setting) string {
	for _, f := range All {
		if f.Setting != "" && f.Setting == s {
			return "--" + f.Name
		}
	}
	return string(s)
}

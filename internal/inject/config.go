package inject

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Mode is how the manager is put into a pod.
type Mode string

const (
	// ModeHook (the default): no process runs until termination. Envoy's preStop hook executes
	// `shutdown-manager drain` inside Envoy's container; the binary comes from BinaryFrom.
	ModeHook Mode = "hook"
	// ModeSidecar: `shutdown-manager serve` runs beside Envoy and Envoy's preStop hook asks it to drain
	// (Hook says how).
	ModeSidecar Mode = "sidecar"
	// ModeAgent: Envoy's command is wrapped in `shutdown-manager run -- …`, which drains on SIGTERM.
	ModeAgent Mode = "agent"
)

// BinaryFrom is where Envoy's container finds the binary (hook and agent modes, and the sidecar's exec hook).
type BinaryFrom string

const (
	// BinaryCopy: an init container running our image copies the binary into an emptyDir
	// (`shutdown-manager install`). Works on every cluster, unless the node mounts its emptyDirs noexec.
	BinaryCopy BinaryFrom = "copy"
	// BinaryImageVolume: our image mounted as an image volume (Kubernetes >= 1.35, a runtime that supports
	// image volumes such as containerd >= 2). No init container, no copy, works on noexec nodes.
	BinaryImageVolume BinaryFrom = "image-volume"
)

// Hook is how Envoy's preStop hook reaches the sidecar (ModeSidecar).
type Hook string

const (
	// HookExec (the default): the sidecar listens on a unix socket in a shared emptyDir and the hook runs
	// `drain --via` against it. No TCP port: nothing outside the pod can start a drain.
	HookExec Hook = "exec"
	// HookHTTP: the sidecar listens on a TCP port and the hook is an httpGet of /shutdown, sent by kubelet.
	// Anything that reaches the pod IP on that port can start a drain; metrics are served on their own port.
	HookHTTP Hook = "http"
)

// SidecarKind is where the sidecar goes (ModeSidecar).
type SidecarKind string

const (
	// SidecarNative (the default): an init container with restartPolicy Always (Kubernetes >= 1.29), started
	// before Envoy and stopped only after Envoy has exited.
	SidecarNative SidecarKind = "native"
	// SidecarPlain: a regular container, for clusters without native sidecars. It gets SIGTERM at the same
	// time as Envoy's hook starts and keeps serving while a drain runs (serve's --trigger-wait covers a hook
	// that arrives just after the signal).
	SidecarPlain SidecarKind = "plain"
)

// Defaults of Config's zero values.
const (
	DefaultMode        = ModeHook
	DefaultBinaryFrom  = BinaryCopy
	DefaultHook        = HookExec
	DefaultSidecarKind = SidecarNative
	DefaultPort        = 8090 // the sidecar's API with HookHTTP (serve's default --listen)
	DefaultMetricsPort = 9090 // the sidecar's metrics with HookHTTP
)

// The drain's own defaults (those of the drain, serve and run flags), used to size the grace period.
const (
	DefaultDrainDelay       = drain.DefaultDelay
	DefaultMinDrainDuration = drain.DefaultMinDuration
	// DefaultLeastQuiet is the least the default quiet period (the adaptive rule, --quiet-period=auto)
	// waits after health checks failed: its lower bound, what a drain with no new traffic waits.
	DefaultLeastQuiet = drain.AdaptiveQuietMin
)

// DefaultEnvoyCommand is Envoy's command in agent mode when its container sets none: `envoy` on PATH, as in
// the official images (their entrypoint script prepends `envoy` to arguments that start with "-").
var DefaultEnvoyCommand = []string{"envoy"}

// Config is what to inject, the same for every pod it is applied to; a pod's annotations (the Annotation*
// keys) override it. Zero values mean the defaults above. Drain settings left nil are not passed, so the
// manager's own defaults apply, except the drain timeout, which is always derived (see Inject).
type Config struct {
	Image           string            // our image (required): FROM scratch, the binary at /shutdown-manager
	ImagePullPolicy corev1.PullPolicy // of the injected containers and the image volume; "" = Kubernetes' default
	Version         string            // the manager's version, recorded in the status annotation

	Mode           Mode
	BinaryFrom     BinaryFrom
	Hook           Hook
	SidecarKind    SidecarKind
	EnvoyContainer string   // "" = found (see Inject)
	EnvoyCommand   []string // agent mode, when Envoy's container sets no command; nil = DefaultEnvoyCommand
	AdminAddress   string   // "" = found at hook time from Envoy's command line and bootstrap
	Port           int32    // HookHTTP: the sidecar's API port; 0 = DefaultPort
	MetricsPort    int32    // HookHTTP: the sidecar's metrics port; 0 = DefaultMetricsPort
	ReplaceHooks   bool     // replace a preStop hook Envoy's container already has (uninject restores it)
	// TokenSecret (sidecar mode, HookHTTP): a Secret of the pod's namespace whose key TokenKey is the token that
	// guards the sidecar's /shutdown and /resume (serve --token-file). It is mounted read-only into the sidecar
	// and Envoy's container, and Envoy's preStop hook becomes `drain --via` the sidecar's port with it, since
	// kubelet's httpGet hook can only send headers written into the pod spec. "" = no token.
	TokenSecret string
	// Takeover: replace another project's shutdown manager (Contour's, Envoy Gateway's, MARIN3R's) with ours;
	// without it such a pod is refused (ErrPeerManager). See takeover.go.
	Takeover bool
	// NoAPIToken: never mount a token of the manager's own (APIAccessVolume) into a pod that turns
	// automountServiceAccountToken off; the manager's Events in such a pod are then only logged.
	NoAPIToken bool

	Drain Drain
	// DeregistrationDelay, when > 0, is how long after the pod starts terminating a load balancer may still send
	// it new connections (an AWS NLB: up to its deregistration delay; measured 30–120 s). A derived drain timeout
	// covers it and then the quiet period's longest silence (DeregistrationNeed), the grace period raised to fit;
	// a --drain-timeout given shorter is kept, and DeregistrationShortfall says so with the numbers.
	DeregistrationDelay time.Duration
}

// Drain holds the drain flags inject passes on; nil or empty = not passed. Each field is a row of
// DrainSettings (settings.go), which parses, validates, writes and records them.
type Drain struct {
	Delay              *time.Duration
	MinDuration        *time.Duration
	QuietPeriod        *time.Duration
	Timeout            *time.Duration // nil = derived from terminationGracePeriodSeconds
	MinOpenConnections *int64
	Count              string
	ListenerExclude    []string
	ListenerInclude    []string
	ListenerDrain      string
	CheckInterval      *time.Duration
	EnvoyGoneAfter     *time.Duration
	AdminTimeout       *time.Duration
	LogLevel           string // the drain's --log-level
	LogFormat          string // the drain's --log-format
}

// Annotation keys, on the pod (a workload's pod template), all under one prefix.
const (
	Prefix = "shutdown-manager.io/"

	AnnotationInject         = Prefix + "inject"       // "false": the pod is opted out, left as it is; "true": the pod itself asks for the manager (without an Envoy container it is then a warning, not a silent skip)
	AnnotationMode           = Prefix + "mode"         // hook, sidecar, agent
	AnnotationBinaryFrom     = Prefix + "binary-from"  // copy, image-volume
	AnnotationHook           = Prefix + "hook"         // exec, http
	AnnotationSidecarKind    = Prefix + "sidecar-kind" // native, plain
	AnnotationEnvoyContainer = Prefix + "envoy-container"
	AnnotationEnvoyCommand   = Prefix + "envoy-command" // agent: Envoy's command when the container sets none, words separated by spaces
	AnnotationAdminAddress   = Prefix + "admin-address"
	// The drain's settings' annotations are DrainSettings' (settings.go): Prefix + Name.
	AnnotationTokenSecret         = Prefix + "token-secret"         // sidecar mode, hook http: the Secret holding the token (as --token-secret)
	AnnotationTakeover            = Prefix + "takeover"             // "true": take over a peer's shutdown manager (as --takeover)
	AnnotationAPIToken            = Prefix + "api-token"            // "false": no token of the manager's own where automount is off (as --api-token=false)
	AnnotationDeregistrationDelay = Prefix + "deregistration-delay" // how long the load balancer may still send new connections (a duration, as --deregistration-delay)

	// AnnotationStatus is written by Inject: what was injected, by which version, and what it replaced.
	AnnotationStatus = Prefix + "status"
)

// Validate checks a Config on its own (a pod's annotations may still override it), so that a bad setting
// is reported once rather than for every pod.
func (c Config) Validate() error {
	_, err := resolve(c, nil)
	return err
}

// settings is a Config with a pod's annotations applied, defaults filled in and everything validated.
type settings struct {
	Config
	minDuration time.Duration // effective, for the grace period
	quiet       time.Duration
	delay       time.Duration
	takeover    *Takeover // what takeOver removed, for the status annotation
}

// resolve applies the pod's annotations over cfg and validates the result. Errors name the annotation
// and its value, or the Config field.
func resolve(cfg Config, annotations map[string]string) (settings, error) {
	s := settings{Config: cfg}
	s.EnvoyCommand = append([]string(nil), cfg.EnvoyCommand...)
	s.Drain.ListenerExclude = append([]string(nil), cfg.Drain.ListenerExclude...)
	s.Drain.ListenerInclude = append([]string(nil), cfg.Drain.ListenerInclude...)
	if err := s.annotations(annotations); err != nil {
		return settings{}, err
	}
	if s.Image == "" {
		return settings{}, fmt.Errorf("no image given for the shutdown manager")
	}
	if s.Mode == "" {
		s.Mode = DefaultMode
	}
	if s.BinaryFrom == "" {
		s.BinaryFrom = DefaultBinaryFrom
	}
	if s.Hook == "" {
		s.Hook = DefaultHook
	}
	if s.SidecarKind == "" {
		s.SidecarKind = DefaultSidecarKind
	}
	if s.Port == 0 {
		s.Port = DefaultPort
	}
	if s.MetricsPort == 0 {
		s.MetricsPort = DefaultMetricsPort
	}
	if len(s.EnvoyCommand) == 0 {
		s.EnvoyCommand = DefaultEnvoyCommand
	}
	checks := []struct {
		name string
		err  error
	}{
		{"mode", oneOf(string(s.Mode), ModeHook, ModeSidecar, ModeAgent)},
		{"binary source", oneOf(string(s.BinaryFrom), BinaryCopy, BinaryImageVolume)},
		{"hook", oneOf(string(s.Hook), HookExec, HookHTTP)},
		{"sidecar kind", oneOf(string(s.SidecarKind), SidecarNative, SidecarPlain)},
		{"image pull policy", oneOf(string(s.ImagePullPolicy), "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever)},
		{"port", validPort(s.Port)},
		{"metrics port", validPort(s.MetricsPort)},
	}
	for _, d := range DrainSettings {
		checks = append(checks, struct {
			name string
			err  error
		}{strings.ReplaceAll(d.Name, "-", " "), d.validate(&s.Config)})
	}
	for _, c := range checks {
		if c.err != nil {
			return settings{}, fmt.Errorf("%s: %w", c.name, c.err)
		}
	}
	if s.TokenSecret != "" {
		if err := validSecretName(s.TokenSecret); err != nil {
			return settings{}, fmt.Errorf("token secret: %w", err)
		}
		if s.Mode != ModeSidecar || s.Hook != HookHTTP {
			return settings{}, fmt.Errorf("token secret %q: only sidecar mode with the http hook listens on a port a token must guard (mode %s, hook %s); the exec hook's unix socket is in the pod's own volume", s.TokenSecret, s.Mode, s.Hook)
		}
	}
	if s.DeregistrationDelay < 0 {
		return settings{}, fmt.Errorf("deregistration delay %s is negative", s.DeregistrationDelay)
	}
	if s.Port == s.MetricsPort {
		return settings{}, fmt.Errorf("port and metrics port are both %d", s.Port)
	}
	s.delay, s.minDuration = DefaultDrainDelay, DefaultMinDrainDuration
	if s.Drain.Delay != nil {
		s.delay = *s.Drain.Delay
	}
	if s.Drain.MinDuration != nil {
		s.minDuration = *s.Drain.MinDuration
	}
	s.quiet = DefaultLeastQuiet
	if s.Drain.QuietPeriod != nil {
		s.quiet = *s.Drain.QuietPeriod
	}
	if t := s.Drain.Timeout; t != nil && s.quiet > s.minDuration && *t <= drain.AddDurations(s.delay, s.quiet) {
		err := fmt.Errorf("drain timeout %s must be longer than the drain delay plus the quiet period (%s)", *t, drain.AddDurations(s.delay, s.quiet))
		if v, ok := annotations[drainTimeoutAnnotation]; ok {
			err = fmt.Errorf("annotation %s: %q: %w", drainTimeoutAnnotation, v, err)
		}
		return settings{}, err
	}
	if t := s.Drain.Timeout; t != nil && (*t <= drain.AddDurations(s.delay, s.minDuration) || ceilSeconds(*t) > maxGraceSeconds-int64(margin(s.Mode)/time.Second)) {
		err := fmt.Errorf("drain timeout %s must be longer than the drain delay plus the minimum drain duration (%s)", *t, drain.AddDurations(s.delay, s.minDuration))
		if *t > drain.AddDurations(s.delay, s.minDuration) {
			err = fmt.Errorf("drain timeout %s with %s mode's margin of %s is longer than any grace period a duration holds (%ds)", *t, s.Mode, margin(s.Mode), maxGraceSeconds)
		}
		if v, ok := annotations[drainTimeoutAnnotation]; ok {
			err = fmt.Errorf("annotation %s: %q: %w", drainTimeoutAnnotation, v, err)
		}
		return settings{}, err
	}
	return s, nil
}

// annotations overrides s with the pod's annotations. An unknown key under Prefix is an error: a typo must
// not silently leave a setting at its default.
func (s *settings) annotations(a map[string]string) error {
	for _, key := range sortedKeys(a) {
		if !strings.HasPrefix(key, Prefix) {
			continue
		}
		v := a[key]
		bad := func(err error) error { return fmt.Errorf("annotation %s: %q: %w", key, v, err) }
		if d, ok := DrainSettingNamed(strings.TrimPrefix(key, Prefix)); ok {
			if err := d.setAnnotation(&s.Config, v); err != nil {
				return bad(err)
			}
			continue
		}
		switch key {
		case AnnotationInject:
			if v != InjectTrue && v != InjectFalse {
				return bad(fmt.Errorf("want %s or %s", InjectTrue, InjectFalse))
			}
		case AnnotationStatus:
		case AnnotationTakeover:
			if v != "true" && v != "false" {
				return bad(fmt.Errorf("want true or false"))
			}
			s.Takeover = v == "true"
		case AnnotationAPIToken:
			if v != "true" && v != "false" {
				return bad(fmt.Errorf("want true or false"))
			}
			s.NoAPIToken = v == "false"
		case AnnotationMode:
			if err := oneOf(v, ModeHook, ModeSidecar, ModeAgent); err != nil {
				return bad(err)
			}
			s.Mode = Mode(v)
		case AnnotationBinaryFrom:
			if err := oneOf(v, BinaryCopy, BinaryImageVolume); err != nil {
				return bad(err)
			}
			s.BinaryFrom = BinaryFrom(v)
		case AnnotationHook:
			if err := oneOf(v, HookExec, HookHTTP); err != nil {
				return bad(err)
			}
			s.Hook = Hook(v)
		case AnnotationSidecarKind:
			if err := oneOf(v, SidecarNative, SidecarPlain); err != nil {
				return bad(err)
			}
			s.SidecarKind = SidecarKind(v)
		case AnnotationDeregistrationDelay:
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return bad(fmt.Errorf("want a duration >= 0, such as 120s"))
			}
			s.DeregistrationDelay = d
		case AnnotationTokenSecret:
			if err := validSecretName(v); err != nil {
				return bad(err)
			}
			s.TokenSecret = v
		case AnnotationEnvoyContainer:
			if v == "" {
				return bad(fmt.Errorf("empty container name"))
			}
			s.EnvoyContainer = v
		case AnnotationEnvoyCommand:
			words := strings.Fields(v)
			if len(words) == 0 {
				return bad(fmt.Errorf("empty command"))
			}
			s.EnvoyCommand = words
		default:
			return fmt.Errorf("annotation %s: unknown (known: %s)", key, strings.Join(knownAnnotations, ", "))
		}
	}
	return nil
}

// knownAnnotations: inject's own, then one per row of DrainSettings.
var knownAnnotations = func() []string {
	known := []string{AnnotationInject, AnnotationMode, AnnotationBinaryFrom, AnnotationHook, AnnotationSidecarKind,
		AnnotationEnvoyContainer, AnnotationEnvoyCommand, AnnotationTokenSecret, AnnotationTakeover, AnnotationAPIToken,
		AnnotationDeregistrationDelay, AnnotationStatus}
	for _, d := range DrainSettings {
		known = append(known, d.Annotation())
	}
	return known
}()

func oneOf[T ~string](v string, allowed ...T) error {
	names := make([]string, len(allowed))
	for i, a := range allowed {
		if string(a) == v {
			return nil
		}
		names[i] = string(a)
	}
	return fmt.Errorf("%q is not one of %s", v, strings.Join(names, ", "))
}

func validAdmin(v string) error {
	if v == "" {
		return nil
	}
	_, err := envoyadmin.ParseAddress(v)
	return err
}

func validRegexps(res []string) error {
	for _, re := range res {
		if _, err := regexp.Compile(re); err != nil {
			return err
		}
	}
	return nil
}

func validPort(p int32) error {
	if p < 1 || p > 65535 {
		return fmt.Errorf("%d is not a port", p)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// validSecretName: a Secret's name is a DNS subdomain.
func validSecretName(v string) error {
	if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
		return fmt.Errorf("not a Secret's name: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Annotations are the annotation keys inject accepts: its own, then one per row of DrainSettings.
func Annotations() []string { return slices.Clone(knownAnnotations) }

package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// injectFlags are the injection settings, shared by `inject` and `webhook` (and `policy`); each maps onto
// inject.Config, and is passed on only when set.
type injectFlags struct {
	image           string
	pullPolicy      string
	mode            string
	binaryFrom      string
	hook            string
	sidecarKind     string
	envoyContainer  string
	envoyCommand    string
	admin           string
	port            int
	metricsPort     int
	replaceHooks    bool
	takeover        bool
	delay           time.Duration
	minDuration     time.Duration
	quiet           time.Duration
	timeout         time.Duration
	minOpen         int64
	count           string
	listenerExclude stringList
}

func (f *injectFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.image, "image", "shutdown-manager:"+Version, "the shutdown-manager image")
	fs.StringVar(&f.pullPolicy, "image-pull-policy", "", "pull policy of the injected containers and image volume: Always, IfNotPresent, Never (default: Kubernetes' default)")
	fs.StringVar(&f.mode, "mode", string(inject.DefaultMode), "hook (Envoy's preStop runs drain; nothing runs until then), sidecar (serve beside Envoy), agent (run wraps Envoy's command)")
	fs.StringVar(&f.binaryFrom, "binary-from", string(inject.DefaultBinaryFrom), "how Envoy's container gets the binary: copy (an init container copies it into an emptyDir) or image-volume (Kubernetes >= 1.35, containerd >= 2)")
	fs.StringVar(&f.hook, "hook", string(inject.DefaultHook), "sidecar mode: exec (drain --via a unix socket; no port) or http (httpGet /shutdown on --port)")
	fs.StringVar(&f.sidecarKind, "sidecar-kind", string(inject.DefaultSidecarKind), "sidecar mode: native (restartPolicy Always init container, Kubernetes >= 1.29) or plain (a regular container)")
	fs.StringVar(&f.envoyContainer, "envoy-container", "", "Envoy's container (default: the one named envoy, else the one whose image is Envoy's)")
	fs.StringVar(&f.envoyCommand, "envoy-command", strings.Join(inject.DefaultEnvoyCommand, " "), "agent mode: Envoy's command when its container sets none (words separated by spaces)")
	fs.StringVar(&f.admin, "admin-address", "", "Envoy's admin API (default: found at drain time from Envoy's command line and bootstrap; the sidecar uses http://127.0.0.1:9901)")
	fs.IntVar(&f.port, "port", inject.DefaultPort, "sidecar mode with --hook http: the API's port")
	fs.IntVar(&f.metricsPort, "metrics-port", inject.DefaultMetricsPort, "sidecar mode with --hook http: the metrics port")
	fs.BoolVar(&f.replaceHooks, "replace-hooks", false, "replace a preStop hook Envoy's container already has (uninject restores it)")
	fs.BoolVar(&f.takeover, "takeover", false, "replace the shutdown manager of Contour, Envoy Gateway or MARIN3R in their Envoy pods with ours (without it such pods are refused; uninject gives them back)")
	fs.DurationVar(&f.delay, "drain-delay", inject.DefaultDrainDelay, "passed to the drain (see drain -h); sizes the grace period")
	fs.DurationVar(&f.minDuration, "min-drain-duration", inject.DefaultMinDrainDuration, "passed to the drain (see drain -h); sizes the grace period")
	fs.DurationVar(&f.quiet, "quiet-period", inject.DefaultQuietPeriod, "passed to the drain (see drain -h); sizes the grace period")
	fs.DurationVar(&f.timeout, "drain-timeout", 0, "the drain timeout; the grace period is raised to fit it (default: derived from terminationGracePeriodSeconds)")
	fs.Int64Var(&f.minOpen, "min-open-connections", 0, "passed to the drain (see drain -h)")
	fs.StringVar(&f.count, "count", "", "passed to the drain (see drain -h): inflight, connections, requests")
	fs.Var(&f.listenerExclude, "listener-exclude", "passed to the drain (see drain -h; repeatable)")
}

// config turns the flags that were set (fs says which) into an inject.Config.
func (f *injectFlags) config(fs *flag.FlagSet) (inject.Config, error) {
	if f.port < 0 || f.port > 65535 || f.metricsPort < 0 || f.metricsPort > 65535 {
		return inject.Config{}, usagef("--port and --metrics-port must be ports")
	}
	cfg := inject.Config{
		Image:           f.image,
		ImagePullPolicy: corev1.PullPolicy(f.pullPolicy),
		Version:         Version,
		Mode:            inject.Mode(f.mode),
		BinaryFrom:      inject.BinaryFrom(f.binaryFrom),
		Hook:            inject.Hook(f.hook),
		SidecarKind:     inject.SidecarKind(f.sidecarKind),
		EnvoyContainer:  f.envoyContainer,
		EnvoyCommand:    strings.Fields(f.envoyCommand),
		AdminAddress:    f.admin,
		Port:            int32(f.port),
		MetricsPort:     int32(f.metricsPort),
		ReplaceHooks:    f.replaceHooks,
		Takeover:        f.takeover,
		Drain: inject.Drain{
			Count:           f.count,
			ListenerExclude: f.listenerExclude,
		},
	}
	if isFlagSet(fs, "drain-delay") {
		cfg.Drain.Delay = &f.delay
	}
	if isFlagSet(fs, "min-drain-duration") {
		cfg.Drain.MinDuration = &f.minDuration
	}
	if isFlagSet(fs, "quiet-period") {
		cfg.Drain.QuietPeriod = &f.quiet
	}
	if isFlagSet(fs, "drain-timeout") {
		cfg.Drain.Timeout = &f.timeout
	}
	if isFlagSet(fs, "min-open-connections") {
		cfg.Drain.MinOpenConnections = &f.minOpen
	}
	if err := cfg.Validate(); err != nil {
		return inject.Config{}, usageError{err}
	}
	return cfg, nil
}

// runInject is `inject -f FILE|-`: YAML documents in, the same documents out with every workload injected.
func runInject(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inject", flag.ContinueOnError)
	var f injectFlags
	file := fs.String("f", "", "the manifests: a file of YAML documents (or a List), or - for stdin (required). The pod template's shutdown-manager.io/ annotations override the flags below")
	var templates templatePaths
	templates.register(fs)
	f.register(fs)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if *file == "" {
		return usagef("give the manifests with -f FILE or -f -")
	}
	cfg, err := f.config(fs)
	if err != nil {
		return err
	}
	in, closeIn, err := openManifests(*file, stdin)
	if err != nil {
		return err
	}
	defer closeIn()
	// A workload without Envoy passes through (a stream may hold others), but a stream with no workload,
	// or in which no workload has Envoy, is an error: a pipe must not apply unchanged workloads silently.
	// (Workloads that all opted out are not: the user said so.)
	workloads, injected, optedOut := 0, 0, 0
	out, err := inject.Transform(in, func(meta *metav1.ObjectMeta, spec *corev1.PodSpec) error {
		workloads++
		err := inject.Inject(meta, spec, cfg)
		switch {
		case err == nil:
			injected++
		case errors.Is(err, inject.ErrOptedOut):
			optedOut++
		}
		return err
	}, inject.Options{Workloads: templates.workloads, Notes: stderr})
	if err != nil {
		return err
	}
	switch {
	case workloads == 0:
		return fmt.Errorf("no workload in the manifests (a Pod, or a kind with a pod template: %s; others with --template-path): nothing injected", knownKinds())
	case injected == 0 && optedOut == 0:
		return fmt.Errorf("no workload with an Envoy container: nothing injected")
	}
	_, err = stdout.Write(out)
	return err
}

// runUninject is `uninject -f FILE|-`: removes exactly what inject added, restoring what it replaced.
func runUninject(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("uninject", flag.ContinueOnError)
	file := fs.String("f", "", "the manifests: a file of YAML documents (or a List), or - for stdin (required)")
	var templates templatePaths
	templates.register(fs)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if *file == "" {
		return usagef("give the manifests with -f FILE or -f -")
	}
	in, closeIn, err := openManifests(*file, stdin)
	if err != nil {
		return err
	}
	defer closeIn()
	out, err := inject.Transform(in, inject.Uninject, inject.Options{Workloads: templates.workloads, Notes: stderr})
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

// openManifests opens the manifests of -f: a file, or stdin for "-". They are read one document at a time
// (inject.ManifestsFrom), within inject's limits on a stream and a document.
func openManifests(file string, stdin io.Reader) (io.Reader, func(), error) {
	if file == "-" {
		return stdin, func() {}, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, fmt.Errorf("reading manifests: %w", err)
	}
	// A file known to be over the limit is refused before a byte of it is decoded.
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > inject.MaxStreamBytes {
		f.Close()
		return nil, nil, fmt.Errorf("reading manifests: %s is %d MiB, over the limit of %d MiB (%w): inject it in parts",
			file, fi.Size()>>20, inject.MaxStreamBytes>>20, inject.ErrTooLarge)
	}
	return f, func() { f.Close() }, nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// templatePaths is the repeatable --template-path flag of inject and uninject: kinds whose pod template
// sits at a given path (inject.ParseTemplatePath).
type templatePaths struct{ workloads []inject.Workload }

func (t *templatePaths) register(fs *flag.FlagSet) {
	fs.Func("template-path", "a kind inject does not know (a custom resource) whose pod template sits at a path: KIND=PATH or APIVERSION/KIND=PATH, e.g. example.com/v1/EdgeFleet=spec.pod (repeatable). Known: "+knownKinds(),
		func(v string) error {
			w, err := inject.ParseTemplatePath(v)
			if err != nil {
				return err
			}
			t.workloads = append(t.workloads, w)
			return nil
		})
}

// knownKinds names the kinds of inject's table, for help and errors.
func knownKinds() string {
	var names []string
	for _, w := range inject.Workloads() {
		names = append(names, w.APIVersion+" "+w.Kind)
	}
	return strings.Join(names, ", ")
}

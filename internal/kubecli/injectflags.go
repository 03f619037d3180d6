package kubecli

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// injectFlags are the injection settings, shared by `inject` and `webhook` (and `policy`); each maps onto
// inject.Config, and is passed on only when set.
type injectFlags struct {
	image          string
	pullPolicy     string
	mode           string
	binaryFrom     string
	hook           string
	sidecarKind    string
	envoyContainer string
	envoyCommand   string
	port           int
	metricsPort    int
	replaceHooks   bool
	takeover       bool
	tokenSecret    string
	apiToken       bool
	deregistration time.Duration
	// drain holds the drain's settings (inject.DrainSettings, one flag each) as the flags set them.
	drain inject.Config
}

func (f *injectFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.image, "image", DefaultImage(), "the shutdown-manager image (a release defaults to "+ReleaseRepository+":VERSION, its own; a development build has no default)")
	fs.StringVar(&f.pullPolicy, "image-pull-policy", "", "pull policy of the injected containers and image volume: Always, IfNotPresent, Never (default: Kubernetes' default)")
	fs.StringVar(&f.mode, "mode", string(inject.DefaultMode), "hook (Envoy's preStop runs drain; nothing runs until then), sidecar (serve beside Envoy), agent (run wraps Envoy's command)")
	fs.StringVar(&f.binaryFrom, "binary-from", string(inject.DefaultBinaryFrom), "how Envoy's container gets the binary: copy (an init container copies it into an emptyDir) or image-volume (Kubernetes >= 1.35, containerd >= 2)")
	fs.StringVar(&f.hook, "hook", string(inject.DefaultHook), "sidecar mode: exec (drain --via a unix socket; no port) or http (httpGet /shutdown on --port)")
	fs.StringVar(&f.sidecarKind, "sidecar-kind", string(inject.DefaultSidecarKind), "sidecar mode: native (restartPolicy Always init container, Kubernetes >= 1.29) or plain (a regular container)")
	fs.StringVar(&f.envoyContainer, "envoy-container", "", "Envoy's container (default: the one named envoy, else the one whose image is Envoy's)")
	fs.StringVar(&f.envoyCommand, "envoy-command", strings.Join(inject.DefaultEnvoyCommand, " "), "agent mode: Envoy's command when its container sets none (words separated by spaces)")
	fs.IntVar(&f.port, "port", inject.DefaultPort, "sidecar mode with --hook http: the API's port")
	fs.IntVar(&f.metricsPort, "metrics-port", inject.DefaultMetricsPort, "sidecar mode with --hook http: the metrics port")
	fs.StringVar(&f.tokenSecret, "token-secret", "", "sidecar mode with --hook http: a Secret of the pod's namespace whose key \""+inject.TokenKey+"\" guards the sidecar's port (serve --token-file); mounted into the sidecar and Envoy's container, whose preStop hook then runs drain --via the port with it")
	fs.BoolVar(&f.replaceHooks, "replace-hooks", false, "replace a preStop hook Envoy's container already has (uninject restores it)")
	fs.BoolVar(&f.apiToken, "api-token", true, "where a pod turns automountServiceAccountToken off (Contour's and Envoy Gateway's Envoy pods), mount a ServiceAccount token of the manager's own, read-only at "+inject.APIAccessDir+" in the containers that run it, so that its Events are recorded; false: none, the Events are only logged; annotation "+inject.AnnotationAPIToken)
	fs.BoolVar(&f.takeover, "takeover", false, "replace the shutdown manager of Contour, Envoy Gateway or MARIN3R in their Envoy pods with ours (without it such pods are refused; uninject gives them back)")
	fs.DurationVar(&f.deregistration, "deregistration-delay", 0, "how long after a pod starts terminating its load balancer may still send it new connections (an AWS NLB: up to its deregistration delay); a drain timeout derived from the grace period then covers it and the quiet period's longest silence, the grace period raised to fit; a --drain-timeout too short for it is kept, with a warning; annotation "+inject.AnnotationDeregistrationDelay)
	for _, d := range inject.DrainSettings {
		fs.Func(d.Name, drainSettingUsage(d), func(v string) error { return d.Set(&f.drain, v) })
	}
}

// ReleaseRepository is where the release workflow (.github/workflows/release.yml) publishes the image, tagged
// with the release (v0.1.0); the chart's values.yaml names the same repository.
const ReleaseRepository = "ghcr.io/envoy-shutdown-manager/shutdown-manager"

// releaseVersion is a version the release workflow publishes: SemVer with a leading v, pre-releases included
// (the rule scripts/release.sh applies to VERSION).
var releaseVersion = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// DefaultImage is the image inject, webhook and policy write when --image is not given: the one the release
// workflow publishes for this build, ReleaseRepository:cli.Version. A development build (cli.Version dev, or anything
// but a release's version) has none: no registry serves an image of an untagged commit, and a default that
// cannot be pulled leaves pods uninjected (the webhook's failurePolicy Ignore) or failing, so it returns "" and
// those commands ask for --image.
func DefaultImage() string {
	if !releaseVersion.MatchString(cli.Version) {
		return ""
	}
	return ReleaseRepository + ":" + cli.Version
}

// config turns the flags that were set (fs says which) into an inject.Config.
func (f *injectFlags) config(fs *flag.FlagSet) (inject.Config, error) {
	if f.image == "" && !cli.IsFlagSet(fs, "image") {
		return inject.Config{}, cli.Usagef("this is a development build (%s): give --image=REGISTRY/NAME:TAG; releases default to %s:vX.Y.Z", cli.Version, ReleaseRepository)
	}
	if f.port < 0 || f.port > 65535 || f.metricsPort < 0 || f.metricsPort > 65535 {
		return inject.Config{}, cli.Usagef("--port and --metrics-port must be ports")
	}
	if f.deregistration < 0 {
		return inject.Config{}, cli.Usagef("--deregistration-delay must not be negative")
	}
	cfg := inject.Config{
		Image:           f.image,
		ImagePullPolicy: corev1.PullPolicy(f.pullPolicy),
		Version:         cli.Version,
		Mode:            inject.Mode(f.mode),
		BinaryFrom:      inject.BinaryFrom(f.binaryFrom),
		Hook:            inject.Hook(f.hook),
		SidecarKind:     inject.SidecarKind(f.sidecarKind),
		EnvoyContainer:  f.envoyContainer,
		EnvoyCommand:    strings.Fields(f.envoyCommand),
		AdminAddress:    f.drain.AdminAddress,
		Port:            int32(f.port),
		MetricsPort:     int32(f.metricsPort),
		ReplaceHooks:    f.replaceHooks,
		Takeover:        f.takeover,
		TokenSecret:     f.tokenSecret,
		NoAPIToken:      !f.apiToken,
		Drain:           f.drain.Drain,

		DeregistrationDelay: f.deregistration,
	}
	if err := cfg.Validate(); err != nil {
		return inject.Config{}, cli.UsageErr(err)
	}
	return cfg, nil
}

// drainSettingUsage is the help of a drain setting's flag: the table's, its values and its annotation. The flag
// has no default of its own: a setting not given is not passed, and the drain's default applies.
func drainSettingUsage(d inject.DrainSetting) string {
	// A back-quoted word names the flag's value in the help (flag.UnquoteUsage).
	u := d.Help
	switch {
	case d.Values != nil:
		u += " (`string`: " + strings.Join(d.Values, ", ") + ")"
	case d.Kind == inject.KindDuration:
		u += " (a `duration`)"
	case d.Kind == inject.KindCount:
		u += " (a whole `number`)"
	case d.Kind == inject.KindList:
		u += " (a regular `expression`)"
	default:
		u += " (`string`)"
	}
	if d.Kind == inject.KindList {
		return u + "; annotation " + d.Annotation() + " (one per line)"
	}
	return u + "; annotation " + d.Annotation()
}

// warnUnpullable warns on stderr when image names no registry and no repository of its own (a single name,
// such as shutdown-manager:dev, make image's name for a development build): a node would pull it from
// docker.io/library/, Docker Hub's official images, where no shutdown-manager is published, so pods run only
// where the image was loaded into the nodes by hand. A warning, not an error: a local cluster with the image imported (make e2e does so) is a
// real use.
func warnUnpullable(stderr io.Writer, command, image string) {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	if strings.Contains(name, "/") {
		return
	}
	fmt.Fprintf(stderr, "shutdown-manager %s: warning: image %s names no registry: nodes would pull docker.io/library/%s, which is not published; "+
		"pods start only on nodes that already hold it (make image; ctr -n k8s.io images import dist/image.tar). Push it and pass --image=REGISTRY/NAME:TAG\n",
		command, image, name)
}

// Package inject puts the shutdown manager into a pod spec, and takes it out again: one pure mutation over
// typed objects (pod metadata and spec in, pod metadata and spec out, no I/O), shared by `shutdown-manager
// inject`, the admission webhook and the MutatingAdmissionPolicy generator. Workload kinds are unwrapped to
// their pod template by internal/manifest (its table of kinds); the mutation never knows which kind it works on.
//
// What Inject adds, by Mode:
//   - hook: Envoy's preStop hook executes `drain` from /opt/shutdown-manager/shutdown-manager, put there by
//     an init container (BinaryCopy) or an image volume of our image (BinaryImageVolume).
//   - sidecar: `serve` as a native sidecar (or a plain container); Envoy's preStop joins its drain through a
//     unix socket in a shared emptyDir (HookExec, the binary as in hook mode) or is an httpGet (HookHTTP).
//   - agent: Envoy's command is wrapped in `run … -- <command>`, the binary as in hook mode.
//
// internal/manifest applies Inject or Uninject to every workload in a stream of YAML documents (the inject and
// uninject commands), passing every other document through byte for byte.
//
// The status annotation records what was injected and what it replaced, so that Inject is idempotent
// (inject∘inject = inject: an injected pod is first uninjected, then injected with the current settings,
// which also replaces an injection with other settings cleanly) and Uninject restores the pod exactly
// (uninject∘inject = identity, field for field). Through internal/manifest, a document's text comes back byte
// for byte when inject did not change it, and in its normal form when it did.
package inject

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/podenv"
)

// Names and paths of what Inject adds. The image keeps the binary at /shutdown-manager (its entrypoint);
// Envoy's container finds it at BinaryPath.
const (
	// ImageBinary is the binary in our image, its entrypoint, which the sidecar runs (internal/image.BinaryPath;
	// a test there keeps them equal).
	ImageBinary = "/shutdown-manager"
	BinaryDir   = "/opt/shutdown-manager"
	BinaryPath  = BinaryDir + "/shutdown-manager"
	SocketDir   = "/run/shutdown-manager"
	SocketURL   = "unix://" + SocketDir + "/api.sock"
	// TokenDir holds the token (Config.TokenSecret's key TokenKey), in the sidecar and in Envoy's container.
	TokenDir  = "/run/shutdown-manager-token"
	TokenKey  = "token"
	TokenFile = TokenDir + "/" + TokenKey

	InstallContainer = "shutdown-manager-install" // init container: copies the binary (BinaryCopy)
	SidecarContainer = "shutdown-manager"         // serve (ModeSidecar)
	BinaryVolume     = "shutdown-manager-bin"     // emptyDir or image volume holding the binary
	SocketVolume     = "shutdown-manager-run"     // emptyDir holding the sidecar's unix socket (HookExec)
	TokenVolume      = "shutdown-manager-token"   // the Secret holding the token (HookHTTP with TokenSecret)

	// APIAccessDir holds, in the containers that run the manager, a ServiceAccount token of the manager's own,
	// the cluster's CA and the pod's namespace (APIAccessVolume): added where the pod turns
	// automountServiceAccountToken off, so that the manager can record its Events (see apiAccessVolume). Not
	// the default path (ServiceAccountDir), so that nothing else in Envoy's container finds a token there.
	APIAccessDir    = "/run/shutdown-manager-api-access"
	APIAccessVolume = "shutdown-manager-api-access"
	// APITokenExpiration is the lifetime of that token (seconds); kubelet renews it at 80 % of it, and the
	// manager reads the file at each request.
	APITokenExpiration = 3600

	// runAsUser is the image's user: injected containers never run as root.
	runAsUser = 65532
)

// ErrNoEnvoy is returned (wrapped, with the pod's containers) by Inject for a pod in which no container
// is named envoy or runs Envoy's image, and none was named; the pod is left unchanged. Callers going
// through many workloads pass such pods by.
var ErrNoEnvoy = errors.New("no Envoy container")

// ErrOptedOut is returned by Inject for a pod annotated shutdown-manager.io/inject: "false"; the pod is
// left unchanged.
var ErrOptedOut = errors.New("opted out by annotation " + AnnotationInject + `: "` + InjectFalse + `"`)

// Status is the value of the status annotation (JSON): what Inject added and what it replaced.
type Status struct {
	Version        string      `json:"version"`
	Image          string      `json:"image"`
	Mode           Mode        `json:"mode"`
	BinaryFrom     BinaryFrom  `json:"binaryFrom,omitempty"`
	Hook           Hook        `json:"hook,omitempty"`
	SidecarKind    SidecarKind `json:"sidecarKind,omitempty"`
	EnvoyContainer string      `json:"envoyContainer"`
	DrainTimeout   string      `json:"drainTimeout"`
	InitContainers []string    `json:"initContainers,omitempty"` // added, by name
	Containers     []string    `json:"containers,omitempty"`     // added, by name
	Volumes        []string    `json:"volumes,omitempty"`        // added, by name (and Envoy's mounts of them)
	// Env: the variables added to Envoy's container, by name (podenv.Name, podenv.Namespace, podenv.UID; one the
	// container already set is kept as it is and not listed).
	Env []string `json:"env,omitempty"`
	// Grace is set when terminationGracePeriodSeconds was raised.
	Grace *GraceChange `json:"terminationGracePeriodSeconds,omitempty"`
	// PreStop is the hook Envoy's container had before (ReplaceHooks).
	PreStop *corev1.LifecycleHandler `json:"replacedPreStop,omitempty"`
	// CommandUnset: agent mode wrapped DefaultEnvoyCommand (or the configured one) because the container set
	// no command; uninject removes the command again.
	CommandUnset bool `json:"commandWasUnset,omitempty"`
	// Takeover: the peer's manager Inject removed (Config.Takeover), which Uninject puts back.
	Takeover *Takeover `json:"takeover,omitempty"`
	// Settings: every setting inject wrote into the pod that the fields above do not name, by its flag name
	// (inject's, the annotation's) with its value in the annotations' syntax: the drain's flags (DrainSettings),
	// and the image pull policy, the sidecar's ports (http hook) and agent mode's Envoy command when they were
	// used. Re-injecting with another value changes the annotation.
	Settings map[string]string `json:"settings,omitempty"`
	// Empties: the fields a manifest wrote as null, {} or [] that the mutation filled, by JSON pointer into the
	// pod template, with the value written; uninject writes each back where the field is missing again. Set by
	// internal/manifest (keepEmpties): an object from the API server has no empty fields.
	Empties map[string]any `json:"empties,omitempty"`
}

// GraceChange records a raised grace period: From (nil: the pod set none) to To.
type GraceChange struct {
	From *int64 `json:"from"`
	To   int64  `json:"to"`
}

// Injected reports whether the pod carries the status annotation.
func Injected(meta *metav1.ObjectMeta) bool {
	_, ok := meta.Annotations[AnnotationStatus]
	return ok
}

// ParseStatus reads the status annotation: what was injected into the pod (ok false: nothing).
func ParseStatus(meta *metav1.ObjectMeta) (st Status, ok bool, err error) {
	text, ok := meta.Annotations[AnnotationStatus]
	if !ok {
		return Status{}, false, nil
	}
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		return Status{}, true, fmt.Errorf("annotation %s: %q: %w", AnnotationStatus, text, err)
	}
	return st, true, nil
}

// Inject puts the manager into the pod described by meta and spec, as cfg and the pod's annotations say.
// On error neither is changed. A pod already injected is first uninjected, so injecting twice gives what
// injecting once gives, and new settings replace old ones.
//
// The Envoy container is the one named by the envoy-container annotation or Config.EnvoyContainer, else the
// container named "envoy", else the only container whose image is Envoy's (repository "envoy" or
// "envoy-…"); none or several is an error naming the candidates. A preStop hook it already has is an error
// unless Config.ReplaceHooks (it is then recorded and restored by Uninject).
//
// The drain timeout and terminationGracePeriodSeconds: see planGrace. In hook and sidecar modes the drain
// timeout is always passed to the drain; in agent mode `run` derives it from --termination-grace-period
// unless one was requested.
func Inject(meta *metav1.ObjectMeta, spec *corev1.PodSpec, cfg Config) error {
	m, s := meta.DeepCopy(), spec.DeepCopy()
	if m.Annotations[AnnotationInject] == InjectFalse {
		return ErrOptedOut
	}
	if Injected(m) {
		if err := Uninject(m, s); err != nil {
			return err
		}
	}
	set, err := resolve(cfg, m.Annotations)
	if err != nil {
		return err
	}
	if err := takeOver(s, &set); err != nil {
		return err
	}
	if err := inject(m, s, set); err != nil {
		return err
	}
	*meta, *spec = *m, *s
	return nil
}

func inject(meta *metav1.ObjectMeta, spec *corev1.PodSpec, set settings) error {
	envoy, err := findEnvoy(spec, set.EnvoyContainer)
	if err != nil {
		return err
	}
	c := envoy.in(spec)
	if err := checkPod(spec, envoy, set); err != nil {
		return err
	}
	var inits []corev1.Container // init containers to add: before Envoy's when it is one (see addInitContainers)
	st := Status{
		Version: set.Version, Image: set.Image, Mode: set.Mode, EnvoyContainer: c.Name, Takeover: set.takeover,
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		if !set.ReplaceHooks {
			return fmt.Errorf("container %q already has a preStop hook (%s); replace it with --replace-hooks (uninject restores it)", c.Name, describeHandler(c.Lifecycle.PreStop))
		}
		st.PreStop = c.Lifecycle.PreStop.DeepCopy()
		c.Lifecycle.PreStop = nil
		if *c.Lifecycle == (corev1.Lifecycle{}) {
			c.Lifecycle = nil
		}
	}

	plan := planGrace(set, spec.TerminationGracePeriodSeconds)
	st.DrainTimeout = plan.timeout.String()
	if plan.change {
		st.Grace = &GraceChange{From: spec.TerminationGracePeriodSeconds, To: plan.grace}
		spec.TerminationGracePeriodSeconds = &plan.grace
	}

	// The http hook with a token is an exec hook too (see the ModeSidecar case below): it needs the binary.
	needBinary := set.Mode != ModeSidecar || set.Hook == HookExec || set.TokenSecret != ""
	if needBinary {
		st.BinaryFrom = set.BinaryFrom
		st.Volumes = append(st.Volumes, BinaryVolume)
		if set.BinaryFrom == BinaryCopy {
			st.InitContainers = append(st.InitContainers, InstallContainer)
		}
	}
	if set.Mode == ModeSidecar {
		st.Hook, st.SidecarKind = set.Hook, set.SidecarKind
		if set.Hook == HookExec {
			st.Volumes = append(st.Volumes, SocketVolume)
		}
		if set.TokenSecret != "" {
			st.Volumes = append(st.Volumes, TokenVolume)
		}
		if set.SidecarKind == SidecarNative {
			st.InitContainers = append(st.InitContainers, SidecarContainer)
		} else {
			st.Containers = append(st.Containers, SidecarContainer)
		}
	}
	// A token of the manager's own where the pod has none (see apiAccessVolume): access is the directory passed
	// to the manager ("" = the pod's own ServiceAccount mount, or none).
	access := ""
	if set.apiToken(spec) {
		access = APIAccessDir
		st.Volumes = append(st.Volumes, APIAccessVolume)
	}
	if err := checkFree(spec, c, st); err != nil {
		return err
	}

	if needBinary {
		spec.Volumes = append(spec.Volumes, binaryVolume(set))
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: BinaryVolume, MountPath: BinaryDir, ReadOnly: true})
		if set.BinaryFrom == BinaryCopy {
			inits = append(inits, installContainer(set))
		}
	}
	drainArgs, recorded := set.drainArgs()
	if set.ImagePullPolicy != "" {
		recorded["image-pull-policy"] = string(set.ImagePullPolicy)
	}
	if set.DeregistrationDelay > 0 {
		recorded[settingDeregistrationDelay] = set.DeregistrationDelay.String()
	}
	if set.Mode == ModeSidecar && set.Hook == HookHTTP {
		recorded["port"], recorded["metrics-port"] = strconv.Itoa(int(set.Port)), strconv.Itoa(int(set.MetricsPort))
		if set.TokenSecret != "" {
			recorded["token-secret"] = set.TokenSecret
		}
	}
	m := &mutation{spec: spec, envoy: c, set: set, plan: plan, st: &st, drainArgs: drainArgs, recorded: recorded, access: access}
	switch set.Mode {
	case ModeHook:
		m.drainHook("", "")
	case ModeSidecar:
		err = m.sidecar()
	case ModeAgent:
		err = m.agent()
	}
	if err != nil {
		return err
	}
	inits = append(inits, m.inits...)
	if access != "" {
		spec.Volumes = append(spec.Volumes, apiAccessVolume())
	}
	addInitContainers(spec, envoy, inits)
	if len(recorded) > 0 {
		st.Settings = recorded
	}

	text, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encoding the status annotation: %w", err)
	}
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[AnnotationStatus] = string(text)
	return nil
}

// mutation is one pod's injection past what every mode shares (inject): the mode's own containers, volumes
// and hooks, written into spec and recorded in st.
type mutation struct {
	spec      *corev1.PodSpec
	envoy     *corev1.Container // Envoy's container, in spec
	set       settings
	plan      gracePlan
	st        *Status
	drainArgs []string          // the drain flags that were set (drainArgs), the drain timeout aside
	recorded  map[string]string // the settings for the status annotation
	access    string            // the API access directory given to the manager ("" = the pod's own, or none)
	inits     []corev1.Container
}

// drainHook sets Envoy's preStop hook to run the drain in Envoy's container, with the drain's flags and the
// drain timeout: by itself (hook mode: via ""), or through the sidecar at via (`drain --via` waits for the
// sidecar's answer for the drain timeout plus a margin, and drains Envoy itself with the same flags if the
// sidecar is gone), with the token in the file token when the sidecar's port needs one.
func (m *mutation) drainHook(via, token string) {
	args := []string{BinaryPath, "drain"}
	if via != "" {
		args = append(args, "--via="+via)
	}
	if token != "" {
		args = append(args, "--token-file="+token)
	}
	args = append(append(args, "--log-output=envoy"), m.drainArgs...)
	args = append(args, "--drain-timeout="+m.plan.timeout.String())
	setPreStop(m.envoy, &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: args}})
	m.st.Env = addPodEnv(m.envoy, m.access)
}

// sidecar adds sidecar mode's container (serve), the admin socket's mount when Envoy's admin is one, and the
// hook that reaches it: `drain --via` its unix socket (hook exec), or its port with a token, or kubelet's
// httpGet of its port.
func (m *mutation) sidecar() error {
	spec, c, set := m.spec, m.envoy, m.set
	if err := checkPorts(spec, set); err != nil {
		return err
	}
	sc := sidecarContainer(set, append(slices.Clone(m.drainArgs), "--drain-timeout="+m.plan.timeout.String()), m.access)
	adminMount, adminSocket, err := adminSocketMount(c, set.AdminAddress, m.st.Volumes)
	if err != nil {
		return err
	}
	if adminSocket {
		sc.VolumeMounts = append(sc.VolumeMounts, adminMount)
	}
	if set.Hook == HookExec || adminSocket {
		shareUser(sc.SecurityContext, spec.SecurityContext, c.SecurityContext)
	}
	switch {
	case set.Hook == HookExec:
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: SocketVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: new(resource.MustParse("1Mi"))},
		}})
		mount := corev1.VolumeMount{Name: SocketVolume, MountPath: SocketDir}
		c.VolumeMounts = append(c.VolumeMounts, mount)
		sc.VolumeMounts = append(sc.VolumeMounts, mount)
		m.drainHook(SocketURL, "")
	case set.TokenSecret != "":
		// A token kubelet's httpGet could send would be written into the pod spec, for anyone who can read
		// the pod: the hook is `drain --via` over the sidecar's port instead, with the token from the
		// Secret, mounted read-only into both containers.
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: TokenVolume, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: set.TokenSecret, Items: []corev1.KeyToPath{{Key: TokenKey, Path: TokenKey}}},
		}})
		mount := corev1.VolumeMount{Name: TokenVolume, MountPath: TokenDir, ReadOnly: true}
		c.VolumeMounts = append(c.VolumeMounts, mount)
		sc.VolumeMounts = append(sc.VolumeMounts, mount)
		sc.Args = append(sc.Args, "--token-file="+TokenFile)
		m.drainHook(fmt.Sprintf("http://127.0.0.1:%d", set.Port), TokenFile)
	default:
		setPreStop(c, &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/shutdown", Port: portOf(set.Port)}})
	}
	if set.SidecarKind == SidecarNative {
		sc.RestartPolicy = new(corev1.ContainerRestartPolicyAlways)
		m.inits = append(m.inits, sc)
	} else {
		spec.Containers = append(spec.Containers, sc)
	}
	return nil
}

// agent wraps Envoy's command in `run`, which starts Envoy as its child and drains it on SIGTERM.
func (m *mutation) agent() error {
	c, set := m.envoy, m.set
	command := c.Command
	if len(command) == 0 {
		if len(c.Args) == 0 {
			return fmt.Errorf("container %q sets neither command nor args: agent mode needs Envoy's command line (set args, or command)", c.Name)
		}
		command, m.st.CommandUnset = set.EnvoyCommand, true
		m.recorded["envoy-command"] = strings.Join(set.EnvoyCommand, " ")
	}
	wrapped := []string{BinaryPath, "run", "--termination-grace-period=" + agentGrace(m.plan.grace)}
	wrapped = append(wrapped, m.drainArgs...)
	if set.Drain.Timeout != nil {
		wrapped = append(wrapped, "--drain-timeout="+m.plan.timeout.String())
	}
	c.Command = append(append(wrapped, "--"), command...)
	m.st.Env = addPodEnv(c, m.access)
	return nil
}

// drainArgs are the drain flags that were set, in DrainSettings' order (the drain timeout aside), and the
// same settings for the status annotation, by name in the annotations' syntax (a list one item per line).
func (s settings) drainArgs() ([]string, map[string]string) {
	var args []string
	recorded := map[string]string{}
	for _, d := range DrainSettings {
		values := d.values(&s.Config)
		if d.Derived || len(values) == 0 {
			continue
		}
		for _, v := range values {
			args = append(args, "--"+d.DrainFlag()+"="+v)
		}
		recorded[d.Name] = strings.Join(values, "\n")
	}
	return args, recorded
}

// envoyRef is where Envoy's container is: spec.Containers[index], or spec.InitContainers[index] when Envoy
// runs as a native sidecar (an init container with restartPolicy Always).
type envoyRef struct {
	init  bool
	index int
}

// in returns Envoy's container in spec (valid until spec's lists change).
func (r envoyRef) in(spec *corev1.PodSpec) *corev1.Container {
	if r.init {
		return &spec.InitContainers[r.index]
	}
	return &spec.Containers[r.index]
}

// findEnvoy finds Envoy's container among the pod's containers and native sidecars: the one named name when
// it is given, else the one container that is named envoy or runs Envoy's image and is no peer's manager.
// Several such containers are an error naming them all: inject drains one Envoy per pod, and must not leave
// another one silently undrained.
func findEnvoy(spec *corev1.PodSpec, name string) (envoyRef, error) {
	var all []string
	var refs []envoyRef
	var cs []*corev1.Container
	for i := range spec.InitContainers {
		if c := &spec.InitContainers[i]; nativeSidecar(c) {
			refs, cs = append(refs, envoyRef{init: true, index: i}), append(cs, c)
		}
	}
	for i := range spec.Containers {
		refs, cs = append(refs, envoyRef{index: i}), append(cs, &spec.Containers[i])
	}
	for _, c := range cs {
		all = append(all, fmt.Sprintf("%s (%s)", c.Name, c.Image))
	}
	if name != "" {
		for i, c := range cs {
			if c.Name == name {
				return refs[i], nil
			}
		}
		return envoyRef{}, fmt.Errorf("no container named %q (containers: %s)", name, strings.Join(all, ", "))
	}
	var found []int
	for i, c := range cs {
		// A peer's shutdown manager is never the Envoy to drain, whatever its image is named (a mirror may call
		// Envoy Gateway's …/envoy-gateway): the takeover replaces it, and without the opt-in it is refused by name.
		if p, _ := managerOf(*c); p == "" && IsEnvoyContainer(c.Name, c.Image) {
			found = append(found, i)
		}
	}
	switch len(found) {
	case 1:
		return refs[found[0]], nil
	case 0:
		return envoyRef{}, fmt.Errorf("%w: none is named envoy and no image is Envoy's (containers: %s); name it with annotation %s", ErrNoEnvoy, strings.Join(all, ", "), AnnotationEnvoyContainer)
	}
	var names []string
	for _, i := range found {
		names = append(names, all[i])
	}
	return envoyRef{}, fmt.Errorf("%d Envoy containers: %s; inject drains one Envoy per pod and will not leave the other undrained: run them in separate pods, or name the one to drain with annotation %s", len(found), strings.Join(names, ", "), AnnotationEnvoyContainer)
}

// nativeSidecar reports whether an init container is a native sidecar: restartPolicy Always, running beside
// the pod's containers rather than before them.
func nativeSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// checkPod refuses pods whose shape the settings cannot serve.
//   - Agent mode with Envoy as a native sidecar: kubelet sends a native sidecar SIGTERM only after the pod's
//     containers have exited, so `run` would start the drain late, in what is left of the grace period.
//     Hook and sidecar modes are fine: a native sidecar's preStop hook runs at once, with the others'.
//   - The http hook on the node's network (hostNetwork) without a token: the sidecar would serve /shutdown on
//     that port of every address of the node, for anyone who reaches the node to drain Envoy. With
//     Config.TokenSecret the API asks for the token, which only the pod's containers hold; the exec hook has no
//     port at all.
func checkPod(spec *corev1.PodSpec, envoy envoyRef, set settings) error {
	c := envoy.in(spec)
	if envoy.init && set.Mode == ModeAgent {
		return fmt.Errorf("container %q is a native sidecar (an init container with restartPolicy Always): it gets SIGTERM only after the pod's other containers have exited, too late for agent mode's drain; use hook or sidecar mode", c.Name)
	}
	if spec.HostNetwork && set.Mode == ModeSidecar && set.Hook == HookHTTP && set.TokenSecret == "" {
		return fmt.Errorf("the pod uses the node's network (hostNetwork): the http hook's sidecar would let anyone who reaches the node on port %d drain Envoy; use the exec hook (a unix socket, no port), or guard the port with a token (--token-secret)", set.Port)
	}
	return nil
}

// addInitContainers adds inject's init containers: before Envoy's when Envoy is a native sidecar, so that
// the binary is there before Envoy starts and the sidecar starts before Envoy and stops after it (kubelet
// stops native sidecars in reverse order); else after the pod's own.
func addInitContainers(spec *corev1.PodSpec, envoy envoyRef, add []corev1.Container) {
	if len(add) == 0 {
		return
	}
	if envoy.init {
		spec.InitContainers = slices.Insert(spec.InitContainers, envoy.index, add...)
		return
	}
	spec.InitContainers = append(spec.InitContainers, add...)
}

// containerNamed returns the container (or init container) named name, or nil.
func containerNamed(spec *corev1.PodSpec, name string) *corev1.Container {
	for _, cs := range []*[]corev1.Container{&spec.Containers, &spec.InitContainers} {
		if i := slices.IndexFunc(*cs, func(c corev1.Container) bool { return c.Name == name }); i >= 0 {
			return &(*cs)[i]
		}
	}
	return nil
}

// IsEnvoyContainer is the rule by which inject recognises Envoy's container when no annotation names it: a
// container named envoy, or one running Envoy's image (isEnvoyImage).
func IsEnvoyContainer(name, image string) bool {
	return name == "envoy" || isEnvoyImage(image)
}

// isEnvoyImage reports whether an image reference's repository is Envoy's: its last path element is
// "envoy" or starts with "envoy-" (envoyproxy/envoy, envoyproxy/envoy-distroless, …/envoy-contrib).
func isEnvoyImage(image string) bool {
	repo, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(repo, "/"); i >= 0 {
		repo = repo[i+1:]
	}
	repo, _, _ = strings.Cut(repo, ":")
	return repo == "envoy" || strings.HasPrefix(repo, "envoy-")
}

// checkFree refuses to overwrite a container or volume of the pod's own that has one of our names, or a
// mount of Envoy's container with one of our volumes' names or paths.
func checkFree(spec *corev1.PodSpec, envoy *corev1.Container, st Status) error {
	for _, name := range slices.Concat(st.InitContainers, st.Containers) {
		if hasContainer(spec.InitContainers, name) || hasContainer(spec.Containers, name) {
			return fmt.Errorf("the pod already has a container named %q that was not injected (no %s annotation)", name, AnnotationStatus)
		}
	}
	for _, name := range st.Volumes {
		if slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == name }) {
			return fmt.Errorf("the pod already has a volume named %q that was not injected (no %s annotation)", name, AnnotationStatus)
		}
	}
	for _, vm := range envoy.VolumeMounts {
		if slices.Contains(st.Volumes, vm.Name) || vm.MountPath == BinaryDir || vm.MountPath == SocketDir || vm.MountPath == TokenDir || vm.MountPath == APIAccessDir {
			return fmt.Errorf("container %q already mounts %q at %s, which inject would add (no %s annotation)", envoy.Name, vm.Name, vm.MountPath, AnnotationStatus)
		}
	}
	return nil
}

// checkPorts refuses a TCP sidecar whose ports another container declares.
func checkPorts(spec *corev1.PodSpec, set settings) error {
	if set.Hook != HookHTTP {
		return nil
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, p := range c.Ports {
			if p.ContainerPort == set.Port || p.ContainerPort == set.MetricsPort {
				return fmt.Errorf("container %q declares port %d, which the sidecar would use: choose others (--port, --metrics-port)", c.Name, p.ContainerPort)
			}
		}
	}
	return nil
}

func hasContainer(cs []corev1.Container, name string) bool {
	return slices.ContainsFunc(cs, func(c corev1.Container) bool { return c.Name == name })
}

func setPreStop(c *corev1.Container, h *corev1.LifecycleHandler) {
	if c.Lifecycle == nil {
		c.Lifecycle = &corev1.Lifecycle{}
	}
	c.Lifecycle.PreStop = h
}

func describeHandler(h *corev1.LifecycleHandler) string {
	switch {
	case h.Exec != nil:
		return "exec " + strings.Join(h.Exec.Command, " ")
	case h.HTTPGet != nil:
		return "httpGet " + h.HTTPGet.Path + " on port " + h.HTTPGet.Port.String()
	case h.TCPSocket != nil:
		return "tcpSocket " + h.TCPSocket.Port.String()
	case h.Sleep != nil:
		return fmt.Sprintf("sleep %ds", h.Sleep.Seconds)
	}
	return "unknown action"
}

func binaryVolume(set settings) corev1.Volume {
	v := corev1.Volume{Name: BinaryVolume}
	if set.BinaryFrom == BinaryImageVolume {
		v.Image = &corev1.ImageVolumeSource{Reference: set.Image, PullPolicy: set.ImagePullPolicy}
	} else {
		// The pod binary is under 10 MB (9.9 MB for linux/amd64, make build; test/release checks it); the limit keeps a misbehaving copy from
		// filling the node's disk.
		v.EmptyDir = &corev1.EmptyDirVolumeSource{SizeLimit: new(resource.MustParse("32Mi"))}
	}
	return v
}

func installContainer(set settings) corev1.Container {
	return corev1.Container{
		Name:            InstallContainer,
		Image:           set.Image,
		ImagePullPolicy: set.ImagePullPolicy,
		Args:            []string{"install", BinaryDir},
		VolumeMounts:    []corev1.VolumeMount{{Name: BinaryVolume, MountPath: BinaryDir}},
		Resources:       resources(),
		SecurityContext: securityContext(),
	}
}

func sidecarContainer(set settings, drainArgs []string, access string) corev1.Container {
	c := corev1.Container{
		Name:            SidecarContainer,
		Image:           set.Image,
		ImagePullPolicy: set.ImagePullPolicy,
		Env:             podEnv(access),
		Resources:       resources(),
		SecurityContext: securityContext(),
	}
	if access != "" {
		c.VolumeMounts = append(c.VolumeMounts, apiAccessMount())
	}
	if set.Hook == HookExec {
		c.Args = append([]string{"serve", "--listen=" + SocketURL}, drainArgs...)
		return c
	}
	c.Args = append([]string{"serve", fmt.Sprintf("--listen=:%d", set.Port), fmt.Sprintf("--metrics-listen=:%d", set.MetricsPort)}, drainArgs...)
	c.Ports = []corev1.ContainerPort{
		{Name: "sm-api", ContainerPort: set.Port, Protocol: corev1.ProtocolTCP},
		{Name: "sm-metrics", ContainerPort: set.MetricsPort, Protocol: corev1.ProtocolTCP},
	}
	// Liveness on the metrics listener, not the API's: the API's connections are capped (--max-connections), and
	// clients holding them open (a few hundred idle keep-alives) would starve the probe past kubelet's 1 s
	// timeout and get the sidecar restarted. The metrics listener has its own connections and serves /healthz.
	c.LivenessProbe = &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: portOf(set.MetricsPort)}},
		PeriodSeconds:    10,
		FailureThreshold: 3,
	}
	return c
}

// adminSocketMount is the mount that lets the sidecar reach Envoy's admin API when admin (the drain's
// --admin-address, "" when found at drain time) is a unix socket: the sidecar has its own filesystem, so it sees
// the socket only through the volume of Envoy's that holds the socket's directory, mounted at the same path (the
// longest mountPath of Envoy's container that contains the directory; subPath kept, so that it is the same
// directory of the volume). ours are the volumes inject adds, which never hold Envoy's admin. ok is false for a
// TCP (or unset) admin address, which the pod's shared network reaches. A socket in Envoy's own filesystem, or in
// a volume mounted with subPathExpr (expanded from each container's own environment), is refused: a sidecar
// that cannot reach the admin would drain nothing and let kubelet stop a live Envoy.
//
// The mount is read-only: connect(2) on a unix socket needs write permission on the socket file, not a writable
// mount (test/integration's TestInjectedShapes runs it).
func adminSocketMount(envoy *corev1.Container, admin string, ours []string) (vm corev1.VolumeMount, ok bool, err error) {
	socket, unix := strings.CutPrefix(admin, "unix://")
	if !unix {
		return corev1.VolumeMount{}, false, nil
	}
	dir := path.Dir(path.Clean(socket))
	best := -1
	for i, m := range envoy.VolumeMounts {
		mp := path.Clean(m.MountPath)
		if slices.Contains(ours, m.Name) || !(dir == mp || mp == "/" || strings.HasPrefix(dir, mp+"/")) {
			continue
		}
		if best < 0 || len(mp) > len(path.Clean(envoy.VolumeMounts[best].MountPath)) {
			best = i
		}
	}
	if best < 0 {
		return corev1.VolumeMount{}, false, fmt.Errorf("the admin address %s is a unix socket in container %q's own filesystem (no volume of it is mounted at %s or above): the sidecar could not reach it; use hook mode (--mode hook), or put the socket in a volume Envoy mounts (an emptyDir), which inject then mounts into the sidecar", admin, envoy.Name, dir)
	}
	m := envoy.VolumeMounts[best]
	if m.SubPathExpr != "" {
		return corev1.VolumeMount{}, false, fmt.Errorf("the admin socket %s is in volume %q, mounted with subPathExpr %q, which each container expands from its own environment: the sidecar might see another directory; use hook mode (--mode hook), or mount the volume without subPathExpr", socket, m.Name, m.SubPathExpr)
	}
	return corev1.VolumeMount{Name: m.Name, MountPath: m.MountPath, SubPath: m.SubPath, ReadOnly: true}, true, nil
}

// podEnv: the variables naming the manager's Pod (internal/podenv), from the downward API, in every container that
// runs the manager: Envoy's container in hook and agent modes and with the sidecar's exec hook (`drain --via` drains
// by itself when the sidecar is gone), and the sidecar. The manager records its Kubernetes Events on that Pod.
// With access (APIAccessDir, the token of the manager's own), podenv.ServiceAccountDir names it too.
func podEnv(access string) []corev1.EnvVar {
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}
	}
	env := []corev1.EnvVar{
		{Name: podenv.Name, ValueFrom: field("metadata.name")},
		{Name: podenv.Namespace, ValueFrom: field("metadata.namespace")},
		{Name: podenv.UID, ValueFrom: field("metadata.uid")},
	}
	if access != "" {
		env = append(env, corev1.EnvVar{Name: podenv.ServiceAccountDir, Value: access})
	}
	return env
}

// addPodEnv appends podEnv to Envoy's container and returns the names it added; with access, it mounts the
// manager's token there too (the volume's name in the status annotation makes Uninject remove the mount). A
// variable the container already sets is kept as it is: the user's value wins (it may name the Pod on purpose),
// and refusing the pod would cost it its drain for the sake of Events. Uninject removes only the names returned
// here.
func addPodEnv(c *corev1.Container, access string) []string {
	if access != "" {
		c.VolumeMounts = append(c.VolumeMounts, apiAccessMount())
	}
	var added []string
	for _, e := range podEnv(access) {
		if slices.ContainsFunc(c.Env, func(have corev1.EnvVar) bool { return have.Name == e.Name }) {
			continue
		}
		c.Env = append(c.Env, e)
		added = append(added, e.Name)
	}
	return added
}

// apiToken reports whether the manager gets a token of its own (APIAccessVolume): the pod turns
// automountServiceAccountToken off (Contour's and Envoy Gateway's Envoy pods do), so no container has its
// ServiceAccount's token, and the manager's Events would be refused for want of one; unless opted out
// (Config.NoAPIToken, annotation AnnotationAPIToken "false"). A pod whose ServiceAccount (not the pod) turns
// automount off cannot be told from the pod spec: it gets none, and its Events are only logged.
func (s settings) apiToken(spec *corev1.PodSpec) bool {
	return !s.NoAPIToken && spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken
}

// apiAccessVolume is the token of the manager's own, as the API server's ServiceAccount admission plugin
// mounts one into every container of a pod that does not turn automount off (its kube-api-access-… volume),
// and as service meshes give their sidecars one: a projected volume of a bound ServiceAccount token (the pod's
// account, the API server's own audience, an hour's lifetime, renewed by kubelet), the cluster's CA
// (the kube-root-ca.crt ConfigMap every namespace has) and the pod's namespace. Only the containers that run
// the manager mount it, read-only, at APIAccessDir, and the manager is told so (podenv.ServiceAccountDir).
// What the token may do is what the pod's ServiceAccount is granted: the chart's events RBAC grants creating
// and patching Events in the namespace.
func apiAccessVolume() corev1.Volume {
	// DefaultMode is the API server's default, written out so that the pod inject writes is the pod it stores
	// (kubelet still gives the token file to the pod's user with mode 0600 when all containers run as one).
	return corev1.Volume{Name: APIAccessVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: new(int32(corev1.ProjectedVolumeSourceDefaultMode)),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: new(int64(APITokenExpiration)), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}},
			}}},
		},
	}}}
}

func apiAccessMount() corev1.VolumeMount {
	return corev1.VolumeMount{Name: APIAccessVolume, MountPath: APIAccessDir, ReadOnly: true}
}

// shareUser runs the sidecar as Envoy's user and group when Envoy's container runs as a known non-root
// user (set on the container, else on the pod): Envoy's hook connects to the sidecar's unix socket, and
// connect(2) needs write permission on the socket file, which its creator owns. Root needs none, and
// without a known user the image's 65532 stays.
func shareUser(sidecar *corev1.SecurityContext, pod *corev1.PodSecurityContext, envoy *corev1.SecurityContext) {
	var uid, gid *int64
	if pod != nil {
		uid, gid = pod.RunAsUser, pod.RunAsGroup
	}
	if envoy != nil && envoy.RunAsUser != nil {
		uid = envoy.RunAsUser
	}
	if envoy != nil && envoy.RunAsGroup != nil {
		gid = envoy.RunAsGroup
	}
	if uid == nil || *uid == 0 {
		return
	}
	sidecar.RunAsUser = new(*uid)
	if gid != nil && *gid != 0 {
		sidecar.RunAsGroup = new(*gid)
	}
}

// resources: small requests (the manager idles at about 10 MiB RSS and no CPU), a memory limit with
// headroom, and no CPU limit, so that a drain is never throttled (Contour #7366).
func resources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("10m"),
			corev1.ResourceMemory: resource.MustParse("16Mi"),
		},
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
}

// securityContext: what the restricted Pod Security Standard asks, and a read-only root filesystem.
func securityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsUser:                new(int64(runAsUser)),
		RunAsGroup:               new(int64(runAsUser)),
		RunAsNonRoot:             new(true),
		ReadOnlyRootFilesystem:   new(true),
		AllowPrivilegeEscalation: new(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// Uninject removes what Inject added, as the status annotation records it, and restores what it replaced:
// Envoy's preStop hook and command, and the grace period (unless changed since). A pod without the status
// annotation is left unchanged. On error neither meta nor spec is changed.
func Uninject(meta *metav1.ObjectMeta, spec *corev1.PodSpec) error {
	st, ok, err := ParseStatus(meta)
	if !ok || err != nil {
		return err
	}
	m, s := meta.DeepCopy(), spec.DeepCopy()
	s.InitContainers = withoutContainers(s.InitContainers, st.InitContainers)
	s.Containers = withoutContainers(s.Containers, st.Containers)
	s.Volumes = slices.DeleteFunc(s.Volumes, func(v corev1.Volume) bool { return slices.Contains(st.Volumes, v.Name) })
	if len(s.Volumes) == 0 {
		s.Volumes = nil
	}
	if c := containerNamed(s, st.EnvoyContainer); c != nil {
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return slices.Contains(st.Volumes, vm.Name) })
		if len(c.VolumeMounts) == 0 {
			c.VolumeMounts = nil
		}
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return slices.Contains(st.Env, e.Name) })
		if len(c.Env) == 0 {
			c.Env = nil
		}
		if c.Lifecycle != nil && (ours(c.Lifecycle.PreStop) || c.Lifecycle.PreStop == nil) {
			c.Lifecycle.PreStop = st.PreStop
			if *c.Lifecycle == (corev1.Lifecycle{}) {
				c.Lifecycle = nil
			}
		} else if c.Lifecycle == nil && st.PreStop != nil {
			c.Lifecycle = &corev1.Lifecycle{PreStop: st.PreStop}
		}
		if st.Mode == ModeAgent && len(c.Command) >= 2 && c.Command[0] == BinaryPath && c.Command[1] == "run" {
			if sep := slices.Index(c.Command, "--"); sep >= 0 {
				c.Command = slices.Clone(c.Command[sep+1:])
				if st.CommandUnset || len(c.Command) == 0 {
					c.Command = nil
				}
			}
		}
	}
	if g := st.Grace; g != nil && s.TerminationGracePeriodSeconds != nil && *s.TerminationGracePeriodSeconds == g.To {
		s.TerminationGracePeriodSeconds = g.From
	}
	if st.Takeover != nil {
		if err := restoreTakeover(s, st.EnvoyContainer, st.Takeover); err != nil {
			return err
		}
	}
	m.Annotations = maps.Clone(m.Annotations)
	delete(m.Annotations, AnnotationStatus)
	if len(m.Annotations) == 0 {
		m.Annotations = nil
	}
	*meta, *spec = *m, *s
	return nil
}

// ours reports whether a preStop hook is one Inject sets.
func ours(h *corev1.LifecycleHandler) bool {
	switch {
	case h == nil:
		return false
	case h.Exec != nil:
		return len(h.Exec.Command) > 0 && h.Exec.Command[0] == BinaryPath
	case h.HTTPGet != nil:
		return h.HTTPGet.Path == "/shutdown"
	}
	return false
}

func withoutContainers(cs []corev1.Container, names []string) []corev1.Container {
	cs = slices.DeleteFunc(cs, func(c corev1.Container) bool { return slices.Contains(names, c.Name) })
	if len(cs) == 0 {
		return nil
	}
	return cs
}

func portOf(p int32) intstr.IntOrString { return intstr.FromInt32(p) }

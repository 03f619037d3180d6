// Package policy writes a MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes >= 1.36) and
// the bindings that make the API server itself put the shutdown manager into pods, as `inject` would, with
// no webhook server: no certificate, no Deployment, no outage mode.
//
// There is one mutation, internal/inject's. Generate does not restate what inject adds: it runs inject.Inject
// on probe pods and turns what inject added (containers, volumes, mounts, hooks, the status annotation) into
// CEL JSONPatch operations, with the values that depend on the pod (the drain timeout and the grace period,
// the sidecar's user, Envoy's container and the variables it sets already) computed in CEL by the same rules. What CEL cannot reproduce exactly, the policy does
// not attempt: its matchConditions refuse such pods, which are then created unchanged (see Refusals).
//
// Facts of the 1.36.3 API server the expressions are written around: ApplyConfiguration cannot set atomic
// lists (command), so the patch type is JSONPatch; a JSONPatch value that is a list of Object initializers
// crashes the request (kubernetes#142181), so lists are added empty, then appended to with "/-"; both
// branches of a CEL ternary must have one type; Object values cannot be built in spec.variables.
package policy

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// Name is the name of the policy, and the start of its bindings' names.
const Name = "shutdown-manager-inject"

// Refusals are the pods the policy leaves unchanged although they opted in, because CEL cannot give the
// pod inject would give (or inject itself refuses them), by matchCondition name. The README lists them.
var Refusals = []struct{ Name, Why string }{
	{"not-injected", "the pod carries the status annotation already: it was injected (reinvocation, or a manifest injected by `inject`); the policy never injects twice"},
	{"not-opted-out", "annotation " + inject.AnnotationInject + `: "` + inject.InjectFalse + `"`},
	{"no-pod-settings", "a " + inject.Prefix + " annotation other than inject: \"" + inject.InjectTrue + "\" (per-pod settings): the policy's settings are fixed when it is written, and parsing durations or regular expressions per pod is beyond CEL; use `inject` or the webhook"},
	{"envoy-found", "no container is Envoy's: none has the name --envoy-container gives or, without it, not exactly one container is named envoy or runs Envoy's image (inject refuses such a pod too: none, or two Envoys)"},
	{"envoy-not-native-sidecar", "a native sidecar (an init container with restartPolicy Always) is Envoy's (named as --envoy-container says; without it, named envoy or running Envoy's image): inject drains it there (or, with another Envoy among the containers, refuses the pod); the policy's patches address spec.containers only"},
	{"no-peer-manager", "the pod runs another project's shutdown manager (a container running Contour's or Envoy Gateway's `… envoy shutdown-manager`, or MARIN3R's envoy-shtdn-mgr): the policy does not take over; inject refuses such a pod too unless --takeover, and a takeover records the removed containers as JSON in the status annotation (for uninject), which CEL cannot write: use `inject --takeover` or the webhook with --takeover"},
	{"envoy-without-prestop", "Envoy's container has a preStop hook: inject refuses it, and with --replace-hooks it records the old hook as JSON in the status annotation, which CEL cannot write"},
	{"names-free", "a container, volume or Envoy mount already uses one of the names or paths inject adds: inject refuses it"},
	{"ports-free", "sidecar mode with --hook http: a container declares the sidecar's port or metrics port: inject refuses it"},
	{"no-host-network", "sidecar mode with --hook http and no --token-secret: the pod uses the node's network (hostNetwork), where the sidecar's unguarded port would be the node's: inject refuses it"},
	{"envoy-command-known", "agent mode: Envoy's container sets neither command nor args: inject refuses it"},
	{"automount-not-off", "the pod sets automountServiceAccountToken: false (as Contour's and Envoy Gateway's Envoy pods do): inject then mounts a token of the manager's own (--api-token), a second shape of every added container, mount, variable and status annotation that the policy does not write; use `inject` or the webhook, or write the policy with --api-token=false, which injects such pods with no token (their Events are then only logged)"},
}

// probeGrace is the grace period of the probe pods (seconds): far beyond any drain timeout asked for, so the
// grace period is never raised, and the strings it leads to are recognisable in what inject wrote.
const probeGrace = 987654321

// maxGraceSeconds is the longest grace period a Go duration holds in whole seconds (inject's limit).
const maxGraceSeconds = math.MaxInt64 / int64(time.Second)

// defaultGrace is Kubernetes' terminationGracePeriodSeconds when a pod sets none (the API server sets it
// before admission, so the policy only meets it for pods that come without).
const defaultGrace = 30

// Markers put into the status annotation's template in place of the values CEL computes.
const (
	timeoutMarker = "@@drain-timeout@@"
	fromMarker    = -7777777
	envMarker     = "@@env@@"
	envoyMarker   = "@@envoy@@"
)

// Generate returns the policy for cfg (the settings of `inject`; pods' annotations cannot override them, see
// Refusals) and its two bindings: one for the pods of opted-in namespaces, one for opted-in pods. The opt-in
// is in the bindings' selectors because matchConditions cannot see the namespace (namespaceObject is only
// given to the mutation), and two bindings because one's selectors would have to match both. A pod matched
// by both is mutated once: the second binding finds the status annotation.
func Generate(cfg inject.Config) (*admissionv1.MutatingAdmissionPolicy, []*admissionv1.MutatingAdmissionPolicyBinding, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if cfg.Takeover {
		return nil, nil, fmt.Errorf("takeover: the policy cannot take over another shutdown manager (it would have to record the removed containers as JSON in the status annotation for uninject, which CEL cannot write); it refuses such pods (matchCondition no-peer-manager): use the webhook or `inject --takeover`")
	}
	if cfg.Mode == inject.ModeSidecar && strings.HasPrefix(cfg.AdminAddress, "unix://") {
		return nil, nil, fmt.Errorf("sidecar mode with the admin address %s: the sidecar reaches a unix socket only through the volume of Envoy's that holds it, which inject finds in each pod's mounts and CEL cannot; use hook or agent mode, a TCP admin address, or the webhook", cfg.AdminAddress)
	}
	g, err := probe(cfg)
	if err != nil {
		return nil, nil, err
	}
	mutation, variables, err := g.mutation()
	if err != nil {
		return nil, nil, err
	}
	policy := &admissionv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: map[string]string{inject.LabelName: inject.OwnName}},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				}}},
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{metav1.NamespaceSystem}},
				}},
				ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: inject.LabelName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{inject.OwnName}},
				}},
			},
			MatchConditions: g.matchConditions(),
			Variables:       variables,
			Mutations:       []admissionv1.Mutation{{PatchType: admissionv1.PatchTypeJSONPatch, JSONPatch: &admissionv1.JSONPatch{Expression: mutation}}},
			// Ignore, as the webhook recommends: a policy that cannot be evaluated must not stop pods from
			// being created (they are then created without the manager).
			FailurePolicy: new(admissionv1.Ignore),
			// Never: after our mutation the pod carries the status annotation, which matchConditions skip,
			// so a reinvocation could not change anything.
			ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
		},
	}
	optIn := &metav1.LabelSelector{MatchLabels: map[string]string{inject.LabelInject: inject.InjectEnabled}}
	bindings := []*admissionv1.MutatingAdmissionPolicyBinding{
		binding(Name+"-namespaces", &admissionv1.MatchResources{NamespaceSelector: optIn}),
		binding(Name+"-pods", &admissionv1.MatchResources{ObjectSelector: optIn}),
	}
	return policy, bindings, nil
}

func binding(name string, match *admissionv1.MatchResources) *admissionv1.MutatingAdmissionPolicyBinding {
	return &admissionv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "MutatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{inject.LabelName: inject.OwnName}},
		Spec:       admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: Name, MatchResources: match},
	}
}

// generator holds what the probes learnt from inject.
type generator struct {
	cfg   inject.Config
	envoy string // Envoy's container name

	status   inject.Status     // of the probe with Envoy's command set
	unset    *inject.Status    // agent mode: of the probe without a command (nil in other modes)
	envoyOut corev1.Container  // Envoy's container after inject (command set)
	unsetCmd []string          // agent mode: Envoy's command after inject when it had none
	added    added             // what inject added to the pod
	raised   int64             // the grace period inject sets when a pod's is too short
	raisedTo string            // the drain timeout then
	margin   int64             // seconds of the grace period not given to the drain (drain timeout derived)
	dynamic  map[string]string // strings in inject's output that CEL computes per pod
}

type added struct {
	volumes        []corev1.Volume
	initContainers []corev1.Container
	containers     []corev1.Container
}

// probe runs inject on probe pods: one with a long grace period (nothing raised; what is added), one with
// none (the grace period inject raises to) and, in agent mode, one whose Envoy sets no command.
func probe(cfg inject.Config) (*generator, error) {
	g := &generator{cfg: cfg, envoy: cfg.EnvoyContainer, dynamic: map[string]string{}}
	if g.envoy == "" {
		g.envoy = "envoy"
	}
	envoy := corev1.Container{Name: g.envoy, Image: "probe.invalid/envoy", Command: []string{"probe-envoy"}, Args: []string{"probe-arg"}}

	meta, spec, st, err := injectProbe(cfg, envoy, probeGrace)
	if err != nil {
		return nil, err
	}
	g.status, g.envoyOut = st, spec.Containers[0]
	g.added = added{volumes: spec.Volumes, initContainers: spec.InitContainers, containers: spec.Containers[1:]}
	if err := g.checkProbe(envoy, meta, spec); err != nil {
		return nil, err
	}

	_, _, low, err := injectProbe(cfg, envoy, 0)
	if err != nil {
		return nil, err
	}
	if low.Grace == nil {
		return nil, fmt.Errorf("probing inject: a pod with no grace period was not given one")
	}
	g.raised, g.raisedTo = low.Grace.To, low.DrainTimeout

	timeout, err := time.ParseDuration(st.DrainTimeout)
	if err != nil {
		return nil, fmt.Errorf("probing inject: drain timeout %q: %w", st.DrainTimeout, err)
	}
	g.dynamic["--drain-timeout="+st.DrainTimeout] = `"--drain-timeout=" + variables.timeout`
	g.dynamic[fmt.Sprintf("--termination-grace-period=%ds", probeGrace)] = `"--termination-grace-period=" + string(variables.newGrace) + "s"`
	if cfg.Drain.Timeout == nil {
		m := probeGrace*time.Second - timeout
		if m%time.Second != 0 || m < 0 {
			return nil, fmt.Errorf("probing inject: a grace period of %ds gives a drain timeout of %s: the margin is not whole seconds", probeGrace, timeout)
		}
		g.margin = int64(m / time.Second)
	}

	if st.Mode == inject.ModeAgent {
		bare := envoy
		bare.Command = nil
		_, spec, st, err := injectProbe(cfg, bare, probeGrace)
		if err != nil {
			return nil, err
		}
		g.unset, g.unsetCmd = &st, spec.Containers[0].Command
	}
	return g, nil
}

func injectProbe(cfg inject.Config, envoy corev1.Container, grace int64) (metav1.ObjectMeta, corev1.PodSpec, inject.Status, error) {
	meta := metav1.ObjectMeta{Name: "probe"}
	spec := corev1.PodSpec{Containers: []corev1.Container{envoy}, TerminationGracePeriodSeconds: &grace}
	if err := inject.Inject(&meta, &spec, cfg); err != nil {
		return meta, spec, inject.Status{}, fmt.Errorf("probing inject: %w", err)
	}
	st, _, err := inject.ParseStatus(&meta)
	if err != nil {
		return meta, spec, inject.Status{}, fmt.Errorf("probing inject: %w", err)
	}
	return meta, spec, st, nil
}

// checkProbe makes sure that inject changed nothing but what the policy reproduces: appended volumes and
// containers, and on Envoy's container appended mounts and environment variables, the preStop hook and
// the command. A change elsewhere (a new feature of inject) is an error here rather than a policy that
// quietly differs from inject.
func (g *generator) checkProbe(before corev1.Container, meta metav1.ObjectMeta, spec corev1.PodSpec) error {
	if len(spec.Containers) == 0 || spec.Containers[0].Name != g.envoy {
		return fmt.Errorf("probing inject: Envoy's container is not first any more")
	}
	c := spec.Containers[0].DeepCopy()
	c.VolumeMounts, c.Env, c.Lifecycle, c.Command = nil, nil, nil, before.Command
	if !equality.Semantic.DeepEqual(*c, before) {
		return fmt.Errorf("probing inject: it changed Envoy's container in a way the policy does not reproduce: %+v", *c)
	}
	if l := spec.Containers[0].Lifecycle; l != nil && (l.PostStart != nil || l.StopSignal != nil) {
		return fmt.Errorf("probing inject: it set more of Envoy's lifecycle than preStop")
	}
	if len(meta.Annotations) != 1 || len(meta.Labels) != 0 {
		return fmt.Errorf("probing inject: it changed the pod's metadata beyond the status annotation: %v %v", meta.Annotations, meta.Labels)
	}
	rest := spec.DeepCopy()
	rest.Volumes, rest.InitContainers, rest.Containers = nil, nil, rest.Containers[:1]
	want := corev1.PodSpec{Containers: rest.Containers, TerminationGracePeriodSeconds: new(int64(probeGrace))}
	if !equality.Semantic.DeepEqual(*rest, want) {
		return fmt.Errorf("probing inject: it changed the pod spec in a way the policy does not reproduce")
	}
	return nil
}

// byName: the pod has a container with Envoy's name (the configured one, else "envoy").
func (g *generator) byName() string {
	return fmt.Sprintf(`object.spec.containers.exists(x, x.name == %s)`, celString(g.envoy))
}

// isEnvoy: container c is Envoy's, as inject finds it: by the configured name only; without one, the
// container named envoy or running Envoy's image (envoyFound makes sure there is exactly one).
func (g *generator) isEnvoy(c string) string {
	if g.cfg.EnvoyContainer != "" {
		return fmt.Sprintf(`(%s.name == %s)`, c, celString(g.envoy))
	}
	return fmt.Sprintf(`(%s.name == %s || %s)`, c, celString(g.envoy), envoyImage(c+".image"))
}

// envoyFound: inject finds Envoy's container in the pod.
func (g *generator) envoyFound() string {
	if g.cfg.EnvoyContainer != "" {
		return g.byName()
	}
	return fmt.Sprintf(`size(object.spec.containers.filter(c, %s)) == 1`, g.isEnvoy("c"))
}

// envoyIndex: the index of Envoy's container.
func (g *generator) envoyIndex() string {
	byName := fmt.Sprintf(`object.spec.containers.map(c, c.name).indexOf(%s)`, celString(g.envoy))
	if g.cfg.EnvoyContainer != "" {
		return byName
	}
	return fmt.Sprintf(`object.spec.containers.map(c, %s).indexOf(true)`, g.isEnvoy("c"))
}

// peerManager: container c runs another project's shutdown manager, as inject recognises it (internal/inject
// takeover.go), or a little more broadly (a refusal may be broad): Contour's or Envoy Gateway's binary (by its base
// name) first on its command line, which holds "shutdown-manager"; or MARIN3R's envoy-shtdn-mgr running
// shutdown-manager.
func peerManager(c string) string {
	first := fmt.Sprintf(`(has(%[1]s.command) && size(%[1]s.command) > 0 ? %[1]s.command[0] : has(%[1]s.args) && size(%[1]s.args) > 0 ? %[1]s.args[0] : "")`, c)
	base := fmt.Sprintf(`%[1]s.substring(%[1]s.lastIndexOf("/") + 1)`, first)
	holds := fmt.Sprintf(`(has(%[1]s.command) && "shutdown-manager" in %[1]s.command || has(%[1]s.args) && "shutdown-manager" in %[1]s.args)`, c)
	return fmt.Sprintf(`(%[1]s && %[2]s in ["contour", "envoy-gateway"] || %[3]s.name == "envoy-shtdn-mgr" && %[1]s)`, holds, base, c)
}

// envoyImage is inject's test of an image reference (a CEL string expression): its repository's last path
// element is "envoy" or starts with "envoy-".
func envoyImage(image string) string {
	repo := image + `.split("@")[0]`
	name := fmt.Sprintf(`%[1]s.substring(%[1]s.lastIndexOf("/") + 1).split(":")[0]`, repo)
	return fmt.Sprintf(`(%[1]s == "envoy" || %[1]s.startsWith("envoy-"))`, name)
}

// matchConditions: every refusal (see Refusals). They cannot use spec.variables.
func (g *generator) matchConditions() []admissionv1.MatchCondition {
	ann := "object.metadata.annotations"
	hasAnn := "has(object.metadata.annotations)"
	notEnvoy := func(c string) string { return "!" + g.isEnvoy(c) }
	var names []string
	names = append(names, g.status.InitContainers...)
	names = append(names, g.status.Containers...)
	conds := []admissionv1.MatchCondition{
		{Name: "not-injected", Expression: fmt.Sprintf(`!%s || !(%s in %s)`, hasAnn, celString(inject.AnnotationStatus), ann)},
		{Name: "not-opted-out", Expression: fmt.Sprintf(`!%[1]s || !(%[2]s in %[3]s) || %[3]s[%[2]s] != %[4]s`, hasAnn, celString(inject.AnnotationInject), ann, celString(inject.InjectFalse))},
		{Name: "no-pod-settings", Expression: fmt.Sprintf(`!%[1]s || %[2]s.all(k, !k.startsWith(%[3]s) || k == %[4]s && %[2]s[k] == %[6]s || k == %[5]s)`,
			hasAnn, ann, celString(inject.Prefix), celString(inject.AnnotationInject), celString(inject.AnnotationStatus), celString(inject.InjectTrue))},
		{Name: "envoy-found", Expression: g.envoyFound()},
		{Name: "no-peer-manager", Expression: fmt.Sprintf(`!(has(object.spec.initContainers) && object.spec.initContainers.exists(c, %[1]s)) && !object.spec.containers.exists(c, %[1]s)`, peerManager("c"))},
		{Name: "envoy-not-native-sidecar", Expression: fmt.Sprintf(
			`!has(object.spec.initContainers) || !object.spec.initContainers.exists(c, has(c.restartPolicy) && c.restartPolicy == "Always" && %s)`, g.isEnvoy("c"))},
		{Name: "envoy-without-prestop", Expression: fmt.Sprintf(
			`object.spec.containers.all(c, %s || !has(c.lifecycle) || !has(c.lifecycle.preStop))`, notEnvoy("c"))},
		{Name: "names-free", Expression: fmt.Sprintf(
			`!(has(object.spec.initContainers) && object.spec.initContainers.exists(c, c.name in %[1]s)) &&
!object.spec.containers.exists(c, c.name in %[1]s) &&
!(has(object.spec.volumes) && object.spec.volumes.exists(v, v.name in %[2]s)) &&
object.spec.containers.all(c, %[3]s || !has(c.volumeMounts) || !c.volumeMounts.exists(m, m.name in %[2]s || m.mountPath in %[4]s))`,
			celList(names), celList(g.status.Volumes), notEnvoy("c"), celList([]string{inject.BinaryDir, inject.SocketDir, inject.TokenDir}))},
	}
	if g.status.Mode == inject.ModeSidecar && g.status.Hook == inject.HookHTTP {
		var ports []string
		for _, c := range g.added.initContainers {
			for _, p := range c.Ports {
				ports = append(ports, strconv.Itoa(int(p.ContainerPort)))
			}
		}
		for _, c := range g.added.containers {
			for _, p := range c.Ports {
				ports = append(ports, strconv.Itoa(int(p.ContainerPort)))
			}
		}
		in := "[" + strings.Join(ports, ", ") + "]"
		conds = append(conds, admissionv1.MatchCondition{Name: "ports-free", Expression: fmt.Sprintf(
			`!(has(object.spec.initContainers) && object.spec.initContainers.exists(c, has(c.ports) && c.ports.exists(p, p.containerPort in %[1]s))) &&
!object.spec.containers.exists(c, has(c.ports) && c.ports.exists(p, p.containerPort in %[1]s))`, in)},
		)
		if g.cfg.TokenSecret == "" {
			conds = append(conds, admissionv1.MatchCondition{Name: "no-host-network", Expression: `!has(object.spec.hostNetwork) || !object.spec.hostNetwork`})
		}
	}
	if !g.cfg.NoAPIToken {
		conds = append(conds, admissionv1.MatchCondition{Name: "automount-not-off",
			Expression: `!has(object.spec.automountServiceAccountToken) || object.spec.automountServiceAccountToken`})
	}
	if g.status.Mode == inject.ModeAgent {
		conds = append(conds, admissionv1.MatchCondition{Name: "envoy-command-known", Expression: fmt.Sprintf(
			`object.spec.containers.all(c, %s || has(c.command) && size(c.command) > 0 || has(c.args) && size(c.args) > 0)`, notEnvoy("c"))})
	}
	return conds
}

// mutation returns the JSONPatch expression and the variables it uses.
func (g *generator) mutation() (string, []admissionv1.Variable, error) {
	r := renderer{dynamic: g.dynamic}
	envoyPath := func(rest string) string {
		return concat(`"/spec/containers/" + string(variables.envoyIndex)`, rest)
	}
	vars := []admissionv1.Variable{
		{Name: "envoyIndex", Expression: g.envoyIndex()},
		{Name: "envoy", Expression: `object.spec.containers[variables.envoyIndex]`},
		// inject's arithmetic saturates at the longest grace period a Go duration holds in whole seconds:
		// a longer one is kept, and the drain gets that much of it.
		{Name: "grace", Expression: fmt.Sprintf(`has(object.spec.terminationGracePeriodSeconds) ? (object.spec.terminationGracePeriodSeconds > %[2]d ? %[2]d : object.spec.terminationGracePeriodSeconds) : %[1]d`, defaultGrace, maxGraceSeconds)},
		// inject keeps a grace period that fits the drain (and the drain then uses all of it, less the
		// margin), and raises one that does not to the same value for every pod.
		{Name: "fits", Expression: fmt.Sprintf(`variables.grace >= %d`, g.raised)},
		{Name: "newGrace", Expression: fmt.Sprintf(`variables.fits ? variables.grace : %d`, g.raised)},
	}
	timeout := celString(g.raisedTo)
	if g.cfg.Drain.Timeout == nil {
		timeout = fmt.Sprintf(`variables.fits ? %s : %s`, goDuration(fmt.Sprintf("(variables.grace - %d)", g.margin)), celString(g.raisedTo))
	}
	vars = append(vars, admissionv1.Variable{Name: "timeout", Expression: timeout})
	if len(g.status.Env) > 0 {
		// The names inject adds, as the status annotation lists them (omitted when none).
		vars = append(vars, admissionv1.Variable{Name: "envAdded", Expression: fmt.Sprintf(`%s.filter(n, %s)`,
			celList(g.status.Env), strings.ReplaceAll(envMissing("NAME"), `"NAME"`, "n"))},
			admissionv1.Variable{Name: "envJSON", Expression: `size(variables.envAdded) == 0 ? "" : ",\"env\":[" + variables.envAdded.map(n, "\"" + n + "\"").join(",") + "]"`})
	}

	status, err := g.statusExpr(g.status)
	if err != nil {
		return "", nil, err
	}
	if g.unset != nil {
		unset, err := g.statusExpr(*g.unset)
		if err != nil {
			return "", nil, err
		}
		status = fmt.Sprintf("%s ? %s : %s", commandSet, status, unset)
	}
	vars = append(vars, admissionv1.Variable{Name: "status", Expression: status})

	var ops []string
	ops = append(ops, when("!variables.fits", patch("add", celString("/spec/terminationGracePeriodSeconds"), "variables.newGrace")))

	appendAll := func(path, has, typ string, items []any) error {
		if len(items) == 0 {
			return nil
		}
		var add []string
		for _, it := range items {
			v, err := r.value(typ, it)
			if err != nil {
				return err
			}
			add = append(add, patch("add", concat(path, "/-"), v))
		}
		ops = append(ops, when("!"+has, patch("add", path, "[]")), list(add...))
		return nil
	}
	steps := []struct {
		path, has, typ string
		items          []any
	}{
		{celString("/spec/volumes"), "has(object.spec.volumes)", "Object.spec.volumes", anys(g.added.volumes)},
		{celString("/spec/initContainers"), "has(object.spec.initContainers)", "Object.spec.initContainers", anys(g.added.initContainers)},
		{celString("/spec/containers"), "true", "Object.spec.containers", anys(g.added.containers)},
		{envoyPath("/volumeMounts"), "has(variables.envoy.volumeMounts)", "Object.spec.containers.volumeMounts", anys(g.envoyOut.VolumeMounts)},
	}
	for _, s := range steps {
		if err := appendAll(s.path, s.has, s.typ, s.items); err != nil {
			return "", nil, err
		}
	}
	// Envoy's environment: inject adds each variable the container does not set already (the user's wins).
	if len(g.envoyOut.Env) > 0 {
		ops = append(ops, when("!has(variables.envoy.env)", patch("add", envoyPath("/env"), "[]")))
		for _, e := range g.envoyOut.Env {
			v, err := r.value("Object.spec.containers.env", e)
			if err != nil {
				return "", nil, err
			}
			ops = append(ops, when(envMissing(e.Name), patch("add", envoyPath("/env/-"), v)))
		}
	}

	if l := g.envoyOut.Lifecycle; l != nil && l.PreStop != nil {
		preStop, err := r.value("Object.spec.containers.lifecycle.preStop", l.PreStop)
		if err != nil {
			return "", nil, err
		}
		ops = append(ops, fmt.Sprintf("(has(variables.envoy.lifecycle) ? %s : %s)",
			list(patch("add", envoyPath("/lifecycle/preStop"), preStop)),
			list(patch("add", envoyPath("/lifecycle"), "Object.spec.containers.lifecycle{preStop: "+preStop+"}"))))
	}

	if g.unset != nil {
		wrapped := g.envoyOut.Command[:len(g.envoyOut.Command)-1] // … "--" "probe-envoy"
		if g.envoyOut.Command[len(g.envoyOut.Command)-1] != "probe-envoy" || !slices.Equal(g.unsetCmd[:len(wrapped)], wrapped) {
			return "", nil, fmt.Errorf("probing inject: agent mode's command does not end with Envoy's")
		}
		prefix, err := r.value("", wrapped)
		if err != nil {
			return "", nil, err
		}
		fallback, err := r.value("", g.unsetCmd[len(wrapped):])
		if err != nil {
			return "", nil, err
		}
		ops = append(ops, list(patch("add", envoyPath("/command"),
			fmt.Sprintf("%s + (%s ? variables.envoy.command : %s)", prefix, commandSet, fallback))))
	}

	if g.status.Mode == inject.ModeSidecar && g.status.Hook == inject.HookExec {
		shared, err := g.shareUser(&vars)
		if err != nil {
			return "", nil, err
		}
		ops = append(ops, shared...)
	}

	key := celString("/metadata/annotations/" + strings.ReplaceAll(inject.AnnotationStatus, "/", "~1"))
	ops = append(ops, fmt.Sprintf("(has(object.metadata.annotations) ? %s : %s)",
		list(patch("add", key, "variables.status")),
		list(patch("add", celString("/metadata/annotations"), fmt.Sprintf("{%s: variables.status}", celString(inject.AnnotationStatus))))))
	return strings.Join(ops, " +\n"), vars, nil
}

// envMissing: Envoy's container does not set the variable name.
func envMissing(name string) string {
	return fmt.Sprintf(`(!has(variables.envoy.env) || !variables.envoy.env.exists(e, e.name == %s))`, celString(name))
}

// commandSet: Envoy's container sets a command (agent mode wraps it; else it wraps the configured one).
const commandSet = `(has(variables.envoy.command) && size(variables.envoy.command) > 0)`

// shareUser reproduces inject's choice of the exec sidecar's user: Envoy's runAsUser (else the pod's) when
// it is set and not root, and then its runAsGroup likewise.
func (g *generator) shareUser(vars *[]admissionv1.Variable) ([]string, error) {
	path := ""
	for i, c := range g.added.initContainers {
		if c.Name == inject.SidecarContainer {
			path = fmt.Sprintf(`"/spec/initContainers/" + string((has(object.spec.initContainers) ? size(object.spec.initContainers) : 0) + %d)`, i)
		}
	}
	for i, c := range g.added.containers {
		if c.Name == inject.SidecarContainer {
			path = fmt.Sprintf(`"/spec/containers/" + string(size(object.spec.containers) + %d)`, i)
		}
	}
	if path == "" {
		return nil, fmt.Errorf("probing inject: no sidecar container %q in sidecar mode", inject.SidecarContainer)
	}
	field := func(f string) string {
		return fmt.Sprintf(`has(variables.envoy.securityContext) && has(variables.envoy.securityContext.%[1]s) ? variables.envoy.securityContext.%[1]s : 
has(object.spec.securityContext) && has(object.spec.securityContext.%[1]s) ? object.spec.securityContext.%[1]s : 0`, f)
	}
	*vars = append(*vars,
		admissionv1.Variable{Name: "uid", Expression: field("runAsUser")},
		admissionv1.Variable{Name: "gid", Expression: field("runAsGroup")})
	return []string{
		when("variables.uid != 0", patch("replace", concat(path, "/securityContext/runAsUser"), "variables.uid")),
		when("variables.uid != 0 && variables.gid != 0", patch("replace", concat(path, "/securityContext/runAsGroup"), "variables.gid")),
	}, nil
}

// statusExpr is the status annotation inject writes, as a CEL string expression: st with the drain timeout
// and the grace change computed per pod.
func (g *generator) statusExpr(st inject.Status) (string, error) {
	st.DrainTimeout = timeoutMarker
	st.EnvoyContainer = envoyMarker
	if len(st.Env) > 0 {
		st.Env = []string{envMarker}
	}
	st.Grace = nil
	kept, err := template(st)
	if err != nil {
		return "", err
	}
	st.Grace = &inject.GraceChange{From: new(int64(fromMarker)), To: g.raised}
	raised, err := template(st)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("(variables.fits ? %s : %s)", kept, raised), nil
}

// template is the JSON of st as a CEL string concatenation, the markers replaced by the values CEL computes.
func template(st inject.Status) (string, error) {
	data, err := jsonMarshal(st)
	if err != nil {
		return "", fmt.Errorf("encoding the status annotation: %w", err)
	}
	subs := []struct{ marker, expr string }{
		{timeoutMarker, "variables.timeout"},
		{strconv.Itoa(fromMarker), `(has(object.spec.terminationGracePeriodSeconds) ? string(object.spec.terminationGracePeriodSeconds) : "null")`},
		{`,"env":["` + envMarker + `"]`, "variables.envJSON"},
		{envoyMarker, "variables.envoy.name"}, // a DNS label: nothing to escape in JSON
	}
	parts := []string{data}
	for _, sub := range subs {
		var next []string
		for _, p := range parts {
			if !strings.HasPrefix(p, "\x00") {
				for i, piece := range strings.Split(p, sub.marker) {
					if i > 0 {
						next = append(next, "\x00"+sub.expr)
					}
					next = append(next, piece)
				}
				continue
			}
			next = append(next, p)
		}
		parts = next
	}
	var cel []string
	for _, p := range parts {
		switch {
		case strings.HasPrefix(p, "\x00"):
			cel = append(cel, p[1:])
		case p != "":
			cel = append(cel, celString(p))
		}
	}
	if strings.Contains(data, envMarker) && !slices.Contains(cel, "variables.envJSON") {
		return "", fmt.Errorf("encoding the status annotation: the environment variables are not where the policy expects them: %s", data)
	}
	return "(" + strings.Join(cel, " + ") + ")", nil
}

// goDuration formats a CEL int expression of whole seconds (>= 0) as Go's time.Duration.String does:
// 25s, 1m30s, 2h0m5s.
func goDuration(s string) string {
	return fmt.Sprintf(`(%[1]s < 60 ? string(%[1]s) + "s" : %[1]s < 3600 ? string(%[1]s / 60) + "m" + string(%[1]s %% 60) + "s" : string(%[1]s / 3600) + "h" + string(%[1]s %% 3600 / 60) + "m" + string(%[1]s %% 60) + "s")`, s)
}

// concat is the CEL string expression expr followed by the text suffix; a literal stays one literal.
func concat(expr, suffix string) string {
	if s, err := strconv.Unquote(expr); err == nil && celString(s) == expr {
		return celString(s + suffix)
	}
	if i := strings.LastIndex(expr, " + "); i >= 0 {
		if s, err := strconv.Unquote(expr[i+3:]); err == nil && celString(s) == expr[i+3:] {
			return expr[:i+3] + celString(s+suffix)
		}
	}
	return expr + " + " + celString(suffix)
}

func celList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = celString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func anys[T any](s []T) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

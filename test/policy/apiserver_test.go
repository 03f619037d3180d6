// Package policy_test proves the MutatingAdmissionPolicy that internal/policy writes on a real API server: it stores
// the same pods as inject writes, for every golden input (the tier of test/ that needs a real kube-apiserver).
package policy_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manifest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/podenv"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/policy"
)

// goldenDir holds inject's golden inputs: the pods the policy is proven on.
const goldenDir = "../../internal/manifest/testdata"

// goldenConfig is inject's golden Config (internal/manifest/golden_test.go), and goldenSettings the changes
// of the cases that have some, copied from there: each input is proven under the settings its golden
// output was made with.
func goldenConfig() inject.Config {
	return inject.Config{Image: "ghcr.io/envoy-shutdown-manager/shutdown-manager:v1.0.0", Version: "v1.0.0"}
}

func dur(s string) *time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return &d
}

var goldenSettings = map[string]func(*inject.Config){
	"hook-image-volume":    func(c *inject.Config) { c.BinaryFrom = inject.BinaryImageVolume },
	"sidecar":              func(c *inject.Config) { c.Mode = inject.ModeSidecar },
	"sidecar-image-volume": func(c *inject.Config) { c.Mode, c.BinaryFrom = inject.ModeSidecar, inject.BinaryImageVolume },
	"sidecar-envoy-user":   func(c *inject.Config) { c.Mode = inject.ModeSidecar },
	"sidecar-http":         func(c *inject.Config) { c.Mode, c.Hook = inject.ModeSidecar, inject.HookHTTP },
	"sidecar-plain":        func(c *inject.Config) { c.Mode, c.SidecarKind = inject.ModeSidecar, inject.SidecarPlain },
	"sidecar-plain-http": func(c *inject.Config) {
		c.Mode, c.SidecarKind, c.Hook = inject.ModeSidecar, inject.SidecarPlain, inject.HookHTTP
	},
	"agent":              func(c *inject.Config) { c.Mode = inject.ModeAgent },
	"agent-image-volume": func(c *inject.Config) { c.Mode, c.BinaryFrom = inject.ModeAgent, inject.BinaryImageVolume },
	"agent-command":      func(c *inject.Config) { c.Mode = inject.ModeAgent },
	"agent-no-command":   func(c *inject.Config) { c.Mode = inject.ModeAgent },
	"image-pull-policy": func(c *inject.Config) {
		c.ImagePullPolicy, c.BinaryFrom = corev1.PullNever, inject.BinaryImageVolume
	},
	"flags-drain": func(c *inject.Config) {
		c.AdminAddress = "unix:///var/run/envoy/admin.sock"
		c.Drain = inject.Drain{Delay: dur("2s"), MinDuration: dur("0s"), Timeout: dur("40s"), MinOpenConnections: new(int64), Count: "requests", ListenerExclude: []string{"^listener\\.admin2"}}
	},
	"grace-raised-for-timeout":         func(c *inject.Config) { c.Drain.Timeout = dur("60s") },
	"grace-fits-timeout":               func(c *inject.Config) { c.Drain.Timeout = dur("20s") },
	"agent-grace-short":                func(c *inject.Config) { c.Mode = inject.ModeAgent },
	"agent-grace-raised-for-timeout":   func(c *inject.Config) { c.Mode, c.Drain.Timeout = inject.ModeAgent, dur("60s") },
	"grace-raised-for-deregistration":  func(c *inject.Config) { c.DeregistrationDelay = 120 * time.Second },
	"grace-long-deregistration":        func(c *inject.Config) { c.DeregistrationDelay = 120 * time.Second },
	"existing-prestop-replaced":        func(c *inject.Config) { c.ReplaceHooks = true },
	"agent-existing-prestop-replaced":  func(c *inject.Config) { c.Mode, c.ReplaceHooks = inject.ModeAgent, true },
	"name-conflict":                    func(c *inject.Config) { c.Mode = inject.ModeSidecar },
	"sidecar-http-port-conflict":       func(c *inject.Config) { c.Mode, c.Hook = inject.ModeSidecar, inject.HookHTTP },
	"sidecar-existing-init-containers": func(c *inject.Config) { c.Mode = inject.ModeSidecar },
	"reinject-other-mode":              func(c *inject.Config) { c.Mode, c.Hook = inject.ModeSidecar, inject.HookHTTP },
	"env-user-set-agent":               func(c *inject.Config) { c.Mode = inject.ModeAgent },
	"native-sidecar-envoy-sidecar":     func(c *inject.Config) { c.Mode = inject.ModeSidecar },
	"native-sidecar-envoy-agent":       func(c *inject.Config) { c.Mode = inject.ModeAgent },
	"sidecar-http-host-network":        func(c *inject.Config) { c.Mode, c.Hook = inject.ModeSidecar, inject.HookHTTP },
	"sidecar-host-network":             func(c *inject.Config) { c.Mode = inject.ModeSidecar },
	"agent-grace-max":                  func(c *inject.Config) { c.Mode = inject.ModeAgent },
	"flags-every-setting":              everySetting,
	"flags-every-setting-sidecar": func(c *inject.Config) {
		// The policy refuses sidecar mode with a unix-socket admin address (CEL cannot find the volume that holds
		// it: internal/policy's tests); every other setting is proven here with a TCP one.
		everySetting(c)
		c.Mode, c.AdminAddress = inject.ModeSidecar, "http://127.0.0.1:9901"
	},
	"flags-every-setting-agent": func(c *inject.Config) { everySetting(c); c.Mode = inject.ModeAgent },
	"sidecar-http-token": func(c *inject.Config) {
		c.Mode, c.Hook, c.TokenSecret = inject.ModeSidecar, inject.HookHTTP, "envoy-drain-token"
	},
	"sidecar-http-host-network-token": func(c *inject.Config) {
		c.Mode, c.Hook, c.TokenSecret = inject.ModeSidecar, inject.HookHTTP, "envoy-drain-token"
	},
	"bad-annotation-token-secret": func(c *inject.Config) { c.Mode = inject.ModeSidecar },
	// internal/manifest's golden case runs sidecar mode with the manager's own token; here, with --api-token=false,
	// which the policy carries out like inject (with the token, it refuses the pod: automount-off, below).
	"automount-off-sidecar": func(c *inject.Config) { c.Mode, c.NoAPIToken = inject.ModeSidecar, true },
}

// everySetting sets every row of inject.DrainSettings to its example (as internal/manifest's golden case does).
func everySetting(c *inject.Config) {
	for _, d := range inject.DrainSettings {
		if err := d.Set(c, d.Example); err != nil {
			panic(fmt.Sprintf("setting %s: example %q: %v", d.Name, d.Example, err))
		}
	}
}

// refused are the golden inputs (by file name) whose pods inject injects but the policy refuses, and why
// (a matchCondition of Refusals). Every other pod inject injects, the policy must inject identically.
var refused = map[string]string{
	"annotations-drain":               "no-pod-settings",
	"annotations-agent":               "no-pod-settings",
	"annotations-sidecar":             "no-pod-settings",
	"annotation-envoy-container":      "no-pod-settings",
	"existing-prestop-replaced":       "envoy-without-prestop",
	"agent-existing-prestop-replaced": "envoy-without-prestop",
	"reinject-other-mode":             "not-injected",
	"native-sidecar-envoy":            "envoy-not-native-sidecar",
	"native-sidecar-envoy-sidecar":    "envoy-not-native-sidecar",
	"automount-off":                   "automount-not-off",
	"automount-off-opted-out":         "no-pod-settings",
	"annotation-deregistration-delay": "no-pod-settings",
}

// TestSameStoredPods is the proof that the policy is inject: for every golden input of inject that holds
// pods, the pods the API server stores through the policy equal the pods it stores when inject.Inject
// mutated them first, as the webhook would (the pod as the API server admits it, defaulted, then
// injected). Pods the policy refuses, and pods inject refuses, are stored unchanged; a pod stored through
// the policy and created again is stored unchanged (the policy never injects twice).
func TestSameStoredPods(t *testing.T) {
	api := kubetest.Start(t)
	if !policyServed(t, api) {
		return
	}
	inputs, err := filepath.Glob(filepath.Join(goldenDir, "*.in.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs in %s: %v", goldenDir, err)
	}
	proven := 0
	for i, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			pods := podsOf(t, in)
			if len(pods) == 0 {
				t.Skipf("%s holds no pod inject can read", in)
			}
			cfg := goldenConfig()
			if f := goldenSettings[name]; f != nil {
				f(&cfg)
			}
			proven += prove(t, api, fmt.Sprint(i), cfg, pods, refused[name])
		})
	}
	t.Logf("%d pods proven equal", proven)
	if proven == 0 {
		t.Error("no pod proven equal: this test checked nothing")
	}
}

// prove creates pods through the policy for cfg (namespace policy-<id>) and, injected by inject.Inject,
// without it (namespace plain-<id>), and compares what the API server stored; with refusedWhy (the
// matchCondition expected to refuse them) the policy must store them unchanged, as it must the pods inject
// refuses. It returns how many pods were proven equal.
func prove(t *testing.T, api *kubetest.APIServer, id string, cfg inject.Config, pods []corev1.Pod, refusedWhy string) int {
	t.Helper()
	withPolicy, plain := "policy-"+id, "plain-"+id
	createNamespace(t, api, withPolicy, true)
	createNamespace(t, api, plain, false)
	applyPolicy(t, api, cfg, withPolicy)

	stored := create(t, api, withPolicy, pods, false)
	admitted := create(t, api, plain, pods, true)
	var want []corev1.Pod
	injected := make([]bool, len(admitted))
	for j, p := range admitted {
		p = clean(p)
		err := inject.Inject(&p.ObjectMeta, &p.Spec, cfg)
		injected[j] = err == nil
		if err != nil {
			t.Logf("pod %s: inject refuses it: %v", p.Name, err)
		}
		want = append(want, p)
	}
	want = create(t, api, plain, want, false)

	proven := 0
	for j := range stored {
		got := normalize(stored[j])
		if injected[j] && refusedWhy == "" {
			proven++
			assertSamePod(t, got, normalize(want[j]))
		} else {
			if injected[j] {
				t.Logf("pod %s: the policy refuses it (%s)", got.Name, refusedWhy)
			}
			assertSamePod(t, got, normalize(admitted[j])) // stored unchanged
		}
	}

	// Created again through the policy, an injected pod is stored unchanged.
	again := make([]corev1.Pod, len(stored))
	for j, p := range stored {
		again[j] = clean(p)
		again[j].Name += "-again"
	}
	for j, p := range create(t, api, withPolicy, again, false) {
		want := normalize(stored[j])
		want.Name += "-again"
		assertSamePod(t, normalize(p), want)
	}
	return proven
}

// TestGracePeriods: the drain timeout and grace period the policy computes in CEL (whole seconds, written
// as Go writes durations: 45s, 1m5s, 1h0m0s) are inject's, around every boundary, in hook and agent modes,
// with the drain timeout derived and asked for.
func TestGracePeriods(t *testing.T) {
	api := kubetest.Start(t)
	if !policyServed(t, api) {
		return
	}
	// The last four: the longest grace period a Go duration holds in whole seconds, one more, and the
	// longest the API server accepts (int64's largest) and one less: kept, the drain gets 9223372036 s less the margin.
	graces := []int64{0, 1, 19, 20, 21, 30, 64, 65, 66, 3604, 3605, 7265, 86400, 9223372036, 9223372037, math.MaxInt64 - 1, math.MaxInt64}
	for i, tc := range []struct {
		name string
		cfg  func(*inject.Config)
	}{
		{"hook", nil},
		{"agent", func(c *inject.Config) { c.Mode = inject.ModeAgent }},
		{"hook-timeout", func(c *inject.Config) { c.Drain.Timeout = dur("1m30s") }},
		{"agent-timeout", func(c *inject.Config) { c.Mode, c.Drain.Timeout = inject.ModeAgent, dur("1m30s") }},
		{"sidecar-fractional", func(c *inject.Config) {
			c.Mode, c.Drain.Delay, c.Drain.MinDuration = inject.ModeSidecar, dur("1.5s"), dur("2.25s")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := goldenConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			var pods []corev1.Pod
			for _, g := range graces {
				pods = append(pods, corev1.Pod{
					TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("grace-%d", g)},
					Spec: corev1.PodSpec{
						TerminationGracePeriodSeconds: new(g),
						Containers:                    []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.40.0", Args: []string{"-c", "/etc/envoy/envoy.yaml"}}},
					},
				})
			}
			if got := prove(t, api, fmt.Sprintf("grace-%d", i), cfg, pods, ""); got != len(pods) {
				t.Errorf("%d pods proven equal, want %d", got, len(pods))
			}
		})
	}
}

// podsOf reads the pods (pod templates made pods) of a golden input; none for an input inject cannot read.
func podsOf(t *testing.T, file string) []corev1.Pod {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	_, err = manifest.Manifests(data, func(meta *metav1.ObjectMeta, spec *corev1.PodSpec) error {
		p := corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: *meta.DeepCopy(), Spec: *spec.DeepCopy()}
		p.Name = fmt.Sprintf("%s-%d", strings.TrimSuffix(filepath.Base(file), ".in.yaml"), len(pods))
		p.Namespace = ""
		pods = append(pods, p)
		return nil
	}, &bytes.Buffer{})
	if err != nil {
		return nil
	}
	return pods
}

// createNamespace creates a namespace, opted in or not, with its default service account (no controller
// runs to create it).
func createNamespace(t *testing.T, api *kubetest.APIServer, name string, optIn bool) {
	t.Helper()
	ns := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}
	if optIn {
		ns["metadata"].(map[string]any)["labels"] = map[string]string{inject.LabelInject: inject.InjectEnabled}
	}
	sa := map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "default", "namespace": name}}
	apply(t, api, []any{ns, sa})
}

// applyPolicy applies the policy for cfg, its binding limited to namespace ns (so that the policies of
// the cases do not meet), and waits until the API server uses it.
func applyPolicy(t *testing.T, api *kubetest.APIServer, cfg inject.Config, ns string) {
	t.Helper()
	applyPolicyEdited(t, api, cfg, ns, nil)
}

// applyPolicyEdited is applyPolicy with the generated policy changed by edit first (nil: as generated).
func applyPolicyEdited(t *testing.T, api *kubetest.APIServer, cfg inject.Config, ns string, edit func(*admissionv1.MutatingAdmissionPolicy)) {
	t.Helper()
	mp, bindings, err := policy.Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(mp)
	}
	mp.Name = policy.Name + "-" + ns
	// Fail, not Ignore: an expression that does not evaluate must fail the test, not pass a pod unchanged.
	mp.Spec.FailurePolicy = new(admissionv1.Fail)
	objects := []any{mp}
	for _, b := range bindings {
		b.Name += "-" + ns
		b.Spec.PolicyName = mp.Name
		sel := b.Spec.MatchResources.NamespaceSelector
		if sel == nil {
			sel = &metav1.LabelSelector{}
			b.Spec.MatchResources.NamespaceSelector = sel
		}
		if sel.MatchLabels == nil {
			sel.MatchLabels = map[string]string{}
		}
		sel.MatchLabels[corev1.LabelMetadataName] = ns
		objects = append(objects, b)
	}
	apply(t, api, objects)
	awaitPolicy(t, api, ns, cmp.Or(cfg.EnvoyContainer, "envoy"))
}

// awaitPolicy waits until a pod created (dry run) in ns, its Envoy container named envoy, comes back with the
// status annotation: the API server loads policies asynchronously. Every try is a request that answers; the wait ends on the answer,
// not on a timer.
func awaitPolicy(t *testing.T, api *kubetest.APIServer, ns, envoy string) {
	t.Helper()
	probe := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "await-policy"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: envoy, Image: "envoyproxy/envoy:v1.40.0", Args: []string{"-c", "/etc/envoy/envoy.yaml"}}}},
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		got := create(t, api, ns, []corev1.Pod{probe}, true)
		if inject.Injected(&got[0].ObjectMeta) {
			return
		}
		select { // a request from this process takes milliseconds: a pause, not a busy loop on the API server
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("the policy of namespace %s did not act within a minute (kube-apiserver's log: %s)", ns, api.LogDir)
}

// create creates pods in ns, one after the other (dryRun: as --dry-run=server), as `kubectl create` does but from
// the test's own process (kubetest.Client: this package sends over a thousand of them), and returns what the API
// server stored (or would store), in order.
func create(t *testing.T, api *kubetest.APIServer, ns string, pods []corev1.Pod, dryRun bool) []corev1.Pod {
	t.Helper()
	out := make([]corev1.Pod, len(pods))
	for i, p := range pods {
		b, err := api.Client().Create(t.Context(), ns, p, dryRun)
		if err != nil {
			t.Fatalf("creating pod %s in %s: %v (kube-apiserver's log: %s)", p.Name, ns, err, api.LogDir)
		}
		if err := json.Unmarshal(b, &out[i]); err != nil {
			t.Fatalf("decoding pod %s: %v\n%s", p.Name, err, b)
		}
	}
	return out
}

// apply applies objects, as `kubectl apply --server-side --force-conflicts` does, from the test's own process.
func apply(t *testing.T, api *kubetest.APIServer, objects []any) {
	t.Helper()
	for _, o := range objects {
		if _, err := api.Client().Apply(context.Background(), "", o); err != nil {
			t.Fatalf("applying: %v (kube-apiserver's log: %s)", err, api.LogDir)
		}
	}
}

// clean removes what the API server sets, so that a pod read back can be created again.
func clean(p corev1.Pod) corev1.Pod {
	p = *p.DeepCopy()
	p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	p.UID, p.ResourceVersion, p.CreationTimestamp, p.ManagedFields, p.Namespace, p.Generation = "", "", metav1.Time{}, nil, "", 0
	p.Status = corev1.PodStatus{}
	return p
}

// saToken is the name of the service account token volume the ServiceAccount admission plugin adds, with
// its random suffix.
var saToken = regexp.MustCompile(`^kube-api-access-[a-z0-9]{5}$`)

// normalize is clean, with the service account token volume (which the ServiceAccount admission plugin adds
// with a random name) and its mounts under one name. The plugin mounts it into the containers that exist when
// it runs: before mutating policies and webhooks, and after a pod injected beforehand; the policy gives the
// sidecar it adds the same mount (inject.MountServiceAccount), so the two pods are equal with their mounts.
func normalize(p corev1.Pod) corev1.Pod {
	p = clean(p)
	p.Status = corev1.PodStatus{}
	var token []string
	for i := range p.Spec.Volumes {
		if saToken.MatchString(p.Spec.Volumes[i].Name) {
			token = append(token, p.Spec.Volumes[i].Name)
			p.Spec.Volumes[i].Name = "kube-api-access"
		}
	}
	rename := func(cs []corev1.Container) {
		for i := range cs {
			for j := range cs[i].VolumeMounts {
				if slices.Contains(token, cs[i].VolumeMounts[j].Name) {
					cs[i].VolumeMounts[j].Name = "kube-api-access"
				}
			}
		}
	}
	rename(p.Spec.InitContainers)
	rename(p.Spec.Containers)
	return p
}

func assertSamePod(t *testing.T, got, want corev1.Pod) {
	t.Helper()
	if got.Name != want.Name || !equality.Semantic.DeepEqual(got.Labels, want.Labels) ||
		!equality.Semantic.DeepEqual(got.Annotations, want.Annotations) || !equality.Semantic.DeepEqual(got.Spec, want.Spec) {
		gy, _ := yaml.Marshal(got)
		wy, _ := yaml.Marshal(want)
		t.Errorf("pod %s differs:\ngot:\n%s\nwant:\n%s", want.Name, gy, wy)
	}
}

// TestSelection applies the shipped deploy/policy/policy.yaml as a user would (after a server dry run) and
// checks which pods it mutates: those of opted-in namespaces and opted-in pods, once even when both; never
// an opted-out pod, one in kube-system, or one of ours.
func TestSelection(t *testing.T) {
	api := kubetest.Start(t)
	if !policyServed(t, api) {
		return
	}
	const shipped = "../../deploy/policy/policy.yaml"
	if out := api.ApplyDryRun(t, shipped); !strings.Contains(out, "created (server dry run)") {
		t.Fatalf("kubectl apply --dry-run=server said %q", out)
	}
	api.Kubectl(t, "apply", "-f", shipped)
	createNamespace(t, api, "opted", true)
	createNamespace(t, api, "plain", false)
	createNamespace(t, api, metav1.NamespaceSystem, true) // labelled: kube-system is still never mutated
	awaitPolicy(t, api, "opted", "envoy")

	pod := func(name string, labels, annotations map[string]string) corev1.Pod {
		return corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.40.0", Args: []string{"-c", "/etc/envoy/envoy.yaml"}}}},
		}
	}
	optIn := map[string]string{inject.LabelInject: inject.InjectEnabled}
	for _, tc := range []struct {
		ns   string
		pod  corev1.Pod
		want bool
	}{
		{"opted", pod("in-namespace", nil, nil), true},
		{"opted", pod("both", optIn, nil), true},
		{"opted", pod("opted-out", nil, map[string]string{inject.AnnotationInject: inject.InjectFalse}), false},
		{"opted", pod("ours", map[string]string{inject.LabelName: inject.OwnName, inject.LabelInject: inject.InjectEnabled}, nil), false},
		{"plain", pod("not-opted-in", nil, nil), false},
		{"plain", pod("pod-label", optIn, nil), true},
		{"plain", pod("pod-label-opted-out", optIn, map[string]string{inject.AnnotationInject: inject.InjectFalse}), false},
		{metav1.NamespaceSystem, pod("system", optIn, nil), false},
	} {
		got := create(t, api, tc.ns, []corev1.Pod{tc.pod}, false)[0]
		if inject.Injected(&got.ObjectMeta) != tc.want {
			t.Errorf("pod %s/%s: injected %t, want %t", tc.ns, tc.pod.Name, !tc.want, tc.want)
			continue
		}
		if !tc.want {
			continue
		}
		// Mutated exactly once, with the shipped settings.
		if n := len(got.Spec.InitContainers); n != 1 || got.Spec.InitContainers[0].Name != inject.InstallContainer ||
			got.Spec.InitContainers[0].Image != "shutdown-manager:dev" {
			t.Errorf("pod %s/%s: init containers %+v, want only %s with image shutdown-manager:dev", tc.ns, tc.pod.Name, got.Spec.InitContainers, inject.InstallContainer)
		}
		c := got.Spec.Containers[0]
		var env []string
		for _, e := range c.Env {
			env = append(env, e.Name)
		}
		if want := []string{podenv.Name, podenv.Namespace, podenv.UID}; c.Lifecycle == nil || c.Lifecycle.PreStop == nil || !slices.Equal(env, want) {
			t.Errorf("pod %s/%s: Envoy's container %+v, want our preStop hook and the variables %v", tc.ns, tc.pod.Name, c, want)
		}
	}
}

// TestFindEnvoy: the policy finds Envoy's container as inject does: by --envoy-container only when it is
// given; else the only container named envoy or whose image is Envoy's (a registry port, a digest, a tag
// named envoy); none or two (by name or image) are refused by both.
func TestFindEnvoy(t *testing.T) {
	api := kubetest.Start(t)
	if !policyServed(t, api) {
		return
	}
	pod := func(name string, containers ...string) corev1.Pod { // name=image pairs
		p := corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, c := range containers {
			n, image, _ := strings.Cut(c, "=")
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: n, Image: image, Args: []string{"-c", "/etc/envoy/envoy.yaml"}})
		}
		return p
	}
	pods := []corev1.Pod{
		pod("named", "app=example.com/app:v1", "envoy=example.com/proxy:v1"),
		pod("image", "app=example.com/app:v1", "proxy=envoyproxy/envoy:v1.40.0"),
		pod("distroless-digest", "proxy=docker.io/envoyproxy/envoy-distroless@sha256:0000000000000000000000000000000000000000000000000000000000000000", "app=example.com/app:v1"),
		pod("registry-port", "app=example.com/app:v1", "proxy=registry.example.com:5000/envoy"),
		pod("tag-is-not-image", "proxy=registry.example.com:5000/team/app:envoy"),
		pod("named-and-image", "front=envoyproxy/envoy:v1.40.0", "envoy=example.com/proxy:v1"),              // two Envoys: refused
		pod("named-and-named-image", "envoy=envoyproxy/envoy:v1.40.0", "internal=envoyproxy/envoy:v1.40.0"), // two Envoys: refused
		pod("two-images", "front=envoyproxy/envoy:v1.40.0", "back=envoyproxy/envoy-contrib:v1.40.0"),
	}
	for i, tc := range []struct {
		name string
		cfg  func(*inject.Config)
		want int // pods proven equal: inject injects them, and so does the policy
	}{
		{"found", nil, 4},
		{"configured", func(c *inject.Config) { c.EnvoyContainer = "proxy" }, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := goldenConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			if got := prove(t, api, fmt.Sprintf("find-%d", i), cfg, pods, ""); got != tc.want {
				t.Errorf("%d pods proven equal, want %d", got, tc.want)
			}
		})
	}
}

// policyMinor is the first Kubernetes minor version that serves MutatingAdmissionPolicy v1 (GA in 1.36).
const policyMinor = 36

// policyServed reports whether api serves MutatingAdmissionPolicy v1. On an older server (the oldest supported line)
// it proves instead what a user meets there: the shipped policy is refused by the server, naming the missing kind
// (docs/compatibility.md says so, and the chart refuses mode=policy with its own line).
func policyServed(t *testing.T, api *kubetest.APIServer) bool {
	t.Helper()
	v := api.Version(t)
	if v.Minor >= policyMinor {
		return true
	}
	out, err := api.DryRun(t.Context(), "../../deploy/policy/policy.yaml")
	if err == nil || !strings.Contains(err.Error()+out, `no matches for kind "MutatingAdmissionPolicy"`) {
		t.Errorf("Kubernetes %s (before 1.%d): applying deploy/policy/policy.yaml = %v, %q; want it refused for want of the kind", v.Server, policyMinor, err, out)
	}
	t.Logf("Kubernetes %s does not serve MutatingAdmissionPolicy v1: the policy is refused there, as asserted; nothing more to prove", v.Server)
	return false
}

package webhook

import (
	"math"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

func TestDecide(t *testing.T) {
	with := func(p *corev1.Pod, edit func(*corev1.Pod)) *corev1.Pod { edit(p); return p }
	tests := []struct {
		name       string
		namespace  string
		operation  admissionv1.Operation
		pod        *corev1.Pod
		want       Outcome
		wantReason string
	}{
		{"envoy pod", "apps", admissionv1.Create, envoyPod(), OutcomeInjected, ""},
		{"update", "apps", admissionv1.Update, envoyPod(), OutcomeSkipped, "operation UPDATE"},
		{"kube-system", metav1.NamespaceSystem, admissionv1.Create, envoyPod(), OutcomeSkipped, "kube-system"},
		{"own pod", "apps", admissionv1.Create, with(envoyPod(), func(p *corev1.Pod) { p.Labels[inject.LabelName] = inject.OwnName }), OutcomeSkipped, "own pod"},
		{"opted out", "apps", admissionv1.Create, with(envoyPod(), func(p *corev1.Pod) {
			p.Annotations = map[string]string{inject.AnnotationInject: inject.InjectFalse}
		}), OutcomeSkipped, "opted out"},
		{"opted out by label false", "apps", admissionv1.Create, with(envoyPod(), func(p *corev1.Pod) { p.Labels[inject.LabelInject] = inject.InjectFalse }),
			OutcomeSkipped, "opted out by label shutdown-manager.io/inject=false"},
		{"opted out by label disabled", "apps", admissionv1.Create, with(envoyPod(), func(p *corev1.Pod) { p.Labels[inject.LabelInject] = inject.InjectDisabled }),
			OutcomeSkipped, "opted out by label shutdown-manager.io/inject=disabled"},
		{"no Envoy, namespace opt-in", "apps", admissionv1.Create, appPod(), OutcomeSkipped, "no Envoy container"},
		{"no Envoy, pod label", "apps", admissionv1.Create, with(appPod(), func(p *corev1.Pod) { p.Labels[inject.LabelInject] = inject.InjectEnabled }), OutcomeWarning, "no Envoy container"},
		{"no Envoy, pod annotation", "apps", admissionv1.Create, with(appPod(), func(p *corev1.Pod) {
			p.Annotations = map[string]string{inject.AnnotationInject: inject.InjectTrue}
		}), OutcomeWarning, "no Envoy container"},
		{"bad annotation", "apps", admissionv1.Create, with(envoyPod(), func(p *corev1.Pod) {
			p.Annotations = map[string]string{inject.AnnotationMode: "sidecarr"}
		}), OutcomeWarning, `annotation shutdown-manager.io/mode: "sidecarr"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.pod.DeepCopy()
			got := Decide(Review{Namespace: tt.namespace, Operation: tt.operation, Pod: tt.pod}, testConfig)
			if got.Outcome != tt.want || !strings.Contains(got.Reason, tt.wantReason) {
				t.Errorf("Decide = %s (%q), want %s (%q)", got.Outcome, got.Reason, tt.want, tt.wantReason)
			}
			if (got.Pod != nil) != (tt.want == OutcomeInjected) {
				t.Errorf("Decide's pod = %v, want one only when injected", got.Pod)
			}
			if !equality.Semantic.DeepEqual(before, tt.pod) {
				t.Errorf("Decide changed the pod it was given")
			}
			if got.Pod == nil {
				return
			}
			want := before.DeepCopy()
			if err := inject.Inject(&want.ObjectMeta, &want.Spec, testConfig); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got.Pod, want) {
				t.Errorf("Decide's pod differs from inject.Inject's")
			}
		})
	}
}

// TestDecideIsInject: for pods as people build them (Envoy as a native sidecar, two Envoys, the node's
// network, the longest grace periods), the webhook stores what inject writes, or refuses what inject refuses
// with inject's reason.
func TestDecideIsInject(t *testing.T) {
	grace := func(p *corev1.Pod, g int64) *corev1.Pod { p.Spec.TerminationGracePeriodSeconds = &g; return p }
	nativeEnvoy := func() *corev1.Pod {
		p := appPod()
		p.Labels[inject.LabelInject] = inject.InjectEnabled
		envoy := envoyPod().Spec.Containers[0]
		envoy.RestartPolicy = new(corev1.ContainerRestartPolicyAlways)
		p.Spec.InitContainers = []corev1.Container{envoy}
		return p
	}
	twoEnvoys := envoyPod()
	twoEnvoys.Spec.Containers = append(twoEnvoys.Spec.Containers, corev1.Container{Name: "internal", Image: "envoyproxy/envoy:v1.40.0"})
	hostNetwork := envoyPod()
	hostNetwork.Spec.HostNetwork = true
	sidecarHTTP := testConfig
	sidecarHTTP.Mode, sidecarHTTP.Hook = inject.ModeSidecar, inject.HookHTTP
	sidecar := testConfig
	sidecar.Mode = inject.ModeSidecar
	agent := testConfig
	agent.Mode = inject.ModeAgent
	tests := []struct {
		name       string
		pod        *corev1.Pod
		cfg        inject.Config
		want       Outcome
		wantReason string
	}{
		{"native sidecar Envoy, hook", nativeEnvoy(), testConfig, OutcomeInjected, ""},
		{"native sidecar Envoy, sidecar", nativeEnvoy(), sidecar, OutcomeInjected, ""},
		{"native sidecar Envoy, agent", nativeEnvoy(), agent, OutcomeWarning, "native sidecar"},
		{"two Envoys", twoEnvoys, testConfig, OutcomeWarning, `2 Envoy containers: envoy (envoyproxy/envoy:v1.40.0), internal (envoyproxy/envoy:v1.40.0)`},
		{"host network, http hook", hostNetwork, sidecarHTTP, OutcomeWarning, "hostNetwork"},
		{"host network, exec hook", hostNetwork, sidecar, OutcomeInjected, ""},
		{"largest grace, hook", grace(envoyPod(), math.MaxInt64), testConfig, OutcomeInjected, ""},
		{"largest grace, agent", grace(envoyPod(), math.MaxInt64), agent, OutcomeInjected, ""},
		{"grace just over a duration, agent", grace(envoyPod(), 9223372037), agent, OutcomeInjected, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(Review{Namespace: "apps", Operation: admissionv1.Create, Pod: tt.pod}, tt.cfg)
			if got.Outcome != tt.want || !strings.Contains(got.Reason, tt.wantReason) {
				t.Fatalf("Decide = %s (%q), want %s (%q)", got.Outcome, got.Reason, tt.want, tt.wantReason)
			}
			want := tt.pod.DeepCopy()
			err := inject.Inject(&want.ObjectMeta, &want.Spec, tt.cfg)
			if got.Pod == nil {
				if err == nil || err.Error() != got.Reason {
					t.Errorf("Decide refused with %q, inject said %v", got.Reason, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got.Pod, want) {
				t.Errorf("Decide's pod differs from inject.Inject's")
			}
		})
	}
}

// TestDecideServiceAccount: the sidecar the webhook adds gets the pod's ServiceAccount mount, as the API server's
// ServiceAccount admission plugin gave it to the containers present before the webhook ran; nothing else
// changes, and a pod without the mount (automount off) gets none.
func TestDecideServiceAccount(t *testing.T) {
	const vol = "kube-api-access-x7k2p"
	saPod := func(edit func(*corev1.Pod)) *corev1.Pod { // as the plugin leaves a pod
		p := envoyPod()
		p.Spec.Volumes = []corev1.Volume{{Name: vol, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: vol, MountPath: inject.ServiceAccountDir, ReadOnly: true}}
		if edit != nil {
			edit(p)
		}
		return p
	}
	sidecar := testConfig
	sidecar.Mode = inject.ModeSidecar
	plain := sidecar
	plain.SidecarKind = inject.SidecarPlain
	want := corev1.VolumeMount{Name: vol, MountPath: inject.ServiceAccountDir, ReadOnly: true}
	tests := []struct {
		name  string
		pod   *corev1.Pod
		cfg   inject.Config
		mount bool // the sidecar gets the mount
	}{
		{"native sidecar", saPod(nil), sidecar, true},
		{"plain sidecar", saPod(nil), plain, true},
		{"hook mode: no container added", saPod(nil), testConfig, false},
		{"no token mounted", envoyPod(), sidecar, false},
		{"automount off on the pod", saPod(func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = new(false) }), sidecar, false},
		{"a volume at the path that holds no token", saPod(func(p *corev1.Pod) {
			p.Spec.Volumes[0].Projected.Sources = []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{}}}
		}), sidecar, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(Review{Namespace: "apps", Operation: admissionv1.Create, Pod: tt.pod}, tt.cfg)
			if got.Outcome != OutcomeInjected {
				t.Fatalf("Decide = %s (%q)", got.Outcome, got.Reason)
			}
			injected := tt.pod.DeepCopy()
			if err := inject.Inject(&injected.ObjectMeta, &injected.Spec, tt.cfg); err != nil {
				t.Fatal(err)
			}
			var sc *corev1.Container
			for _, cs := range [][]corev1.Container{injected.Spec.Containers, injected.Spec.InitContainers} {
				for i := range cs {
					if cs[i].Name == inject.SidecarContainer {
						sc = &cs[i]
					}
				}
			}
			if tt.mount {
				sc.VolumeMounts = append(sc.VolumeMounts, want)
			}
			if !equality.Semantic.DeepEqual(got.Pod, injected) {
				t.Errorf("Decide's pod is not inject's with the sidecar's mount %v (%v):\ngot  %+v\nwant %+v", want, tt.mount, got.Pod.Spec, injected.Spec)
			}
			again := Decide(Review{Namespace: "apps", Operation: admissionv1.Create, Pod: got.Pod}, tt.cfg)
			if !equality.Semantic.DeepEqual(again.Pod, got.Pod) {
				t.Errorf("reinvoked on its own output, Decide changed the pod again")
			}
		})
	}
}

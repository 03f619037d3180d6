package webhook

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// TestDecideTakeover: a pod running Contour's manager is admitted unchanged with a warning naming it and the
// opt-in, and taken over with --takeover or the pod's annotation.
func TestDecideTakeover(t *testing.T) {
	contour := func() *corev1.Pod {
		p := envoyPod()
		p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/shutdown", Port: intstr.FromInt(8090)}}}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "shutdown-manager", Image: "ghcr.io/projectcontour/contour:v1.33.8",
			Command: []string{"/bin/contour"}, Args: []string{"envoy", "shutdown-manager"}})
		// Envoy's -c file, written as Contour writes it: its admin address is contour bootstrap's.
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "envoy-initconfig", Image: "ghcr.io/projectcontour/contour:v1.33.8",
			Command: []string{"contour"}, Args: []string{"bootstrap", "/etc/envoy/envoy.yaml", "--xds-address=contour"}})
		return p
	}
	review := func(p *corev1.Pod) Review { return Review{Namespace: "apps", Operation: admissionv1.Create, Pod: p} }

	got := Decide(review(contour()), testConfig)
	if got.Outcome != OutcomeWarning || !strings.Contains(got.Reason, "Contour's shutdown manager") || !strings.Contains(got.Reason, "--takeover") {
		t.Errorf("without takeover: %s (%q), want a warning naming Contour's shutdown manager and --takeover", got.Outcome, got.Reason)
	}

	cfg := testConfig
	cfg.Takeover = true
	unknown := contour() // Envoy's bootstrap a file that nothing in the pod writes: which admin it uses is unknown
	unknown.Spec.InitContainers = nil
	if got := Decide(review(unknown), cfg); got.Outcome != OutcomeWarning || !strings.Contains(got.Reason, "--admin-address") {
		t.Errorf("takeover, Envoy's admin unknown: %s (%q), want a warning naming --admin-address", got.Outcome, got.Reason)
	}
	byAnnotation := contour()
	byAnnotation.Annotations = map[string]string{inject.AnnotationTakeover: "true"}
	for _, tt := range []struct {
		name string
		r    Review
		cfg  inject.Config
	}{{"--takeover", review(contour()), cfg}, {"annotation", review(byAnnotation), testConfig}} {
		got := Decide(tt.r, tt.cfg)
		if got.Outcome != OutcomeInjected {
			t.Fatalf("%s: %s (%q), want injected", tt.name, got.Outcome, got.Reason)
		}
		st, _, err := inject.ParseStatus(&got.Pod.ObjectMeta)
		if err != nil || st.Takeover == nil || st.Takeover.Peer != inject.PeerContour || len(got.Pod.Spec.Containers) != 1 {
			t.Errorf("%s: status %+v (%v), %d containers: want Contour's taken over", tt.name, st.Takeover, err, len(got.Pod.Spec.Containers))
		}
	}
}

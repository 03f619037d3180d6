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
		return p
	}
	review := func(p *corev1.Pod) Review { return Review{Namespace: "apps", Operation: admissionv1.Create, Pod: p} }

	got := Decide(review(contour()), testConfig)
	if got.Outcome != OutcomeWarning || !strings.Contains(got.Reason, "Contour's shutdown manager") || !strings.Contains(got.Reason, "--takeover") {
		t.Errorf("without takeover: %s (%q), want a warning naming Contour's shutdown manager and --takeover", got.Outcome, got.Reason)
	}

	cfg := testConfig
	cfg.Takeover = true
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

package cli_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/supervisor"
)

// TestInjectDefaultsMatchTheDrain: the numbers inject sizes grace periods with are the drain's and run's
// own defaults.
func TestInjectDefaultsMatchTheDrain(t *testing.T) {
	fs := cli.RunFlagSet()
	for _, c := range []struct {
		flag string
		want time.Duration
	}{
		{"drain-delay", inject.DefaultDrainDelay},
		{"min-drain-duration", inject.DefaultMinDrainDuration},
		{"stop-timeout", supervisor.DefaultStopTimeout},
	} {
		if got := fs.Lookup(c.flag).DefValue; got != c.want.String() {
			t.Errorf("--%s defaults to %s, inject assumes %s", c.flag, got, c.want)
		}
	}
}

// TestAgentGraceArithmetic: inject and run count agent mode's margin alike. The drain timeout run derives
// from a --termination-grace-period is the longest one inject fits into that grace period: given it, inject
// keeps the grace period; given one second more, it raises the grace period by a second.
func TestAgentGraceArithmetic(t *testing.T) {
	for _, grace := range []int64{30, 60, 300} {
		derived, err := cli.RunDrainTimeout([]string{fmt.Sprintf("--termination-grace-period=%ds", grace), "--admin-address=127.0.0.1:9901"}, []string{"sh"})
		if err != nil {
			t.Fatalf("grace %ds: %v", grace, err)
		}
		for _, c := range []struct {
			timeout   time.Duration
			wantGrace int64
		}{
			{derived, grace},
			{derived + time.Second, grace + 1},
		} {
			meta := metav1.ObjectMeta{}
			spec := corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy", Args: []string{"-c", "/e.yaml"}}}}
			cfg := inject.Config{Image: "sm:1", Mode: inject.ModeAgent, Drain: inject.Drain{Timeout: &c.timeout}}
			if err := inject.Inject(&meta, &spec, cfg); err != nil {
				t.Fatalf("grace %ds, drain timeout %s: %v", grace, c.timeout, err)
			}
			if got := *spec.TerminationGracePeriodSeconds; got != c.wantGrace {
				t.Errorf("grace %ds: run derives a drain timeout of %s; inject given %s sets the grace period to %ds, want %ds", grace, derived, c.timeout, got, c.wantGrace)
			}
		}
	}
}

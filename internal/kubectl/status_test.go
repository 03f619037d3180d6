package kubectl

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// A pod's drain state is its last drain's, as the manager's Events tell it, else what the pod says.
func TestPodStatus(t *testing.T) {
	ev := func(reasons ...string) []Event {
		var evs []Event
		for i, r := range reasons {
			evs = append(evs, Event{Time: time.Unix(int64(i), 0), Reason: r})
		}
		return evs
	}
	deleted := metav1.NewTime(time.Unix(100, 0))
	grace := int64(30)
	injected := map[string]string{inject.AnnotationStatus: `{"version":"v1","image":"i","mode":"sidecar","envoyContainer":"envoy","drainTimeout":"50s"}`}
	for _, tt := range []struct {
		name    string
		meta    metav1.ObjectMeta
		evs     []Event
		want    string
		phase   string
		mode    string
		deleted bool
	}{
		{"not injected", metav1.ObjectMeta{}, nil, StateNotManaged, "Pending", "", false},
		{"injected, idle", metav1.ObjectMeta{Annotations: injected}, nil, StateNone, "Pending", "sidecar", false},
		{"terminating, nothing recorded", metav1.ObjectMeta{Annotations: injected, DeletionTimestamp: &deleted, DeletionGracePeriodSeconds: &grace}, nil, StateNoEvent, "Terminating", "sidecar", true},
		{"draining", metav1.ObjectMeta{DeletionTimestamp: &deleted}, ev(events.ReasonDrainStarted), StateDraining, "Terminating", "", true},
		{"drained", metav1.ObjectMeta{}, ev(events.ReasonDrainStarted, events.ReasonDrained), StateDrained, "Pending", "", false},
		{"resumed, drained again, timed out", metav1.ObjectMeta{}, ev(events.ReasonDrainStarted, events.ReasonDrainCanceled, events.ReasonDrainStarted, events.ReasonDrainTimedOut), StateTimedOut, "Pending", "", false},
		{"a second drain under way", metav1.ObjectMeta{}, ev(events.ReasonDrainStarted, events.ReasonDrained, events.ReasonDrainStarted), StateDraining, "Pending", "", false},
		{"started lost, gone", metav1.ObjectMeta{}, ev(events.ReasonEnvoyGone), StateEnvoyGone, "Pending", "", false},
		{"failed, then another reason", metav1.ObjectMeta{}, ev(events.ReasonDrainFailed, "SomethingElse"), StateFailed, "Pending", "", false},
	} {
		p := corev1.Pod{ObjectMeta: tt.meta, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy"}}}}
		got := podStatus(p, tt.evs)
		if got.Drain != tt.want || got.Phase != tt.phase || got.Mode != tt.mode || (got.Deleted != nil) != tt.deleted || got.Ready != "0/1" {
			t.Errorf("%s: drain %s, status %s, mode %q, deleted %v, ready %s; want %s, %s, %q, deleted %v, 0/1",
				tt.name, got.Drain, got.Phase, got.Mode, got.Deleted, got.Ready, tt.want, tt.phase, tt.mode, tt.deleted)
		}
		if tt.name == "terminating, nothing recorded" && !got.Deleted.Equal(time.Unix(70, 0)) {
			t.Errorf("deleted at %v, want the deletion timestamp minus the grace period", got.Deleted)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for _, tt := range []struct{ target, resource, name string }{
		{"deployment/envoy", "deployments", "envoy"},
		{"deploy/envoy", "deployments", "envoy"},
		{"DaemonSet/envoy", "daemonsets", "envoy"},
		{"sts/edge", "statefulsets", "edge"},
		{"po/envoy-x", "pods", "envoy-x"},
		{"cronjob/x", "", ""},
		{"envoy", "", ""},
		{"pod/", "", ""},
	} {
		res, _, name, err := ParseTarget(tt.target)
		if res != tt.resource || name != tt.name || (err == nil) != (tt.resource != "") {
			t.Errorf("ParseTarget(%q) = %q, %q, %v; want %q, %q", tt.target, res, name, err, tt.resource, tt.name)
		}
	}
}

func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 45 * time.Second: "45s", 200 * time.Second: "3m20s", 42 * time.Minute: "42m",
		125 * time.Minute: "2h5m", 30 * time.Hour: "30h", 80 * time.Hour: "3d",
	} {
		if got := Age(d); got != want {
			t.Errorf("Age(%s) = %s, want %s", d, got, want)
		}
	}
}

// The manager's API port is the --listen of its serve or run, not a unix socket, not Envoy's arguments.
func TestAPIPort(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	for _, tt := range []struct {
		name string
		spec corev1.PodSpec
		want int
	}{
		{"sidecar http", corev1.PodSpec{InitContainers: []corev1.Container{{RestartPolicy: &always, Args: []string{"serve", "--listen=:8090", "--metrics-listen=:9090"}}}}, 8090},
		{"plain sidecar, two words", corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy"}, {Args: []string{"serve", "--listen", "0.0.0.0:7000"}}}}, 7000},
		{"sidecar on a socket", corev1.PodSpec{Containers: []corev1.Container{{Args: []string{"serve", "--listen=unix:///run/sm/api.sock"}}}}, 0},
		{"agent", corev1.PodSpec{Containers: []corev1.Container{{Command: []string{"/opt/shutdown-manager/shutdown-manager", "run", "--listen=:8090", "--", "envoy", "-c", "x"}}}}, 8090},
		{"agent without an API", corev1.PodSpec{Containers: []corev1.Container{{Command: []string{"/opt/shutdown-manager/shutdown-manager", "run", "--", "envoy", "--listen=:1"}}}}, 0},
		{"hook", corev1.PodSpec{Containers: []corev1.Container{{Args: []string{"-c", "/etc/envoy.yaml", "--listen=:1"}}}}, 0},
	} {
		if got := apiPort(corev1.Pod{Spec: tt.spec}); got != tt.want {
			t.Errorf("%s: port %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestLiveText(t *testing.T) {
	n := int64(3)
	for _, tt := range []struct {
		l    *Live
		want string
	}{
		{nil, "<none>"}, {&Live{State: "idle"}, "idle"}, {&Live{State: "waiting", Open: &n}, "waiting 3"},
		{&Live{State: "released", Open: &n, Outcome: "timeout"}, "released 3 timeout"}, {&Live{Error: "forbidden"}, "error"},
	} {
		if got := tt.l.Text(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.l, got, tt.want)
		}
	}
}

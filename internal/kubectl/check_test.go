package kubectl

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// injectedPod is an Envoy pod (its admin socket's directory an emptyDir it mounts at /admin) injected by the
// real inject with cfg, as the API server stores it: the ServiceAccount token mounted in every container.
func injectedPod(t *testing.T, cfg inject.Config, grace *int64) corev1.Pod {
	t.Helper()
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "envoy-1", Namespace: "edge"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: grace,
			Volumes:                       []corev1.Volume{{Name: "admin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.36.2", Args: []string{"-c", "/etc/envoy/envoy.yaml"},
				VolumeMounts: []corev1.VolumeMount{{Name: "admin", MountPath: "/admin"}}}},
		},
	}
	if cfg.Image == "" {
		cfg.Image = "registry.example/shutdown-manager:v1"
	}
	if cfg.Version == "" {
		cfg.Version = "v1"
	}
	if err := inject.Inject(&p.ObjectMeta, &p.Spec, cfg); err != nil {
		t.Fatalf("inject: %v", err)
	}
	sa := corev1.VolumeMount{Name: "kube-api-access-x", MountPath: events.ServiceAccountDir, ReadOnly: true}
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].VolumeMounts = append(p.Spec.Containers[i].VolumeMounts, sa)
	}
	for i := range p.Spec.InitContainers {
		p.Spec.InitContainers[i].VolumeMounts = append(p.Spec.InitContainers[i].VolumeMounts, sa)
	}
	return p
}

func ptr[T any](v T) *T { return &v }

func mustRead(t *testing.T, p corev1.Pod) *injection {
	t.Helper()
	in, f := readInjection(p, "v1")
	if in == nil {
		t.Fatalf("readInjection: %+v", f)
	}
	return in
}

func want(t *testing.T, name string, f Finding, result string, says ...string) {
	t.Helper()
	t.Logf("%s: %s %s", name, f.Result, f.Reason)
	if f.Result != result {
		t.Errorf("%s: %s %q, want %s", name, f.Result, f.Reason, result)
	}
	for _, s := range says {
		if !strings.Contains(f.Reason, s) {
			t.Errorf("%s: reason %q does not say %q", name, f.Reason, s)
		}
	}
}

func TestCheckInjected(t *testing.T) {
	plain := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy"}}}}
	in, f := readInjection(plain, "v1")
	want(t, "not injected", f, ResultFail, "not injected")
	if in != nil {
		t.Error("not injected: an injection")
	}

	_, f = readInjection(injectedPod(t, inject.Config{}, nil), "v1")
	want(t, "hook", f, ResultOK, "hook mode", "v1")
	_, f = readInjection(injectedPod(t, inject.Config{Version: "v0.9.0"}, nil), "v1")
	want(t, "skew", f, ResultWarn, "v0.9.0", "v1", "version skew")
	_, f = readInjection(injectedPod(t, inject.Config{Mode: inject.ModeSidecar}, nil), "v1")
	want(t, "sidecar", f, ResultOK, "sidecar mode (native sidecar, exec hook)")

	p := injectedPod(t, inject.Config{Mode: inject.ModeSidecar}, nil)
	p.Spec.InitContainers = p.Spec.InitContainers[:0] // the sidecar (and the binary's copy) gone
	_, f = readInjection(p, "v1")
	want(t, "sidecar removed", f, ResultFail, "lacks", "altered")

	p = injectedPod(t, inject.Config{}, nil)
	p.Annotations[inject.AnnotationStatus] = "{"
	_, f = readInjection(p, "v1")
	want(t, "unreadable", f, ResultFail, inject.AnnotationStatus)
}

func TestCheckGrace(t *testing.T) {
	d50 := 50 * time.Second
	hook := injectedPod(t, inject.Config{Drain: inject.Drain{Timeout: &d50}}, nil)
	want(t, "hook, raised by inject", mustRead(t, hook).grace(), ResultOK, "terminationGracePeriodSeconds 55 >= 55 needed", "drain timeout 50s", "5s hook margin")

	hook.Spec.TerminationGracePeriodSeconds = ptr[int64](20)
	want(t, "hook, lowered after", mustRead(t, hook).grace(), ResultFail, "terminationGracePeriodSeconds 20 < 55 needed", "kills Envoy 15s into the drain")

	hook.Spec.TerminationGracePeriodSeconds = nil // Kubernetes' default, 30 s
	want(t, "hook, default grace", mustRead(t, hook).grace(), ResultFail, "30 < 55")

	derived := injectedPod(t, inject.Config{}, ptr[int64](120)) // the drain timeout derived: 115s
	want(t, "hook, derived", mustRead(t, derived).grace(), ResultOK, "120 >= 120", "--drain-timeout 1m55s")

	agent := injectedPod(t, inject.Config{Mode: inject.ModeAgent}, ptr[int64](60))
	want(t, "agent", mustRead(t, agent).grace(), ResultOK, "60 >= 60", "--termination-grace-period 1m0s - 7s")
	agent.Spec.TerminationGracePeriodSeconds = ptr[int64](45)
	want(t, "agent, lowered", mustRead(t, agent).grace(), ResultFail, "45 < 60")

	sidecar := injectedPod(t, inject.Config{Mode: inject.ModeSidecar, Drain: inject.Drain{Timeout: &d50}}, nil)
	want(t, "sidecar", mustRead(t, sidecar).grace(), ResultOK, "55 >= 55")

	// A drain timeout not above the drain's floor: the drain refuses to start.
	in := mustRead(t, hook)
	in.words = []string{inject.BinaryPath, "drain", "--drain-timeout=5s", "--min-drain-duration", "10s"}
	want(t, "floor", in.grace(), ResultFail, "not above", "= 10s")
}

func TestCheckAdmin(t *testing.T) {
	const sock = "unix:///admin/admin.sock"
	want(t, "hook, found", mustRead(t, injectedPod(t, inject.Config{}, nil)).admin(nil), ResultOK, "Envoy's own container", "at drain time")
	want(t, "hook, socket", mustRead(t, injectedPod(t, inject.Config{AdminAddress: sock}, nil)).admin(nil), ResultOK, "Envoy's own container")
	want(t, "sidecar, default TCP", mustRead(t, injectedPod(t, inject.Config{Mode: inject.ModeSidecar}, nil)).admin(nil), ResultUnknown, "127.0.0.1:9901", "serve's default")
	want(t, "sidecar, TCP given", mustRead(t, injectedPod(t, inject.Config{Mode: inject.ModeSidecar, AdminAddress: "http://127.0.0.1:19000"}, nil)).admin(nil), ResultOK, "127.0.0.1:19000", "one network")

	shared := injectedPod(t, inject.Config{Mode: inject.ModeSidecar, AdminAddress: sock}, nil)
	want(t, "sidecar, socket shared", mustRead(t, shared).admin(nil), ResultOK, `volume "admin" at /admin`)

	// Issue 27 N1: the sidecar runs the drain without the socket's volume.
	n1 := injectedPod(t, inject.Config{Mode: inject.ModeSidecar, AdminAddress: sock}, nil)
	sc := &n1.Spec.InitContainers[len(n1.Spec.InitContainers)-1]
	if sc.Name != inject.SidecarContainer {
		t.Fatalf("the last init container is %s", sc.Name)
	}
	var kept []corev1.VolumeMount
	for _, m := range sc.VolumeMounts {
		if m.Name != "admin" {
			kept = append(kept, m)
		}
	}
	sc.VolumeMounts = kept
	want(t, "sidecar, socket not mounted", mustRead(t, n1).admin(nil), ResultFail, `"shutdown-manager" mounts nothing at /admin`)

	other := injectedPod(t, inject.Config{Mode: inject.ModeSidecar, AdminAddress: sock}, nil)
	for i, m := range other.Spec.InitContainers[len(other.Spec.InitContainers)-1].VolumeMounts {
		if m.Name == "admin" {
			other.Spec.InitContainers[len(other.Spec.InitContainers)-1].VolumeMounts[i].SubPath = "x"
		}
	}
	want(t, "sidecar, another subPath", mustRead(t, other).admin(nil), ResultFail, "not the same directory")

	own := injectedPod(t, inject.Config{Mode: inject.ModeSidecar, AdminAddress: sock}, nil)
	in := mustRead(t, own)
	in.envoy.VolumeMounts = in.envoy.VolumeMounts[1:] // Envoy's socket in its own filesystem
	want(t, "sidecar, socket in Envoy's filesystem", in.admin(nil), ResultFail, "own filesystem")

	live := mustRead(t, injectedPod(t, inject.Config{Mode: inject.ModeSidecar, Hook: inject.HookHTTP}, nil))
	want(t, "live, answered", live.admin(&Live{Envoy: "LIVE"}), ResultOK, "live: the manager read Envoy's state (LIVE)")
	want(t, "live, not answered", live.admin(&Live{State: "idle", LastError: "envoy admin: connection refused"}), ResultFail, "connection refused")
	want(t, "live, unreadable", live.admin(&Live{Error: "forbidden"}), ResultUnknown, "live: forbidden")
}

// fakeExec answers pods/exec as a kubelet would have run the command: what it printed and its exit status,
// or the exec's own error; it records what it was asked to run, and where.
type fakeExec struct {
	stdout, stderr string
	code           int
	err            error
	container      string
	command        []string
}

func (f *fakeExec) Exec(_ context.Context, _, _, container string, command []string, stdout, stderr io.Writer) (int, error) {
	f.container, f.command = container, command
	io.WriteString(stdout, f.stdout)
	io.WriteString(stderr, f.stderr)
	return f.code, f.err
}

// TestCheckAdminExec: `check --live` where the manager has no API port runs the drain's binary's `status` in the
// drain's container, with the drain's admin address; its answer decides, its failure fails, and neither a
// binary that refuses the flags nor a refused exec is taken for an answer about Envoy.
func TestCheckAdminExec(t *testing.T) {
	const sock = "unix:///admin/admin.sock"
	hook := mustRead(t, injectedPod(t, inject.Config{AdminAddress: sock}, nil))
	answered := &fakeExec{stdout: `{"admin_address":"` + sock + `","envoy_state":"LIVE","open":0}`}
	l := liveExec(t.Context(), answered, hook)
	if want := []string{inject.BinaryPath, "status", "-o", "json", "--admin-address=" + sock}; !slices.Equal(answered.command, want) || answered.container != hook.envoy.Name {
		t.Errorf("ran %q in %s; want %q in Envoy's container %s", answered.command, answered.container, want, hook.envoy.Name)
	}
	want(t, "exec, answered", hook.admin(l), ResultOK, "run in container envoy, read Envoy's state (LIVE) at "+sock)

	found := mustRead(t, injectedPod(t, inject.Config{}, nil)) // no --admin-address: status reads Envoy's process, as the drain
	x := &fakeExec{stdout: `{"admin_address":"http://127.0.0.1:9901","envoy_state":"DRAINING"}`}
	want(t, "exec, found", found.admin(liveExec(t.Context(), x, found)), ResultOK, "DRAINING", "127.0.0.1:9901")
	if slices.ContainsFunc(x.command, func(w string) bool { return strings.HasPrefix(w, "--admin-address") }) {
		t.Errorf("ran %q; want no --admin-address where the drain has none", x.command)
	}

	refused := &fakeExec{code: 1, stderr: "reading envoy's state\nshutdown-manager: GET /server_info: dial unix /admin/admin.sock: connect: no such file or directory\n"}
	want(t, "exec, not answered", hook.admin(liveExec(t.Context(), refused, hook)), ResultFail, "exit 1", "no such file or directory")
	usage := &fakeExec{code: 2, stderr: "flag provided but not defined: -o\n"}
	want(t, "exec, another binary", hook.admin(liveExec(t.Context(), usage, hook)), ResultOK, "bad usage", "-o")
	forbidden := &fakeExec{code: -1, err: errors.New(`pods "envoy" is forbidden: cannot create resource "pods/exec"`)}
	want(t, "exec, forbidden", hook.admin(liveExec(t.Context(), forbidden, hook)), ResultOK, "live: pods", "forbidden")
	var c capped
	if n, err := c.Write(make([]byte, 3*execOutputMax)); n != 3*execOutputMax || err != nil || c.Len() != execOutputMax {
		t.Errorf("capped: wrote %d (%v), kept %d; want all taken, %d kept", n, err, c.Len(), execOutputMax)
	}
	huge := &fakeExec{stdout: strings.Repeat("x", 3*execOutputMax)}
	if l := liveExec(t.Context(), huge, hook); !strings.Contains(l.Error, "no envoy_state") {
		t.Errorf("3 MiB of output: %+v; want no envoy_state, the output cut", l)
	}
	garbled := &fakeExec{stdout: "envoy LIVE at ..."}
	want(t, "exec, no JSON", hook.admin(liveExec(t.Context(), garbled, hook)), ResultOK, "no envoy_state")
	sidecar := mustRead(t, injectedPod(t, inject.Config{Mode: inject.ModeSidecar}, nil)) // serve's default admin: unknown from the spec
	want(t, "sidecar exec, answered", sidecar.admin(liveExec(t.Context(), &fakeExec{stdout: `{"admin_address":"http://127.0.0.1:9901","envoy_state":"LIVE"}`}, sidecar)), ResultOK, "run in container shutdown-manager")
	want(t, "sidecar exec, forbidden", sidecar.admin(liveExec(t.Context(), forbidden, sidecar)), ResultUnknown, "forbidden")
}

func TestCheckEventsToken(t *testing.T) {
	want(t, "pod's token", mustRead(t, injectedPod(t, inject.Config{}, nil)).eventsToken(), ResultOK, "ServiceAccount token")

	p := injectedPod(t, inject.Config{}, nil)
	p.Spec.AutomountServiceAccountToken = ptr(false)
	p.Spec.Containers[0].VolumeMounts = p.Spec.Containers[0].VolumeMounts[:len(p.Spec.Containers[0].VolumeMounts)-1]
	want(t, "no token", mustRead(t, p).eventsToken(), ResultFail, "no ServiceAccount token")

	// Automount off: inject mounts a token of the manager's own.
	off := corev1.Pod{Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr(false), Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.36.2"}}}}
	if err := inject.Inject(&off.ObjectMeta, &off.Spec, inject.Config{Image: "x", Version: "v1"}); err != nil {
		t.Fatal(err)
	}
	want(t, "manager's token", mustRead(t, off).eventsToken(), ResultOK, inject.APIAccessDir)

	want(t, "allowed", reviewFinding("system:serviceaccount:edge:envoy", "edge", true, "RBAC: allowed", ""), ResultOK, "may create")
	want(t, "denied", reviewFinding("system:serviceaccount:edge:mute", "edge", false, "", ""), ResultFail, "system:serviceaccount:edge:mute may not create events")
}

func TestCheckImage(t *testing.T) {
	p := injectedPod(t, inject.Config{}, nil)
	want(t, "no status", mustRead(t, p).image(), ResultUnknown, "shutdown-manager-install: no status")

	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: inject.InstallContainer, ImageID: "registry.example/shutdown-manager@sha256:1"}}
	want(t, "pulled", mustRead(t, p).image(), ResultOK, "pulled (registry.example/shutdown-manager@sha256:1)")

	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: inject.InstallContainer, State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image \"registry.example/shutdown-manager:v1\""}}}}
	want(t, "back-off", mustRead(t, p).image(), ResultFail, "ImagePullBackOff: Back-off pulling image")

	vol := injectedPod(t, inject.Config{BinaryFrom: inject.BinaryImageVolume}, nil)
	want(t, "image volume, no status", mustRead(t, vol).image(), ResultUnknown, "image volume")
	vol.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "envoy", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	want(t, "image volume, running", mustRead(t, vol).image(), ResultOK, "mounted")
}

// Issue 29 item 5: a load balancer that keeps sending for a while after the pod starts terminating.
func TestCheckDeregistration(t *testing.T) {
	d50, d130 := 50*time.Second, 130*time.Second
	short := mustRead(t, injectedPod(t, inject.Config{Drain: inject.Drain{Timeout: &d50}}, nil))
	want(t, "short of the load balancer", short.deregistration(120*time.Second), ResultFail,
		"drain timeout 50s (--drain-timeout 50s) < 2m0s", "--drain-timeout 2m10s and a grace period of 135s")
	want(t, "short of the silence", short.deregistration(45*time.Second), ResultWarn, "leaves 5s after", "10s of silence", "auto's upper bound")
	want(t, "covered", short.deregistration(40*time.Second), ResultOK, ">= 40s", "+ 10s of silence")

	fixed := 2 * time.Second
	quiet := mustRead(t, injectedPod(t, inject.Config{Drain: inject.Drain{Timeout: &d50, QuietPeriod: &fixed}}, nil))
	want(t, "a fixed quiet period", quiet.deregistration(45*time.Second), ResultOK, "+ 2s of silence (--quiet-period 2s)")

	long := mustRead(t, injectedPod(t, inject.Config{Drain: inject.Drain{Timeout: &d130}}, nil))
	want(t, "long enough", long.deregistration(120*time.Second), ResultOK, "2m10s")

	agent := mustRead(t, injectedPod(t, inject.Config{Mode: inject.ModeAgent}, ptr[int64](60)))
	want(t, "agent, derived", agent.deregistration(60*time.Second), ResultFail, "53s (--termination-grace-period 1m0s - 7s) < 1m0s", "grace period of 77s")

	off := time.Duration(0)
	noQuiet := mustRead(t, injectedPod(t, inject.Config{Drain: inject.Drain{Timeout: &d130, QuietPeriod: &off}}, nil))
	want(t, "no quiet period, a short floor", noQuiet.deregistration(time.Minute), ResultFail, "--quiet-period 0", "floor (drain delay + minimum drain duration: 5s) < 1m0s")
	want(t, "no quiet period, the floor covers it", noQuiet.deregistration(5*time.Second), ResultOK)

	// The delay inject was given is the one checked when --deregistration-delay is not; the flag wins.
	recorded := mustRead(t, injectedPod(t, inject.Config{DeregistrationDelay: 90 * time.Second}, nil))
	if got := recorded.deregistrationDelay(0); got != 90*time.Second {
		t.Errorf("the recorded delay: %s, want 1m30s", got)
	}
	if got := recorded.deregistrationDelay(time.Minute); got != time.Minute {
		t.Errorf("with --deregistration-delay 1m: %s, want 1m0s", got)
	}
	want(t, "recorded, sized by inject", recorded.deregistration(recorded.deregistrationDelay(0)), ResultOK, "1m40s", ">= 1m30s")
	if got := short.deregistrationDelay(0); got != 0 {
		t.Errorf("no delay recorded, none given: %s, want 0 (no check)", got)
	}
}

package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubectl"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// TestKubectlCheck: `shutdown-manager kubectl check` against a real kube-apiserver. The Deployment's pods are
// created by hand (there is no kubelet or controller), injected by the real inject (the library the inject
// command runs), some altered after injection as a user or an older version would leave them, their kubelet
// status written through the status subresource where a check reads it. The ServiceAccounts' rights are real
// RBAC (deploy/common/envoy-events-rbac.yaml for `envoy`, nothing for `mute`), asked through real
// LocalSubjectAccessReviews.
func TestKubectlCheck(t *testing.T) {
	api := kubetest.Start(t)
	const ns = "check"
	api.Kubectl(t, "create", "namespace", ns)
	api.Kubectl(t, "create", "serviceaccount", "-n", ns, "mute")
	api.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(repoRoot, "deploy", "common", "envoy-events-rbac.yaml")) // ServiceAccount envoy, may create Events
	bin := buildManager(t, "./cmd/shutdown-manager")
	version, err := exec.Command(bin, "version", "--short").Output()
	if err != nil {
		t.Fatalf("version --short: %v", err)
	}

	api.Kubectl(t, "create", "deployment", "-n", ns, "envoy", "--image=envoyproxy/envoy:v1.36.2") // selector app=envoy
	d50 := 50 * time.Second
	pod := func(name, sa string, cfg *inject.Config, edit func(*corev1.Pod)) {
		t.Helper()
		p := &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "envoy"}},
			Spec: corev1.PodSpec{
				NodeName:           "node-1",
				ServiceAccountName: sa,
				Volumes:            []corev1.Volume{{Name: "admin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.36.2", Args: []string{"-c", "/etc/envoy/envoy.yaml"},
					VolumeMounts: []corev1.VolumeMount{{Name: "admin", MountPath: "/admin"}}}},
			},
		}
		if cfg != nil {
			cfg.Image, cfg.Version = "registry.example/shutdown-manager:test", strings.TrimSpace(string(version))
			if err := inject.Inject(&p.ObjectMeta, &p.Spec, *cfg); err != nil {
				t.Fatalf("inject %s: %v", name, err)
			}
		}
		if edit != nil {
			edit(p)
		}
		create(t, api, p)
	}
	status := func(name, s string) {
		t.Helper()
		api.Kubectl(t, "patch", "pod", "-n", ns, name, "--subresource=status", "--type=merge", "-p", `{"status":`+s+`}`)
	}
	const pulled = `"imageID":"registry.example/shutdown-manager@sha256:0123","image":"registry.example/shutdown-manager:test"`
	const envoyRunning = `{"name":"envoy","image":"envoyproxy/envoy:v1.36.2","imageID":"envoyproxy/envoy@sha256:4567","ready":true,"restartCount":0,"state":{"running":{}}}`

	// A pod as it should be: hook mode, Events allowed, the image pulled.
	pod("envoy-good", "envoy", &inject.Config{Drain: inject.Drain{Timeout: &d50}}, nil)
	status("envoy-good", `{"phase":"Running","podIP":"10.0.0.1","initContainerStatuses":[{"name":"`+inject.InstallContainer+`",`+pulled+
		`,"ready":true,"restartCount":0,"state":{"terminated":{"exitCode":0,"reason":"Completed"}}}],"containerStatuses":[`+envoyRunning+`]}`)
	// The grace period lowered after injection (a manifest edited by hand).
	pod("envoy-short", "envoy", &inject.Config{Drain: inject.Drain{Timeout: &d50}}, func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = new(int64(20)) })
	// A ServiceAccount that may not create Events, and an image kubelet could not pull.
	pod("envoy-mute", "mute", &inject.Config{Drain: inject.Drain{Timeout: &d50}}, nil)
	status("envoy-mute", `{"phase":"Pending","initContainerStatuses":[{"name":"`+inject.InstallContainer+`","image":"registry.example/shutdown-manager:test","imageID":"","ready":false,"restartCount":0,`+
		`"state":{"waiting":{"reason":"ImagePullBackOff","message":"Back-off pulling image \"registry.example/shutdown-manager:test\""}}}]}`)
	// Sidecar mode on Envoy's admin socket, the socket's volume not mounted in the sidecar (issue 27 N1, as an
	// older inject left it).
	pod("envoy-n1", "envoy", &inject.Config{Mode: inject.ModeSidecar, AdminAddress: "unix:///admin/admin.sock", Drain: inject.Drain{Timeout: &d50}}, func(p *corev1.Pod) {
		for i := range p.Spec.InitContainers {
			if c := &p.Spec.InitContainers[i]; c.Name == inject.SidecarContainer {
				c.VolumeMounts = slicesDelete(c.VolumeMounts, "admin")
			}
		}
	})
	// Not injected (admitted while the webhook was down).
	pod("envoy-plain", "envoy", nil, nil)

	check := func(t *testing.T, kubeconfig string, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"kubectl", "check", "-n", ns, "--kubeconfig", kubeconfig}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			code = ee.ExitCode()
		default:
			t.Fatalf("check: %v", err)
		}
		return out.String(), errOut.String(), code
	}
	findings := func(t *testing.T, out string) map[string]map[string]kubectl.Finding {
		t.Helper()
		var rep kubectl.CheckReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("-o json: %v\n%s", err, out)
		}
		got := map[string]map[string]kubectl.Finding{}
		for _, p := range rep.Pods {
			got[p.Name] = map[string]kubectl.Finding{}
			for _, f := range p.Findings {
				got[p.Name][f.Check] = f
			}
		}
		return got
	}

	t.Run("deployment", func(t *testing.T) {
		out, stderr, code := check(t, api.Kubeconfig, "deployment/envoy", "-o", "json")
		if code != 1 || stderr != "" {
			t.Errorf("exit %d, stderr %q; want 1 (checks failed) and nothing on stderr", code, stderr)
		}
		got := findings(t, out)
		if len(got) != 5 {
			t.Fatalf("%d pods, want the Deployment's 5:\n%s", len(got), out)
		}
		for _, tt := range []struct {
			pod, check, result string
			says               []string
		}{
			{"envoy-good", kubectl.CheckInjected, kubectl.ResultOK, []string{"hook mode"}},
			{"envoy-good", kubectl.CheckGrace, kubectl.ResultOK, []string{"terminationGracePeriodSeconds 55 >= 55 needed", "50s"}},
			{"envoy-good", kubectl.CheckAdmin, kubectl.ResultOK, []string{"Envoy's own container"}},
			{"envoy-good", kubectl.CheckEvents, kubectl.ResultOK, []string{"system:serviceaccount:check:envoy may create events"}},
			{"envoy-good", kubectl.CheckImage, kubectl.ResultOK, []string{"registry.example/shutdown-manager@sha256:0123"}},
			{"envoy-short", kubectl.CheckGrace, kubectl.ResultFail, []string{"terminationGracePeriodSeconds 20 < 55 needed", "15s into the drain"}},
			{"envoy-short", kubectl.CheckImage, kubectl.ResultUnknown, []string{"no status from kubelet"}},
			{"envoy-mute", kubectl.CheckEvents, kubectl.ResultFail, []string{"system:serviceaccount:check:mute may not create events"}},
			{"envoy-mute", kubectl.CheckImage, kubectl.ResultFail, []string{"ImagePullBackOff", "Back-off pulling image"}},
			{"envoy-n1", kubectl.CheckInjected, kubectl.ResultOK, []string{"sidecar mode"}},
			{"envoy-n1", kubectl.CheckAdmin, kubectl.ResultFail, []string{"unix:///admin/admin.sock", `container "shutdown-manager" mounts nothing at /admin`}},
			{"envoy-n1", kubectl.CheckEvents, kubectl.ResultOK, nil},
			{"envoy-plain", kubectl.CheckInjected, kubectl.ResultFail, []string{"not injected"}},
			{"envoy-plain", kubectl.CheckGrace, kubectl.ResultUnknown, []string{"not injected"}},
		} {
			f, ok := got[tt.pod][tt.check]
			if !ok || f.Result != tt.result {
				t.Errorf("%s %s: %+v; want %s", tt.pod, tt.check, f, tt.result)
				continue
			}
			for _, s := range tt.says {
				if !strings.Contains(f.Reason, s) {
					t.Errorf("%s %s: %q does not say %q", tt.pod, tt.check, f.Reason, s)
				}
			}
		}
	})

	t.Run("table", func(t *testing.T) {
		out, _, code := check(t, api.Kubeconfig, "pod/envoy-good")
		t.Logf("kubectl shutdown-manager check pod/envoy-good -n %s:\n%s", ns, out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 6 || strings.Join(strings.Fields(lines[0]), " ") != "NAME CHECK RESULT REASON" {
			t.Fatalf("exit %d; want 0 and a header and 5 rows:\n%s", code, out)
		}
		for _, l := range lines[1:] {
			if f := strings.Fields(l); f[0] != "envoy-good" || f[2] != kubectl.ResultOK {
				t.Errorf("row %q: want envoy-good ok", l)
			}
		}
		out, _, code = check(t, api.Kubeconfig, "-l", "app=envoy")
		t.Logf("kubectl shutdown-manager check -l app=envoy -n %s:\n%s", ns, out)
		if code != 1 || strings.Count(out, "\n") != 1+5*5 {
			t.Errorf("-l app=envoy: exit %d, %d lines; want 1 and 5 rows for each of 5 pods", code, strings.Count(out, "\n"))
		}
	})

	t.Run("top-level", func(t *testing.T) {
		// shutdown-manager check is the plugin's check.
		plugin, _, code := check(t, api.Kubeconfig, "pod/envoy-short")
		out, err := exec.CommandContext(t.Context(), bin, "check", "pod/envoy-short", "-n", ns, "--kubeconfig", api.Kubeconfig).Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || code != 1 || string(out) != plugin {
			t.Errorf("shutdown-manager check: %v, want exit 1 as kubectl check's %d, and its output:\n%s\nkubectl check's:\n%s", err, code, out, plugin)
		}
	})

	t.Run("deregistration", func(t *testing.T) {
		// A load balancer that keeps sending for 120 s (issue 29 item 5): envoy-good's 50 s drain does not hold.
		out, _, code := check(t, api.Kubeconfig, "pod/envoy-good", "--deregistration-delay", "120s", "-o", "json")
		f := findings(t, out)["envoy-good"][kubectl.CheckDeregistration]
		if code != 1 || f.Result != kubectl.ResultFail || !strings.Contains(f.Reason, "50s (--drain-timeout 50s) < 2m0s") || !strings.Contains(f.Reason, "grace period of 135s") {
			t.Errorf("exit %d, %+v; want 1 and a failure with the drain timeout, the delay and what to set", code, f)
		}
		out, _, code = check(t, api.Kubeconfig, "pod/envoy-good", "--deregistration-delay", "30s", "-o", "json")
		if f := findings(t, out)["envoy-good"][kubectl.CheckDeregistration]; code != 0 || f.Result != kubectl.ResultOK {
			t.Errorf("30s: exit %d, %+v; want 0, ok", code, f)
		}
	})

	t.Run("live", func(t *testing.T) {
		// A sidecar with an HTTP API at this machine's address, a real serve there whose Envoy admin answers
		// nothing (there is no Envoy): through pods/proxy, --live sees the manager cannot read Envoy, which the
		// pod spec alone could not tell (the admin address is TCP: the static check passes).
		ip := hostIP(t)
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		pod("envoy-live", "envoy", &inject.Config{Mode: inject.ModeSidecar, Hook: inject.HookHTTP, Port: int32(port), AdminAddress: "http://127.0.0.1:1"},
			func(p *corev1.Pod) { p.Labels["app"] = "live" })
		status("envoy-live", `{"phase":"Running","podIP":"`+ip+`"}`)
		serve, err := testproc.Start(context.Background(), "serve", exec.Command(bin, "serve", "--listen", net.JoinHostPort(ip, strconv.Itoa(port)),
			"--admin-address", "http://127.0.0.1:1"), filepath.Join(t.TempDir(), "serve.log"))
		if err != nil {
			t.Fatal(err)
		}
		serve.StopAtCleanup(t, 5*time.Second)
		waitHTTP(t, "http://"+net.JoinHostPort(ip, strconv.Itoa(port))+"/healthz")

		out, _, _ := check(t, api.Kubeconfig, "pod/envoy-live", "-o", "json")
		if f := findings(t, out)["envoy-live"][kubectl.CheckAdmin]; f.Result != kubectl.ResultOK || strings.Contains(f.Reason, "live") {
			t.Errorf("without --live: %+v; want ok (TCP), nothing live", f)
		}
		out, _, code := check(t, api.Kubeconfig, "pod/envoy-live", "--live", "-o", "json")
		f := findings(t, out)["envoy-live"][kubectl.CheckAdmin]
		if code != 1 || f.Result != kubectl.ResultFail || !strings.Contains(f.Reason, "live: the manager cannot read Envoy") {
			t.Errorf("--live: exit %d, %+v; want 1, fail: the manager cannot read Envoy", code, f)
		}
	})

	t.Run("cannot review", func(t *testing.T) {
		// The status Role only (docs/cli.md): no right to create localsubjectaccessreviews, so the events check
		// cannot be made: unknown, and why; not ok, not a failure of the pod.
		api.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(repoRoot, "deploy", "common", "kubectl-plugin-role.yaml"))
		api.Kubectl(t, "create", "serviceaccount", "-n", ns, "viewer")
		api.Kubectl(t, "create", "rolebinding", "-n", ns, "viewer", "--role=shutdown-manager-status", "--serviceaccount="+ns+":viewer")
		viewer := strings.TrimSpace(api.Kubectl(t, "create", "token", "-n", ns, "viewer"))
		kc := kubeconfig(t, api, t.TempDir(), "certificate-authority: "+api.CAFile, "token: "+viewer)
		out, stderr, code := check(t, kc, "pod/envoy-good", "-o", "json")
		if code != 0 || stderr != "" {
			t.Errorf("exit %d, stderr %q; want 0: nothing failed", code, stderr)
		}
		f := findings(t, out)["envoy-good"][kubectl.CheckEvents]
		if f.Result != kubectl.ResultUnknown || !strings.Contains(f.Reason, "may not create localsubjectaccessreviews") {
			t.Errorf("events: %+v; want unknown: may not create localsubjectaccessreviews", f)
		}
		// With the review allowed (the Role docs/cli.md adds for check), the answer is the pod's.
		api.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(repoRoot, "deploy", "common", "kubectl-plugin-check-role.yaml"))
		api.Kubectl(t, "create", "rolebinding", "-n", ns, "viewer-check", "--role=shutdown-manager-check", "--serviceaccount="+ns+":viewer")
		out, _, _ = check(t, kc, "pod/envoy-good", "-o", "json")
		if f := findings(t, out)["envoy-good"][kubectl.CheckEvents]; f.Result != kubectl.ResultOK {
			t.Errorf("events with create on localsubjectaccessreviews: %+v; want ok", f)
		}
	})

	t.Run("errors", func(t *testing.T) {
		if _, stderr, code := check(t, api.Kubeconfig, "deployment/missing"); code != 1 || !strings.Contains(stderr, "not found") {
			t.Errorf("deployment/missing: exit %d, %q; want 1, not found", code, stderr)
		}
		if _, stderr, code := check(t, api.Kubeconfig, "-l", "app=nothing"); code != 1 || !strings.Contains(stderr, "no pods to check") {
			t.Errorf("no pods: exit %d, %q; want 1, no pods to check", code, stderr)
		}
		if _, _, code := check(t, api.Kubeconfig); code != 2 {
			t.Errorf("no target: exit %d, want 2", code)
		}
	})
}

// slicesDelete is ms without the mounts of volume name.
func slicesDelete(ms []corev1.VolumeMount, name string) []corev1.VolumeMount {
	var kept []corev1.VolumeMount
	for _, m := range ms {
		if m.Name != name {
			kept = append(kept, m)
		}
	}
	return kept
}

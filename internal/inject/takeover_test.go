package inject

import (
	"encoding/json"
	"errors"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
)

// TestTakeoverPeers takes over every Envoy workload Contour and Envoy Gateway render (read from their Go modules):
// refused without the opt-in, their manager replaced with ours with it (in every mode), the rest of the pod as it
// was, and uninject giving back the very object.
func TestTakeoverPeers(t *testing.T) {
	for _, w := range peers.Workloads(t) {
		t.Run(w.Source, func(t *testing.T) {
			original := decodeWorkload(t, w)
			wantAdmin := map[string]string{"contour": "unix:///admin/admin.sock", "envoy-gateway": "http://127.0.0.1:19000"}[w.Peer]
			if strings.HasSuffix(w.Source, "/ipv6.yaml#1") {
				wantAdmin = "http://[::1]:19000" // its inline bootstrap's admin address
			}
			given := "" // --admin-address, where the takeover must refuse without it
			if w.EnvoyRefuses() {
				obj := decodeWorkload(t, w)
				meta, spec := podOf(t, w, obj)
				err := Inject(meta, spec, Config{Image: "x", Takeover: true})
				if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), `container "envoy"`) || !strings.Contains(err.Error(), "--admin-address") {
					t.Fatalf("takeover of a pod whose Envoy would not start: got %v, want one line naming container \"envoy\" and --admin-address", err)
				}
				if !equality.Semantic.DeepEqual(obj, original) {
					t.Errorf("refused pod changed")
				}
				given, wantAdmin = "http://127.0.0.1:19000", "http://127.0.0.1:19000"
				// or the pod's annotation (as test/kube gives it)
				obj = decodeWorkload(t, w)
				meta, spec = podOf(t, w, obj)
				if meta.Annotations == nil {
					meta.Annotations = map[string]string{}
				}
				meta.Annotations[AnnotationAdminAddress] = given
				if err := Inject(meta, spec, Config{Image: "x", Takeover: true}); err != nil {
					t.Fatalf("takeover with annotation %s: %v", AnnotationAdminAddress, err)
				}
				checkTakenOver(t, decodeSpec(t, w), spec, wantAdmin)
			}

			for _, cfg := range []Config{goldenConfig(), {Image: "x", ReplaceHooks: true}, {Image: "x", Mode: ModeSidecar}} {
				obj := decodeWorkload(t, w)
				meta, spec := podOf(t, w, obj)
				err := Inject(meta, spec, cfg)
				if !errors.Is(err, ErrPeerManager) {
					t.Fatalf("mode %s without takeover: got %v, want ErrPeerManager", cfg.Mode, err)
				}
				msg := err.Error()
				name := map[string]string{"contour": "Contour's shutdown manager", "envoy-gateway": "Envoy Gateway's shutdown manager"}[w.Peer]
				if strings.Contains(msg, "\n") || !strings.Contains(msg, name) || !strings.Contains(msg, "--takeover") {
					t.Errorf("refusal %q: want one line naming %s and --takeover", msg, name)
				}
				if !equality.Semantic.DeepEqual(obj, original) {
					t.Errorf("refused pod changed")
				}
			}

			for _, mode := range []Mode{ModeHook, ModeSidecar, ModeAgent} {
				t.Run(string(mode), func(t *testing.T) {
					obj := decodeWorkload(t, w)
					meta, spec := podOf(t, w, obj)
					_, before := podOf(t, w, original)
					cfg := goldenConfig()
					cfg.Mode, cfg.Takeover, cfg.AdminAddress = mode, true, given
					if err := Inject(meta, spec, cfg); err != nil {
						t.Fatal(err)
					}
					checkTakenOver(t, before, spec, wantAdmin)
					if mode == ModeSidecar && strings.HasPrefix(wantAdmin, "unix://") {
						// The sidecar reaches Envoy's admin socket through Envoy's volume holding it (Contour's /admin).
						sc := containerNamed(spec, SidecarContainer)
						if sc == nil || !slices.ContainsFunc(sc.VolumeMounts, func(vm corev1.VolumeMount) bool {
							return vm.Name == "envoy-admin" && vm.MountPath == "/admin" && vm.ReadOnly
						}) {
							t.Errorf("sidecar does not mount envoy-admin at /admin (read-only): %+v", sc)
						}
					}
					st, _, err := ParseStatus(meta)
					if err != nil || st.Takeover == nil || string(st.Takeover.Peer) != w.Peer {
						t.Fatalf("status: %+v %v: want a takeover of %s", st.Takeover, err, w.Peer)
					}

					again := deepCopy(t, w.Kind, obj)
					m2, s2 := podOf(t, w, again)
					if err := Inject(m2, s2, cfg); err != nil || !equality.Semantic.DeepEqual(again, obj) {
						t.Errorf("inject twice differs from once (%v)", err)
					}

					if err := Uninject(meta, spec); err != nil {
						t.Fatal(err)
					}
					got, _ := json.Marshal(obj)
					want, _ := json.Marshal(original)
					if string(got) != string(want) {
						t.Errorf("uninject did not give the pod back:\n got %s\nwant %s", got, want)
					}
				})
			}

			// With the annotation instead of the flag (through the manifests, as `inject --takeover | uninject` does:
			// internal/manifest's TestTakeoverPeersManifests).
			byAnnotation := decodeWorkload(t, w)
			meta, spec := podOf(t, w, byAnnotation)
			if meta.Annotations == nil {
				meta.Annotations = map[string]string{}
			}
			meta.Annotations[AnnotationTakeover] = "true"
			if err := Inject(meta, spec, Config{Image: "x", AdminAddress: given}); err != nil {
				t.Errorf("annotation %s: \"true\": %v", AnnotationTakeover, err)
			}
		})
	}
}

// TestTakeoverMirroredManagerImage: a peer's manager whose image a mirror names like Envoy's
// (mirror.example.com/envoy-gateway) is the peer's manager still, not a second Envoy: refused by name without the
// opt-in, taken over with it. (make e2e's first run of the Envoy Gateway page named the controller's image so, and
// the webhook refused the pod: "2 Envoy containers".)
func TestTakeoverMirroredManagerImage(t *testing.T) {
	renamed := 0
	for _, w := range peers.Workloads(t) {
		if w.EnvoyRefuses() {
			continue
		}
		mirror := func(spec *corev1.PodSpec) {
			for i, c := range spec.Containers {
				if p, _ := managerOf(c); p != "" {
					spec.Containers[i].Image = "mirror.example.com/envoy-" + string(p) + ":v1"
					renamed++
				}
			}
		}
		meta, spec := podOf(t, w, decodeWorkload(t, w))
		mirror(spec)
		if err := Inject(meta, spec, Config{Image: "x"}); !errors.Is(err, ErrPeerManager) {
			t.Errorf("%s, its manager's image named like Envoy's, without takeover: got %v, want ErrPeerManager", w.Source, err)
		}
		before := decodeSpec(t, w)
		mirror(before)
		meta, spec = podOf(t, w, decodeWorkload(t, w))
		mirror(spec)
		if err := Inject(meta, spec, Config{Image: "x", Takeover: true}); err != nil {
			t.Errorf("%s, its manager's image named like Envoy's, taken over: %v", w.Source, err)
			continue
		}
		wantAdmin := map[string]string{"contour": "unix:///admin/admin.sock", "envoy-gateway": "http://127.0.0.1:19000"}[w.Peer]
		if strings.HasSuffix(w.Source, "/ipv6.yaml#1") {
			wantAdmin = "http://[::1]:19000"
		}
		checkTakenOver(t, before, spec, wantAdmin)
	}
	if renamed == 0 {
		t.Fatal("no peer's manager container found to rename")
	}
}

// checkTakenOver: no peer container or hook is left; Envoy's preStop is ours and drains the peer's admin address;
// every container but Envoy and every volume the pod had is there unchanged, Envoy changed only where inject
// changes it, and the grace period is the pod's.
func checkTakenOver(t *testing.T, before, after *corev1.PodSpec, wantAdmin string) {
	t.Helper()
	for _, c := range slices.Concat(after.InitContainers, after.Containers) {
		if p, _ := managerOf(c); p != "" {
			t.Errorf("container %q of %s is still there", c.Name, p)
		}
	}
	envoy := after.Containers[slices.IndexFunc(after.Containers, func(c corev1.Container) bool { return c.Name == "envoy" })]
	var hook *corev1.LifecycleHandler
	if envoy.Lifecycle != nil {
		hook = envoy.Lifecycle.PreStop
	}
	drain := envoy.Command // agent mode sets no hook: the drain's flags are on run's command line
	if hook != nil && hook.Exec != nil {
		drain = hook.Exec.Command
	}
	if hook != nil && hookOf(hook, 0) != "" || !slices.Contains(drain, "--admin-address="+wantAdmin) {
		t.Errorf("Envoy's preStop %v / command %v: want ours with --admin-address=%s", hook, envoy.Command, wantAdmin)
	}
	for _, c := range slices.Concat(before.InitContainers, before.Containers) {
		if p, _ := managerOf(c); p != "" || c.Name == "envoy" {
			continue
		}
		i := slices.IndexFunc(slices.Concat(after.InitContainers, after.Containers), func(a corev1.Container) bool {
			return a.Name == c.Name && equality.Semantic.DeepEqual(a, c)
		})
		if i < 0 {
			t.Errorf("container %q changed or gone", c.Name)
		}
	}
	for _, v := range before.Volumes {
		if !slices.ContainsFunc(after.Volumes, func(a corev1.Volume) bool { return equality.Semantic.DeepEqual(a, v) }) {
			t.Errorf("volume %q changed or gone", v.Name)
		}
	}
	was := before.Containers[slices.IndexFunc(before.Containers, func(c corev1.Container) bool { return c.Name == "envoy" })]
	for _, probe := range [][2]*corev1.Probe{{was.ReadinessProbe, envoy.ReadinessProbe}, {was.LivenessProbe, envoy.LivenessProbe}, {was.StartupProbe, envoy.StartupProbe}} {
		if !equality.Semantic.DeepEqual(probe[0], probe[1]) {
			t.Errorf("Envoy's probe changed: %v -> %v", probe[0], probe[1])
		}
	}
	if !slices.EqualFunc(was.Ports, envoy.Ports, func(a, b corev1.ContainerPort) bool { return a == b }) || was.Image != envoy.Image {
		t.Errorf("Envoy's ports or image changed")
	}
	if !equality.Semantic.DeepEqual(after.TerminationGracePeriodSeconds, before.TerminationGracePeriodSeconds) {
		t.Errorf("grace period %v, want the pod's %v", after.TerminationGracePeriodSeconds, before.TerminationGracePeriodSeconds)
	}
}

// marin3rPod is a pod in the shape MARIN3R's operator renders (3scale-ops/marin3r pkg/envoy/container/generator.go:
// Containers, InitContainers and Volumes with the shutdown manager enabled), its defaults filled in.
func marin3rPod() *corev1.Pod {
	port := intstr.FromInt(8090)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "marin3r-envoydeployment-edge"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{
				Name: "envoy-init-mgr", Image: "quay.io/3scale-sre/marin3r:v0.13.3",
				Args: []string{"init-manager", "--admin-access-log-path", "/dev/stdout", "--admin-bind-address", "0.0.0.0:9901",
					"--api-version", "v3", "--config-file", "/etc/envoy/bootstrap/config.json"},
			}},
			Containers: []corev1.Container{
				{
					Name: "envoy", Image: "envoyproxy/envoy:v1.40.0", Command: []string{"envoy"},
					Args:      []string{"-c", "/etc/envoy/bootstrap/config.json", "--service-node", "edge", "--service-cluster", "edge", "--drain-time-s", "300", "--drain-strategy", "gradual"},
					Ports:     []corev1.ContainerPort{{Name: "admin", ContainerPort: 9901}},
					Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/shutdown", Port: port}}},
				},
				{
					Name: "envoy-shtdn-mgr", Image: "quay.io/3scale-sre/marin3r:v0.13.3", Args: []string{"shutdown-manager", "--port", "8090"},
					Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: port}}},
				},
			},
			TerminationGracePeriodSeconds: new(int64(300)),
		},
	}
}

func TestTakeoverMarin3r(t *testing.T) {
	pod := marin3rPod()
	err := Inject(&pod.ObjectMeta, &pod.Spec, goldenConfig())
	if !errors.Is(err, ErrPeerManager) || !strings.Contains(err.Error(), "MARIN3R's shutdown manager") {
		t.Fatalf("got %v, want a refusal naming MARIN3R's shutdown manager", err)
	}
	cfg := goldenConfig()
	cfg.Takeover = true
	before := pod.DeepCopy()
	if err := Inject(&pod.ObjectMeta, &pod.Spec, cfg); err != nil {
		t.Fatal(err)
	}
	checkTakenOver(t, &before.Spec, &pod.Spec, "http://127.0.0.1:9901")
	if err := Uninject(&pod.ObjectMeta, &pod.Spec); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(pod, before) {
		t.Errorf("uninject did not give MARIN3R's pod back")
	}
}

// TestTakeoverShapes: the variations of the peers' shapes, each recognised (or not) as the table says.
func TestTakeoverShapes(t *testing.T) {
	envoy := func(hook *corev1.LifecycleHandler, args ...string) corev1.Container {
		c := corev1.Container{Name: "envoy", Image: "envoyproxy/envoy:v1.40.0", Args: args}
		if hook != nil {
			c.Lifecycle = &corev1.Lifecycle{PreStop: hook}
		}
		return c
	}
	execHook := func(cmd ...string) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}
	}
	httpHook := func(path string, port int) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt(port)}}
	}
	contour := corev1.Container{Name: "shutdown-manager", Image: "ghcr.io/projectcontour/contour:v1.33.8", Command: []string{"/bin/contour"}, Args: []string{"envoy", "shutdown-manager"},
		Lifecycle: &corev1.Lifecycle{PreStop: execHook("/bin/contour", "envoy", "shutdown")}}
	eg := corev1.Container{Name: "shutdown-manager", Image: "envoyproxy/gateway:v1.9.1", Command: []string{"envoy-gateway"}, Args: []string{"envoy", "shutdown-manager"}}
	bootstrap := func(file, sock string) corev1.Container {
		args := []string{"bootstrap", file, "--xds-address=contour"}
		if sock != "" {
			args = append(args, "--admin-address="+sock)
		}
		return corev1.Container{Name: "envoy-initconfig", Image: "ghcr.io/projectcontour/contour:v1.33.8", Command: []string{"contour"}, Args: args}
	}
	contourInit := []corev1.Container{bootstrap("/config/envoy.json", "")}
	contourEnvoy := func(hook *corev1.LifecycleHandler, args ...string) corev1.Container {
		return envoy(hook, append([]string{"-c", "/config/envoy.json", "--service-node", "$(ENVOY_POD_NAME)"}, args...)...)
	}
	v6 := "admin:\n  address:\n    socket_address:\n      address: ::1\n      port_value: 19000\n"
	egHook := httpHook("/shutdown/ready", 19002)
	withCommand := func(c corev1.Container, command ...string) corev1.Container { c.Command = command; return c }
	tests := []struct {
		name      string
		init      []corev1.Container
		cs        []corev1.Container
		wantPeer  Peer
		wantAdmin string
		wantErr   string
	}{
		{"Contour's exec hook on Envoy alone", contourInit, []corev1.Container{contourEnvoy(execHook("contour", "envoy", "shutdown"))}, PeerContour, "unix:///admin/admin.sock", ""},
		{"Contour's httpGet hook on Envoy alone", contourInit, []corev1.Container{contourEnvoy(httpHook("/shutdown", 8090))}, PeerContour, "unix:///admin/admin.sock", ""},
		{"Contour's bootstrap names another socket", []corev1.Container{bootstrap("/config/envoy.json", "/run/admin/envoy.sock")},
			[]corev1.Container{contour, contourEnvoy(httpHook("/shutdown", 8090))}, PeerContour, "unix:///run/admin/envoy.sock", ""},
		{"Contour's manager first, Envoy second", contourInit, []corev1.Container{contour, contourEnvoy(httpHook("/shutdown", 8090))}, PeerContour, "unix:///admin/admin.sock", ""},
		{"Contour's Envoy with -c in one argument", contourInit, []corev1.Container{contour, envoy(httpHook("/shutdown", 8090), "-c /config/envoy.json", "--log-level info")},
			PeerContour, "unix:///admin/admin.sock", ""},
		{"Contour's Envoy, its command envoy", contourInit, []corev1.Container{contour, withCommand(contourEnvoy(httpHook("/shutdown", 8090)), "/usr/local/bin/envoy")},
			PeerContour, "unix:///admin/admin.sock", ""},
		{"Envoy Gateway's, admin from the inline bootstrap", nil, []corev1.Container{
			envoy(egHook, "--config-yaml", "admin:\n  address:\n    socket_address: {address: 127.0.0.1, port_value: 19555}\n"), eg}, PeerEnvoyGateway, "http://127.0.0.1:19555", ""},
		{"Envoy Gateway's manager as a native sidecar", []corev1.Container{eg}, []corev1.Container{envoy(egHook, "--config-yaml", v6)}, PeerEnvoyGateway, "http://[::1]:19000", ""},
		{"Envoy Gateway v1.2-v1.5: each flag and its value in one argument", nil, []corev1.Container{
			withCommand(envoy(egHook, "--service-cluster default", "--service-node $(ENVOY_POD_NAME)", "--config-yaml "+v6, "--log-level warn", "--cpuset-threads"), "envoy"), eg},
			PeerEnvoyGateway, "http://[::1]:19000", ""},
		{"the inline bootstrap over the file", contourInit, []corev1.Container{contour, contourEnvoy(httpHook("/shutdown", 8090), "--config-yaml", v6)}, PeerContour, "http://[::1]:19000", ""},
		{"two peers", nil, []corev1.Container{contour, envoy(egHook)}, "", "", "both Contour's shutdown manager and Envoy Gateway's"},
		{"another hook on another port is not a peer's", nil, []corev1.Container{envoy(httpHook("/shutdown", 8091))}, "", "", "already has a preStop hook"},

		// Where the pod does not show which admin Envoy uses: one line naming the container and --admin-address.
		{"Envoy without command or args", contourInit, []corev1.Container{contour, envoy(httpHook("/shutdown", 8090))}, "", "", "the image's own bootstrap"},
		{"a bootstrap file nothing in the pod writes", nil, []corev1.Container{contour, contourEnvoy(httpHook("/shutdown", 8090))}, "", "", "no container of the pod writes"},
		{"another file than contour bootstrap writes", []corev1.Container{bootstrap("/config/other.json", "")}, []corev1.Container{contour, contourEnvoy(httpHook("/shutdown", 8090))}, "", "", "no container of the pod writes"},
		{"the file from a variable", contourInit, []corev1.Container{contour, envoy(httpHook("/shutdown", 8090), "-c", "$(BOOTSTRAP)")}, "", "", "kubelet expands"},
		{"the admin address from a variable", nil, []corev1.Container{eg, envoy(egHook, "--config-yaml", "admin: {address: {socket_address: {address: $(ADMIN_IP), port_value: 19000}}}")}, "", "", "not an IP address"},
		{"flag=value, which Envoy refuses", contourInit, []corev1.Container{contour, envoy(httpHook("/shutdown", 8090), "--config-path=/config/envoy.json")}, "", "", "not by ="},
		{"-c twice", contourInit, []corev1.Container{contour, contourEnvoy(httpHook("/shutdown", 8090), "-c", "/config/other.json")}, "", "", "given twice"},
		{"a placeholder bootstrap", nil, []corev1.Container{eg, envoy(egHook, "--config-yaml", "test bootstrap config")}, "", "", "not a YAML or JSON mapping"},
		{"an inline bootstrap without admin", nil, []corev1.Container{eg, envoy(egHook, "--config-yaml", "node: {id: x}")}, "", "", "no bootstrap with an admin address"},
		{"Envoy through a shell", contourInit, []corev1.Container{contour, withCommand(envoy(httpHook("/shutdown", 8090), "-c", "envoy -c /config/envoy.json"), "sh")}, "", "", `its command "sh" is not envoy`},
	}
	notAdminRefusal := map[string]bool{"two peers": true, "another hook on another port is not a peer's": true}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: tt.init, Containers: tt.cs}}
			before := pod.DeepCopy()
			err := Inject(&pod.ObjectMeta, &pod.Spec, Config{Image: "x", Takeover: true})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("got %v, want one line containing %q", err, tt.wantErr)
				}
				if !notAdminRefusal[tt.name] && (!strings.Contains(err.Error(), `container "envoy"`) || !strings.Contains(err.Error(), "--admin-address")) {
					t.Errorf("refusal %q: want it to name container \"envoy\" and --admin-address", err)
				}
				if !equality.Semantic.DeepEqual(pod, before) {
					t.Errorf("refused pod changed")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			st, _, _ := ParseStatus(&pod.ObjectMeta)
			if st.Takeover == nil || st.Takeover.Peer != tt.wantPeer {
				t.Fatalf("takeover %+v, want %s", st.Takeover, tt.wantPeer)
			}
			checkTakenOver(t, &before.Spec, &pod.Spec, tt.wantAdmin)
			if err := Uninject(&pod.ObjectMeta, &pod.Spec); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(pod, before) {
				t.Errorf("uninject did not give the pod back")
			}
		})
	}
}

func decodeSpec(t *testing.T, w peers.Workload) *corev1.PodSpec {
	t.Helper()
	_, spec := podOf(t, w, decodeWorkload(t, w))
	return spec
}

func decodeWorkload(t *testing.T, w peers.Workload) any {
	t.Helper()
	obj := newWorkload(w.Kind)
	if obj == nil {
		t.Fatalf("%s: kind %s", w.Source, w.Kind)
	}
	if err := yaml.UnmarshalStrict(w.YAML, obj); err != nil {
		t.Fatalf("%s: %v", w.Source, err)
	}
	return obj
}

// newWorkload is an empty object of a peer's workload kind (apps/v1 Deployment or DaemonSet), nil for another.
func newWorkload(kind string) any {
	switch kind {
	case "Deployment":
		return &appsv1.Deployment{}
	case "DaemonSet":
		return &appsv1.DaemonSet{}
	}
	return nil
}

func podOf(t *testing.T, w peers.Workload, obj any) (*metav1.ObjectMeta, *corev1.PodSpec) {
	t.Helper()
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	}
	t.Fatalf("%s: %T is not a peer's workload", w.Source, obj)
	return nil, nil
}

func deepCopy(t *testing.T, kind string, obj any) any {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	out := newWorkload(kind)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// adminInRendering is the admin address a peer's rendering gives its Envoy, read from the manifest's text
// without reading Envoy's command line: Envoy Gateway's bootstrap YAML (in whatever argument it is) names it in
// its admin block; Contour's `contour bootstrap` writes its --admin-address (default /admin/admin.sock).
var (
	egAdminText       = regexp.MustCompile(`admin:\s*\n(?:\s+.*\n)*?\s+socket_address:\s*\n\s+address: (\S+)\s*\n\s+port_value: (\d+)`)
	contourAdminText  = regexp.MustCompile(`--admin-address[= ](\S+)`)
	contourInitText   = regexp.MustCompile(`(?m)^\s+- bootstrap\s*$`)
	expectedRendering = map[string]int{"contour": 2, "envoy-gateway": 7} // versions read
)

func adminInRendering(t *testing.T, w peers.Workload) string {
	t.Helper()
	text := string(w.YAML)
	switch w.Peer {
	case "contour":
		if !contourInitText.MatchString(text) {
			t.Fatalf("%s: no contour bootstrap init container", w.Source)
		}
		if m := contourAdminText.FindStringSubmatch(text); m != nil {
			return "unix://" + m[1]
		}
		return "unix:///admin/admin.sock"
	}
	ms := egAdminText.FindAllStringSubmatch(text, -1)
	if len(ms) != 1 {
		t.Fatalf("%s: %d admin blocks in the rendering, want 1", w.Source, len(ms))
	}
	ip := netip.MustParseAddr(ms[0][1])
	return "http://" + netip.AddrPortFrom(ip, uint16(must(strconv.Atoi(ms[0][2])))).String()
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestTakeoverAdminEveryRendering: on every Envoy workload of every version of Contour and Envoy Gateway the Go
// module proxy serves (IPv4 and IPv6; Envoy Gateway v1.2–v1.5 with each Envoy flag and its value in one
// argument), the takeover drains the admin address the rendering's bootstrap gives Envoy, and refuses, in one
// line naming the container and --admin-address, the renderings on which Envoy would not start.
func TestTakeoverAdminEveryRendering(t *testing.T) {
	ws := peers.EveryVersion(t)
	versions := map[string]map[string]bool{}
	var v6, refused int
	for _, w := range ws {
		module, _, _ := strings.Cut(w.Source, "/internal/")
		module, _, _ = strings.Cut(module, "/examples/")
		if versions[w.Peer] == nil {
			versions[w.Peer] = map[string]bool{}
		}
		versions[w.Peer][module] = true
		t.Run(w.Source, func(t *testing.T) {
			obj := decodeWorkload(t, w)
			meta, spec := podOf(t, w, obj)
			err := Inject(meta, spec, Config{Image: "x", Takeover: true})
			if w.EnvoyRefuses() {
				refused++
				if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), `container "envoy"`) || !strings.Contains(err.Error(), "--admin-address") {
					t.Fatalf("got %v, want a one-line refusal naming container \"envoy\" and --admin-address", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := adminInRendering(t, w)
			if strings.Contains(want, "[") {
				v6++
			}
			envoy := spec.Containers[slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "envoy" })]
			if !slices.Contains(envoy.Lifecycle.PreStop.Exec.Command, "--admin-address="+want) {
				t.Errorf("Envoy's preStop %q: want --admin-address=%s, the rendering's", envoy.Lifecycle.PreStop.Exec.Command, want)
			}
		})
	}
	for peer, n := range expectedRendering {
		if len(versions[peer]) != n {
			t.Errorf("%s: %d versions read, want %d", peer, len(versions[peer]), n)
		}
	}
	t.Logf("%d renderings of %d versions: %d with an IPv6 admin address, %d refused", len(ws), len(versions["contour"])+len(versions["envoy-gateway"]), v6, refused)
}

package inject

import (
	"encoding/json"
	"errors"
	"slices"
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
					cfg.Mode, cfg.Takeover = mode, true
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

			// Through the manifests, as `inject --takeover | uninject` does, and with the annotation instead of the flag.
			out, err := Manifests(w.YAML, injectFunc(Config{Image: "x", Takeover: true}), &strings.Builder{})
			if err != nil {
				t.Fatal(err)
			}
			back, err := Manifests(out, Uninject, &strings.Builder{})
			if err != nil {
				t.Fatal(err)
			}
			if got := decodeWorkload(t, peers.Workload{Kind: w.Kind, YAML: back}); !equality.Semantic.DeepEqual(got, original) {
				t.Errorf("inject --takeover | uninject is not the manifest")
			}
			byAnnotation := decodeWorkload(t, w)
			meta, spec := podOf(t, w, byAnnotation)
			if meta.Annotations == nil {
				meta.Annotations = map[string]string{}
			}
			meta.Annotations[AnnotationTakeover] = "true"
			if err := Inject(meta, spec, Config{Image: "x"}); err != nil {
				t.Errorf("annotation %s: \"true\": %v", AnnotationTakeover, err)
			}
		})
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
	bootstrap := func(sock string) corev1.Container {
		return corev1.Container{Name: "envoy-initconfig", Image: "ghcr.io/projectcontour/contour:v1.33.8", Command: []string{"contour"},
			Args: []string{"bootstrap", "/config/envoy.json", "--admin-address=" + sock}}
	}
	tests := []struct {
		name      string
		init      []corev1.Container
		cs        []corev1.Container
		wantPeer  Peer
		wantAdmin string
		wantErr   string
	}{
		{"Contour's exec hook on Envoy alone", nil, []corev1.Container{envoy(execHook("contour", "envoy", "shutdown"))}, PeerContour, "unix:///admin/admin.sock", ""},
		{"Contour's httpGet hook on Envoy alone", nil, []corev1.Container{envoy(httpHook("/shutdown", 8090))}, PeerContour, "unix:///admin/admin.sock", ""},
		{"Contour's bootstrap names another socket", []corev1.Container{bootstrap("/run/admin/envoy.sock")},
			[]corev1.Container{contour, envoy(httpHook("/shutdown", 8090))}, PeerContour, "unix:///run/admin/envoy.sock", ""},
		{"Contour's manager first, Envoy second", nil, []corev1.Container{contour, envoy(httpHook("/shutdown", 8090))}, PeerContour, "unix:///admin/admin.sock", ""},
		{"Envoy Gateway's, admin from the inline bootstrap", nil, []corev1.Container{
			envoy(httpHook("/shutdown/ready", 19002), "--config-yaml", "admin:\n  address:\n    socket_address: {address: 127.0.0.1, port_value: 19555}\n"), eg}, PeerEnvoyGateway, "http://127.0.0.1:19555", ""},
		{"Envoy Gateway's manager as a native sidecar", []corev1.Container{eg}, []corev1.Container{envoy(httpHook("/shutdown/ready", 19002))}, PeerEnvoyGateway, "http://127.0.0.1:19000", ""},
		{"two peers", nil, []corev1.Container{contour, envoy(httpHook("/shutdown/ready", 19002))}, "", "", "both Contour's shutdown manager and Envoy Gateway's"},
		{"another hook on another port is not a peer's", nil, []corev1.Container{envoy(httpHook("/shutdown", 8091))}, "", "", "already has a preStop hook"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: tt.init, Containers: tt.cs}}
			before := pod.DeepCopy()
			err := Inject(&pod.ObjectMeta, &pod.Spec, Config{Image: "x", Takeover: true})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
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

func decodeWorkload(t *testing.T, w peers.Workload) any {
	t.Helper()
	wl, ok := LookupWorkload("apps/v1", w.Kind)
	if !ok {
		t.Fatalf("%s: kind %s", w.Source, w.Kind)
	}
	obj := wl.New()
	if err := yaml.UnmarshalStrict(w.YAML, obj); err != nil {
		t.Fatalf("%s: %v", w.Source, err)
	}
	return obj
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
	wl, _ := LookupWorkload("apps/v1", kind)
	out := wl.New()
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

package inject

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/podenv"
)

// TestAPIToken: a pod that turns automountServiceAccountToken off gets a token of the manager's own, mounted
// read-only at APIAccessDir into exactly the containers that run the manager (Envoy's where its hook or
// command runs it, the sidecar where it serves), with podenv.ServiceAccountDir naming the directory there; a
// pod with automount on or unset, or opted out, gets nothing new. Injecting again gives the same pod, and
// uninject gives back the original.
func TestAPIToken(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		// where the manager runs, so where the mount and variable must be (and only there)
		envoy, sidecar bool
	}{
		{"hook", Config{Mode: ModeHook}, true, false},
		{"hook, image volume", Config{Mode: ModeHook, BinaryFrom: BinaryImageVolume}, true, false},
		{"agent", Config{Mode: ModeAgent}, true, false},
		{"sidecar, exec hook", Config{Mode: ModeSidecar}, true, true},
		{"sidecar, plain, exec hook", Config{Mode: ModeSidecar, SidecarKind: SidecarPlain}, true, true},
		{"sidecar, http hook", Config{Mode: ModeSidecar, Hook: HookHTTP}, false, true},
		{"sidecar, http hook with a token", Config{Mode: ModeSidecar, Hook: HookHTTP, TokenSecret: "drain-token"}, true, true},
	}
	pod := func(automount *bool) (metav1.ObjectMeta, corev1.PodSpec) {
		return metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"kept": "yes"}}, corev1.PodSpec{
			AutomountServiceAccountToken: automount,
			ServiceAccountName:           "envoy-default-37a8eec1",
			Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.40.0", Args: []string{"-c", "/config/envoy.yaml"},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/config"}}}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Image = "sm:1"
			meta, spec := pod(new(false))
			origMeta, origSpec := *meta.DeepCopy(), *spec.DeepCopy()
			if err := Inject(&meta, &spec, cfg); err != nil {
				t.Fatal(err)
			}
			checkAPIToken(t, &spec, tc.envoy, tc.sidecar)
			st, _, err := ParseStatus(&meta)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(st.Volumes, APIAccessVolume) {
				t.Errorf("status volumes %v lack %s", st.Volumes, APIAccessVolume)
			}
			if got := slices.Contains(st.Env, podenv.ServiceAccountDir); got != tc.envoy {
				t.Errorf("status env %v: %s listed = %v, want %v", st.Env, podenv.ServiceAccountDir, got, tc.envoy)
			}

			// inject∘inject = inject
			meta2, spec2 := *meta.DeepCopy(), *spec.DeepCopy()
			if err := Inject(&meta2, &spec2, cfg); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(meta2, meta) || !equality.Semantic.DeepEqual(spec2, spec) {
				t.Errorf("injecting again changed the pod")
			}

			// uninject∘inject = identity
			if err := Uninject(&meta, &spec); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(meta, origMeta) || !equality.Semantic.DeepEqual(spec, origSpec) {
				t.Errorf("uninject did not give the pod back:\n got %+v\nwant %+v", spec, origSpec)
			}

			// Re-injecting with the opt-out takes the token out again.
			if err := Inject(&meta2, &spec2, Config{Image: "sm:1", Mode: cfg.Mode, Hook: cfg.Hook, SidecarKind: cfg.SidecarKind,
				BinaryFrom: cfg.BinaryFrom, TokenSecret: cfg.TokenSecret, NoAPIToken: true}); err != nil {
				t.Fatal(err)
			}
			checkAPIToken(t, &spec2, false, false)
		})
	}

	for _, tc := range []struct {
		name      string
		automount *bool
		cfg       Config
		ann       string
	}{
		{"automount unset", nil, Config{}, ""},
		{"automount on", new(true), Config{}, ""},
		{"opted out by the config", new(false), Config{NoAPIToken: true}, ""},
		{"opted out by the annotation", new(false), Config{}, "false"},
		{"sidecar, opted out by the annotation", new(false), Config{Mode: ModeSidecar}, "false"},
	} {
		t.Run("nothing new: "+tc.name, func(t *testing.T) {
			meta, spec := pod(tc.automount)
			if tc.ann != "" {
				meta.Annotations[AnnotationAPIToken] = tc.ann
			}
			cfg := tc.cfg
			cfg.Image = "sm:1"
			if err := Inject(&meta, &spec, cfg); err != nil {
				t.Fatal(err)
			}
			checkAPIToken(t, &spec, false, false)
		})
	}

	t.Run("the annotation's value is checked", func(t *testing.T) {
		meta, spec := pod(new(false))
		meta.Annotations[AnnotationAPIToken] = "no"
		if err := Inject(&meta, &spec, Config{Image: "sm:1"}); err == nil {
			t.Error("want an error for api-token: no")
		}
	})

	t.Run("a mount of the pod's own at the path is refused", func(t *testing.T) {
		meta, spec := pod(new(false))
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "config", MountPath: APIAccessDir})
		if err := Inject(&meta, &spec, Config{Image: "sm:1"}); err == nil {
			t.Error("want an error: Envoy already mounts something at " + APIAccessDir)
		}
	})

	t.Run("the user's variable wins", func(t *testing.T) {
		meta, spec := pod(new(false))
		spec.Containers[0].Env = []corev1.EnvVar{{Name: podenv.ServiceAccountDir, Value: "/mine"}}
		orig := *spec.DeepCopy()
		if err := Inject(&meta, &spec, Config{Image: "sm:1"}); err != nil {
			t.Fatal(err)
		}
		if e := spec.Containers[0].Env; e[0].Value != "/mine" || slices.ContainsFunc(e[1:], func(v corev1.EnvVar) bool { return v.Name == podenv.ServiceAccountDir }) {
			t.Errorf("env %v: the user's %s not kept alone", e, podenv.ServiceAccountDir)
		}
		if err := Uninject(&meta, &spec); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(spec, orig) {
			t.Errorf("uninject did not give the pod back")
		}
	})
}

// checkAPIToken checks the pod for the manager's token: the projected volume when any container mounts it, the
// mount and variable in Envoy's container and the sidecar as want says, and in no other container.
func checkAPIToken(t *testing.T, spec *corev1.PodSpec, envoy, sidecar bool) {
	t.Helper()
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == APIAccessVolume })
	if want := envoy || sidecar; (i >= 0) != want {
		t.Fatalf("volume %s present = %v, want %v", APIAccessVolume, i >= 0, want)
	}
	if i >= 0 {
		p := spec.Volumes[i].Projected
		if p == nil || len(p.Sources) != 3 {
			t.Fatalf("volume %s: %+v, want a projected volume of 3 sources", APIAccessVolume, spec.Volumes[i])
		}
		tok, cm, ns := p.Sources[0].ServiceAccountToken, p.Sources[1].ConfigMap, p.Sources[2].DownwardAPI
		if tok == nil || tok.Path != "token" || tok.Audience != "" || tok.ExpirationSeconds == nil || *tok.ExpirationSeconds != APITokenExpiration {
			t.Errorf("token source %+v: want token, the API server's audience, %ds", tok, APITokenExpiration)
		}
		if cm == nil || cm.Name != "kube-root-ca.crt" || len(cm.Items) != 1 || cm.Items[0].Key != "ca.crt" || cm.Items[0].Path != "ca.crt" {
			t.Errorf("CA source %+v: want kube-root-ca.crt's ca.crt", cm)
		}
		if ns == nil || len(ns.Items) != 1 || ns.Items[0].Path != "namespace" || ns.Items[0].FieldRef == nil || ns.Items[0].FieldRef.FieldPath != "metadata.namespace" {
			t.Errorf("namespace source %+v: want metadata.namespace", ns)
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		want := c.Name == "envoy" && envoy || c.Name == SidecarContainer && sidecar
		mounts := slices.DeleteFunc(slices.Clone(c.VolumeMounts), func(m corev1.VolumeMount) bool { return m.Name != APIAccessVolume && m.MountPath != APIAccessDir })
		env := slices.DeleteFunc(slices.Clone(c.Env), func(e corev1.EnvVar) bool { return e.Name != podenv.ServiceAccountDir })
		switch {
		case !want && (len(mounts) > 0 || len(env) > 0):
			t.Errorf("container %s: mounts %v, env %v; want no token", c.Name, mounts, env)
		case want && (len(mounts) != 1 || mounts[0] != apiAccessMount() || len(env) != 1 || env[0].Value != APIAccessDir):
			t.Errorf("container %s: mounts %v, env %v; want the token read-only at %s and %s=%s", c.Name, mounts, env, APIAccessDir, podenv.ServiceAccountDir, APIAccessDir)
		}
	}
}

package inject

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/podenv"
)

// goldenConfig is the Config of internal/manifest's golden cases before their own changes.
func goldenConfig() Config {
	return Config{Image: "ghcr.io/envoy-shutdown-manager/shutdown-manager:v1.0.0", Version: "v1.0.0"}
}

func dur(s string) *time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return &d
}

func TestPlanGrace(t *testing.T) {
	tests := []struct {
		name        string
		mode        Mode
		timeout     *time.Duration
		delay       *time.Duration
		current     *int64
		wantTimeout time.Duration
		wantGrace   int64
		wantChange  bool
	}{
		{"hook, no grace: Kubernetes' 30s less 5s", ModeHook, nil, nil, nil, 25 * time.Second, 30, false},
		{"hook, a long grace is used whole", ModeHook, nil, nil, new(int64(300)), 295 * time.Second, 300, false},
		{"hook, a short grace is raised to fit the minimum drain", ModeHook, nil, nil, new(int64(10)), 15 * time.Second, 20, true},
		{"hook, a short grace with a delay", ModeHook, nil, dur("10s"), new(int64(10)), 25 * time.Second, 30, true},
		{"hook, no grace, a long drain raises it from the default", ModeHook, dur("60s"), nil, nil, 60 * time.Second, 65, true},
		{"hook, a requested drain that fits keeps the grace", ModeHook, dur("20s"), nil, new(int64(120)), 20 * time.Second, 120, false},
		{"hook, a fraction of a second rounds the grace up", ModeHook, dur("20.5s"), nil, new(int64(10)), 20500 * time.Millisecond, 26, true},
		{"agent, no grace: run derives 30s less stop timeout less 2s", ModeAgent, nil, nil, nil, 23 * time.Second, 30, false},
		{"agent, a short grace is raised", ModeAgent, nil, nil, new(int64(15)), 15 * time.Second, 22, true},
		{"agent, a requested drain raises the grace", ModeAgent, dur("60s"), nil, new(int64(30)), 60 * time.Second, 67, true},
		{"sidecar uses the hook's margin", ModeSidecar, nil, nil, new(int64(45)), 40 * time.Second, 45, false},
		// Every grace period the API server accepts (any int64 >= 0): kept, the drain gets all a duration can hold.
		{"hook, the largest grace", ModeHook, nil, nil, new(int64(math.MaxInt64)), time.Duration(maxGraceSeconds-5) * time.Second, math.MaxInt64, false},
		{"hook, the largest grace less one", ModeHook, nil, nil, new(int64(math.MaxInt64 - 1)), time.Duration(maxGraceSeconds-5) * time.Second, math.MaxInt64 - 1, false},
		{"hook, the largest grace a duration holds", ModeHook, nil, nil, new(int64(9223372036)), (9223372036 - 5) * time.Second, 9223372036, false},
		{"hook, one second more", ModeHook, nil, nil, new(int64(9223372037)), (9223372036 - 5) * time.Second, 9223372037, false},
		{"agent, the largest grace", ModeAgent, nil, nil, new(int64(math.MaxInt64)), time.Duration(maxGraceSeconds-7) * time.Second, math.MaxInt64, false},
		{"hook, a requested drain within the largest grace", ModeHook, dur("60s"), nil, new(int64(math.MaxInt64)), 60 * time.Second, math.MaxInt64, false},
		{"hook, a requested drain of the longest duration", ModeHook, dur("2562047h47m11s"), nil, new(int64(30)), time.Duration(maxGraceSeconds-5) * time.Second, maxGraceSeconds, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := resolve(Config{Image: "x", Mode: tt.mode, Drain: Drain{Timeout: tt.timeout, Delay: tt.delay}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := planGrace(s, tt.current)
			want := gracePlan{timeout: tt.wantTimeout, grace: tt.wantGrace, change: tt.wantChange}
			if got != want {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestIsEnvoyImage(t *testing.T) {
	tests := []struct {
		image string
		want  bool
	}{
		{"envoyproxy/envoy:v1.40.0", true},
		{"envoyproxy/envoy", true},
		{"docker.io/envoyproxy/envoy-distroless:v1.40.0", true},
		{"registry.local:5000/mirror/envoy@sha256:abcd", true},
		{"envoy-contrib:dev", true},
		{"envoyproxy/gateway:v1.5.0", false},
		{"example.com/my-envoy:v1", false},
		{"registry.local:5000/envoyish:v1", false},
		{"nginx", false},
	}
	for _, tt := range tests {
		if got := isEnvoyImage(tt.image); got != tt.want {
			t.Errorf("isEnvoyImage(%q) = %v, want %v", tt.image, got, tt.want)
		}
	}
}

// TestUninjectKeepsLaterChanges: what the user changed after injection survives uninject.
func TestUninjectKeepsLaterChanges(t *testing.T) {
	meta := metav1.ObjectMeta{}
	spec := corev1.PodSpec{TerminationGracePeriodSeconds: new(int64(10)), Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.40.0"}}}
	if err := Inject(&meta, &spec, Config{Image: "sm:1"}); err != nil {
		t.Fatal(err)
	}
	if got := *spec.TerminationGracePeriodSeconds; got != 20 {
		t.Fatalf("grace after inject = %d, want 20", got)
	}
	userGrace := int64(90)
	spec.TerminationGracePeriodSeconds = &userGrace
	userHook := &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}
	spec.Containers[0].Lifecycle.PreStop = userHook
	if err := Uninject(&meta, &spec); err != nil {
		t.Fatal(err)
	}
	if got := *spec.TerminationGracePeriodSeconds; got != 90 {
		t.Errorf("grace after uninject = %d, want the user's 90", got)
	}
	if got := spec.Containers[0].Lifecycle; got == nil || got.PreStop == nil || got.PreStop.Sleep == nil || got.PreStop.Sleep.Seconds != 5 {
		t.Errorf("preStop after uninject = %+v, want the user's sleep", got)
	}
	if len(spec.InitContainers) != 0 || len(spec.Volumes) != 0 || meta.Annotations != nil {
		t.Errorf("left behind: init containers %v, volumes %v, annotations %v", spec.InitContainers, spec.Volumes, meta.Annotations)
	}
}

// TestInjectLeavesInputOnError: a refused pod is not half changed.
func TestInjectLeavesInputOnError(t *testing.T) {
	meta := metav1.ObjectMeta{}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy"}}}
	before := spec.DeepCopy()
	err := Inject(&meta, &spec, Config{Image: "sm:1", Mode: ModeAgent}) // no command, no args: refused
	if err == nil {
		t.Fatal("want an error for agent mode without a command line")
	}
	if spec.TerminationGracePeriodSeconds != nil || len(spec.InitContainers) != len(before.InitContainers) || meta.Annotations != nil {
		t.Errorf("pod changed on error: %+v", spec)
	}
}

func TestOptedOut(t *testing.T) {
	meta := metav1.ObjectMeta{Annotations: map[string]string{AnnotationInject: "false"}}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy"}}}
	if err := Inject(&meta, &spec, Config{Image: "sm:1"}); !errors.Is(err, ErrOptedOut) {
		t.Fatalf("got %v, want ErrOptedOut", err)
	}
}

// TestDeregistration: a load balancer's deregistration delay sizes a derived drain timeout (the delay, then
// the quiet period's longest silence: auto's 10 s, or a fixed one), never shortens a longer one, and leaves a
// requested --drain-timeout as it is; DeregistrationShortfall, from the pod's status, says when that timeout
// cannot hold the pod through the delay, with the settings that would.
func TestDeregistration(t *testing.T) {
	for _, tt := range []struct {
		name        string
		lb          time.Duration
		quiet       *time.Duration
		timeout     *time.Duration
		grace       int64
		wantTimeout time.Duration
		wantGrace   int64
		shortfall   string // "" = none
	}{
		{"auto quiet: 120s + 10s", 2 * time.Minute, nil, nil, 30, 130 * time.Second, 135, ""},
		{"a fixed quiet period: 60s + 3s", time.Minute, dur("3s"), nil, 10, 63 * time.Second, 68, ""},
		{"a longer grace period is used whole", 2 * time.Minute, nil, nil, 300, 295 * time.Second, 300, ""},
		{"agent mode's margin", 2 * time.Minute, nil, nil, 30, 130 * time.Second, 137, ""},
		{"a requested timeout shorter than the delay is kept", 2 * time.Minute, nil, dur("60s"), 30, 60 * time.Second, 65,
			"drain timeout 1m0s < the load balancer's deregistration delay 2m0s: the drain releases, and Envoy stops, while new connections may still come (want --drain-timeout 2m10s and a grace period of 135s, or no --drain-timeout: inject then sizes both)"},
		{"a requested timeout short of the silence after it", 2 * time.Minute, nil, dur("125s"), 30, 125 * time.Second, 130,
			"drain timeout 2m5s leaves 5s after the load balancer's deregistration delay 2m0s, less than the 10s of silence the quiet period may want (want --drain-timeout 2m10s and a grace period of 135s, or no --drain-timeout: inject then sizes both)"},
		{"a requested timeout that covers it", time.Minute, dur("3s"), dur("63s"), 30, 63 * time.Second, 68, ""},
		{"no quiet period: the floor alone holds", time.Minute, dur("0s"), nil, 30, time.Minute, 65,
			"quiet period 0s: the drain does not wait for new connections to stop, and its floor (drain delay + minimum drain duration: 5s) < the load balancer's deregistration delay 1m0s: Envoy stops while new connections may still come (want a quiet period, or --min-drain-duration 1m0s)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mode := ModeHook
			if strings.HasPrefix(tt.name, "agent") {
				mode = ModeAgent
			}
			cfg := Config{Image: "sm:1", Mode: mode, DeregistrationDelay: tt.lb, Drain: Drain{QuietPeriod: tt.quiet, Timeout: tt.timeout}}
			meta := metav1.ObjectMeta{Name: "envoy"}
			spec := corev1.PodSpec{TerminationGracePeriodSeconds: &tt.grace, Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.40.0", Args: []string{"-c", "/etc/envoy/envoy.yaml"}}}}
			if err := Inject(&meta, &spec, cfg); err != nil {
				t.Fatal(err)
			}
			st, _, err := ParseStatus(&meta)
			if err != nil {
				t.Fatal(err)
			}
			if st.DrainTimeout != tt.wantTimeout.String() || *spec.TerminationGracePeriodSeconds != tt.wantGrace {
				t.Errorf("drain timeout %s, grace period %d; want %s, %d", st.DrainTimeout, *spec.TerminationGracePeriodSeconds, tt.wantTimeout, tt.wantGrace)
			}
			if got := st.Settings["deregistration-delay"]; got != tt.lb.String() {
				t.Errorf("status settings[deregistration-delay] = %q, want %s", got, tt.lb)
			}
			if got := DeregistrationShortfall(st); got != tt.shortfall {
				t.Errorf("shortfall:\n got %q\nwant %q", got, tt.shortfall)
			}
		})
	}
	// No quiet period, but a floor as long as the delay: it holds the pod through it.
	floorMeta := metav1.ObjectMeta{Name: "envoy"}
	floorSpec := corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.40.0"}}}
	if err := Inject(&floorMeta, &floorSpec, Config{Image: "sm:1", DeregistrationDelay: 20 * time.Second,
		Drain: Drain{QuietPeriod: dur("0s"), MinDuration: dur("20s")}}); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := ParseStatus(&floorMeta); DeregistrationShortfall(st) != "" {
		t.Errorf("quiet period 0, floor 20s, delay 20s: shortfall %q, want none", DeregistrationShortfall(st))
	}
	// No delay given: nothing recorded, nothing to say.
	meta := metav1.ObjectMeta{Name: "envoy"}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.40.0"}}}
	if err := Inject(&meta, &spec, Config{Image: "sm:1", Drain: Drain{Timeout: dur("20s")}}); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := ParseStatus(&meta); st.Settings["deregistration-delay"] != "" || DeregistrationShortfall(st) != "" {
		t.Errorf("without a delay: settings %v, shortfall %q", st.Settings, DeregistrationShortfall(st))
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // "" = valid
	}{
		{"defaults", Config{Image: "sm:1"}, ""},
		{"no image", Config{}, "no image"},
		{"bad mode", Config{Image: "sm:1", Mode: "daemon"}, `mode: "daemon" is not one of hook, sidecar, agent`},
		{"bad binary source", Config{Image: "sm:1", BinaryFrom: "http"}, "binary source"},
		{"bad pull policy", Config{Image: "sm:1", ImagePullPolicy: "Sometimes"}, "image pull policy"},
		{"host name admin", Config{Image: "sm:1", AdminAddress: "http://localhost:9901"}, "admin address"},
		{"same ports", Config{Image: "sm:1", Port: 9090}, "both 9090"},
		{"timeout within the minimum", Config{Image: "sm:1", Drain: Drain{Timeout: dur("5s")}}, "must be longer"},
		{"bad regexp", Config{Image: "sm:1", Drain: Drain{ListenerExclude: []string{"("}}}, "listener exclude"},
		{"negative deregistration delay", Config{Image: "sm:1", DeregistrationDelay: -time.Second}, "deregistration delay -1s is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	meta := metav1.ObjectMeta{}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy", Args: []string{"-c", "/e.yaml"}}}}
	if _, ok, err := ParseStatus(&meta); ok || err != nil {
		t.Fatalf("a plain pod has a status: %v %v", ok, err)
	}
	if err := Inject(&meta, &spec, Config{Image: "sm:1", Version: "v9", Mode: ModeAgent}); err != nil {
		t.Fatal(err)
	}
	st, ok, err := ParseStatus(&meta)
	if !ok || err != nil {
		t.Fatalf("no status after inject: %v %v", ok, err)
	}
	want := Status{Version: "v9", Image: "sm:1", Mode: ModeAgent, BinaryFrom: BinaryCopy, EnvoyContainer: "envoy", DrainTimeout: "23s",
		InitContainers: []string{InstallContainer}, Volumes: []string{BinaryVolume}, Env: []string{podenv.Name, podenv.Namespace, podenv.UID}, CommandUnset: true,
		Settings: map[string]string{"envoy-command": "envoy"}}
	if !equality.Semantic.DeepEqual(st, want) {
		t.Errorf("got %+v, want %+v", st, want)
	}
	meta.Annotations[AnnotationStatus] = "{"
	if err := Uninject(&meta, &spec); err == nil || !strings.Contains(err.Error(), AnnotationStatus) {
		t.Errorf("a broken status annotation: got %v, want an error naming it", err)
	}
}

// TestAgentGracePeriodFlag: agent mode's --termination-grace-period is a duration `run` accepts (positive,
// within time.Duration) for every grace period the API server accepts, and Kubernetes' default when none.
func TestAgentGracePeriodFlag(t *testing.T) {
	for _, grace := range []int64{0, 1, 30, 300, 9223372036, 9223372037, math.MaxInt64 / 2, math.MaxInt64 - 1, math.MaxInt64} {
		meta := metav1.ObjectMeta{}
		spec := corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy", Args: []string{"-c", "/e.yaml"}}}}
		if err := Inject(&meta, &spec, Config{Image: "sm:1", Mode: ModeAgent}); err != nil {
			t.Fatalf("grace %d: %v", grace, err)
		}
		var flag string
		for _, a := range spec.Containers[0].Command {
			if v, ok := strings.CutPrefix(a, "--termination-grace-period="); ok {
				flag = v
			}
		}
		d, err := time.ParseDuration(flag)
		if err != nil || d <= agentMargin {
			t.Errorf("grace %d: --termination-grace-period=%s (%v), want a duration longer than the agent's margin", grace, flag, err)
		}
		if g := *spec.TerminationGracePeriodSeconds; g < grace {
			t.Errorf("grace %d lowered to %d", grace, g)
		}
	}
}

// TestReinjectRecordsEverySetting: for every row of DrainSettings, re-injecting an injected pod with another
// value changes the hook and the status annotation (which records the setting by name), and uninject gives back
// the pod as it was before the first injection, in every mode.
func TestReinjectRecordsEverySetting(t *testing.T) {
	for _, mode := range []Mode{ModeHook, ModeSidecar, ModeAgent} {
		for _, d := range DrainSettings {
			t.Run(string(mode)+"/"+d.Name, func(t *testing.T) {
				grace := int64(120)
				meta := metav1.ObjectMeta{Name: "edge", Annotations: map[string]string{"team": "edge"}}
				// Envoy's admin socket directory of the admin-address example is a volume: a sidecar reaches the
				// socket only through it (adminSocketMount).
				spec := corev1.PodSpec{TerminationGracePeriodSeconds: &grace,
					Volumes: []corev1.Volume{{Name: "envoy-admin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
					Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy", Command: []string{"envoy"}, Args: []string{"-c", "/e.yaml"},
						VolumeMounts: []corev1.VolumeMount{{Name: "envoy-admin", MountPath: "/var/run/envoy"}}}}}
				plainMeta, plainSpec := meta.DeepCopy(), spec.DeepCopy()

				cfg := Config{Image: "sm:1", Version: "v9", Mode: mode}
				if err := Inject(&meta, &spec, cfg); err != nil {
					t.Fatal(err)
				}
				before := meta.Annotations[AnnotationStatus]
				if err := d.Set(&cfg, d.Example); err != nil {
					t.Fatalf("example %q: %v", d.Example, err)
				}
				if err := Inject(&meta, &spec, cfg); err != nil {
					t.Fatal(err)
				}
				after := meta.Annotations[AnnotationStatus]
				if after == before {
					t.Errorf("re-injecting with --%s=%s left the status annotation byte-identical: %s", d.Name, d.Example, after)
				}
				st, _, err := ParseStatus(&meta)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Derived && st.Settings[d.Name] != d.Example {
					t.Errorf("status settings[%q] = %q, want %q (%s)", d.Name, st.Settings[d.Name], d.Example, after)
				}
				if d.Derived && st.DrainTimeout != d.Example {
					t.Errorf("status drainTimeout = %q, want %q", st.DrainTimeout, d.Example)
				}
				if !d.Derived && !slices.Contains(drainCommand(mode, &spec), "--"+d.DrainFlag()+"="+d.Example) {
					t.Errorf("the drain's command line %q has no --%s=%s", drainCommand(mode, &spec), d.DrainFlag(), d.Example)
				}
				if err := Uninject(&meta, &spec); err != nil {
					t.Fatal(err)
				}
				if !equality.Semantic.DeepEqual(meta, *plainMeta) || !equality.Semantic.DeepEqual(spec, *plainSpec) {
					t.Errorf("uninject after re-injecting did not give back the pod:\n%+v\n%+v\nwant\n%+v\n%+v", meta, spec, *plainMeta, *plainSpec)
				}
			})
		}
	}
}

// drainCommand is the command line that runs the drain in mode: Envoy's preStop hook, the sidecar's args, or
// Envoy's wrapped command.
func drainCommand(mode Mode, spec *corev1.PodSpec) []string {
	switch mode {
	case ModeSidecar:
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			if c.Name == SidecarContainer {
				return c.Args
			}
		}
		return nil
	case ModeAgent:
		return spec.Containers[0].Command
	}
	return spec.Containers[0].Lifecycle.PreStop.Exec.Command
}

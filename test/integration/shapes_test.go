package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/image"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// Issue 27 item 3: every injected shape reaches the admin it names. Each case injects a real manifest (Contour's
// DaemonSet with its unix-socket admin, Envoy Gateway's Deployment with TCP 127.0.0.1:19000 and its IPv6
// rendering [::1]:19000, deploy/plain/envoy.yaml with its TCP admin and with a unix-socket admin) with the real
// `shutdown-manager inject` in each mode, runs the pod's containers as written, each in its own mounts
// (pod_test.go), against the real Envoy listening where its container's bootstrap says, triggers the drain the
// way kubelet does (Envoy's preStop exec in Envoy's container; SIGTERM to agent mode's `run`), and asserts on
// Envoy itself: its health checks failing (/ready 503, /server_info DRAINING), the drain's outcome `drained`,
// exit 0. MARIN3R is not here: internal/peers has no MARIN3R manifests.

// shapesEnvoyVersion is the Envoy the shapes run on (the newest pinned line).
const shapesEnvoyVersion = "1.40.0"

// shapesInjectFlags are inject's own flags for a short drain: no delay, a 1 s floor (agent mode's test sees Envoy
// draining while `run` still runs), a short quiet period and timeout. The injected command is not edited.
var shapesInjectFlags = []string{"--image=ghcr.io/envoy-shutdown-manager/shutdown-manager:test", "--drain-delay=0s",
	"--min-drain-duration=1s", "--quiet-period=200ms", "--check-interval=100ms", "--drain-timeout=10s"}

// shape is one peer shape: a workload manifest, what fills its volumes (the files a ConfigMap, a Secret or an init
// container of the peer's would put there) and how the test reaches Envoy's admin from the host.
type shape struct {
	name     string
	manifest []byte
	takeover bool
	// injectArgs are inject's flags the shape is given (beside the mode and shapesInjectFlags).
	injectArgs []string
	fill       func(t *testing.T, p *testPod)
	// admin is the admin address from the host: "unix:" + the socket's path in its volume's directory, or a
	// TCP host:port.
	admin func(p *testPod) string
	// initializing: Envoy stays (PRE_)INITIALIZING here, waiting for a control plane that does not run (Envoy
	// Gateway's bootstrap: its xds_cluster's mTLS certificates and ADS, with initial_fetch_timeout 0s; certificates
	// are not given, there being no server to use them with). Its /server_info then never says
	// DRAINING (Envoy reports DRAINING only once initialized) and /ready answers 503 throughout: the evidence that
	// the drain reached its admin is the outcome drained, which needs Envoy's 200 to POST /healthcheck/fail.
	initializing bool
	// tcpPorts are the host ports Envoy listens on (the pod's network is the host's): free before the case runs.
	tcpPorts []string
}

func requireShapesRig(t *testing.T) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (mount, chroot, namespaces)")
	}
	for _, tool := range []string{"unshare", "nsenter", "chroot", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and the pod harness lacks: %s", strings.Join(missing, ", "))
	}
	t.Skipf("the pod harness needs: %s", strings.Join(missing, ", "))
}

// staticManager builds the binary as the pod image has it: the pod binary (cmd/shutdown-manager-pod), named
// shutdown-manager, CGO_ENABLED=0 (it runs in a root with no libraries), -trimpath, with its own build flags
// (image.Compile's, so that Go's build cache serves the packages the image builds compiled).
func staticManager(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "shutdown-manager")
	build := exec.Command("go", append(append([]string{"build", "-trimpath"}, image.PodBuildFlags...), "-o", out, "../../cmd/shutdown-manager-pod")...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the static shutdown-manager: %v: %s", err, b)
	}
	return out
}

// injector is the full CLI that injects the shapes: this tree's (cliBin), or with SHAPES_INJECT_WITH the
// shutdown-manager binary of another version — a previous release's, to run the pods it injected on this
// tree's pod binary (hooks keep their paths and arguments across versions).
func injector() string {
	if bin := os.Getenv("SHAPES_INJECT_WITH"); bin != "" {
		return bin
	}
	return cliBin
}

func TestInjectedShapes(t *testing.T) {
	requireShapesRig(t)
	envoyBin := shapesEnvoy(t)
	sm := staticManager(t)
	for _, s := range shapes(t) {
		for _, v := range shapeVariants {
			t.Run(s.name+"/"+v.name, func(t *testing.T) {
				runShape(t, s, v, envoyBin, sm, nil)
			})
		}
	}
}

// TestInjectedShapesUnmountedSocket is the shape of N1 before the fix: Contour's DaemonSet taken over in sidecar
// mode, the sidecar without Envoy's /admin volume. Its drain cannot reach the admin, so it must not end as a drain
// that passed (exit 0 with Envoy never failing its health checks): a wrong address never passes for a gone Envoy.
func TestInjectedShapesUnmountedSocket(t *testing.T) {
	requireShapesRig(t)
	envoyBin := shapesEnvoy(t)
	sm := staticManager(t)
	s := shapes(t)[0]
	runShape(t, s, shapeVariants[1], envoyBin, sm, func(spec *corev1.PodSpec) {
		for i := range spec.InitContainers {
			if c := &spec.InitContainers[i]; c.Name == inject.SidecarContainer {
				n := len(c.VolumeMounts)
				c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == "/admin" })
				if len(c.VolumeMounts) == n {
					t.Fatalf("the injected sidecar does not mount /admin: nothing to take away")
				}
			}
		}
	})
}

// shapeVariant is one way to inject: a mode, and inject's flags that change the injected shape.
type shapeVariant struct {
	name string
	mode inject.Mode
	args []string
}

// shapeVariants: every mode, and the sidecar with either hook (exec: `drain --via` the sidecar's unix socket; http:
// kubelet's httpGet on the sidecar's port, on the pod's network).
var shapeVariants = []shapeVariant{
	{"hook", inject.ModeHook, nil},
	{"sidecar", inject.ModeSidecar, nil},
	{"sidecar-http", inject.ModeSidecar, []string{"--hook=http"}},
	{"agent", inject.ModeAgent, nil},
}

func shapesEnvoy(t *testing.T) string {
	t.Helper()
	for _, b := range testbed.BinariesTB(t) {
		if b.Version == shapesEnvoyVersion {
			return b.Path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and no Envoy %s (make envoy)", shapesEnvoyVersion)
	}
	t.Skipf("no Envoy %s (make envoy)", shapesEnvoyVersion)
	return ""
}

// runShape injects s in mode, runs the pod, drains it as kubelet would and checks the drain on Envoy. edit, when
// not nil, changes the injected pod first (the negative case); it then expects the drain not to pass.
func runShape(t *testing.T, s shape, v shapeVariant, envoyBin, sm string, edit func(*corev1.PodSpec)) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	mode := v.mode
	ports := s.tcpPorts
	httpHook := slices.Contains(v.args, "--hook=http")
	if httpHook {
		ports = append(slices.Clone(ports), fmt.Sprintf(":%d", inject.DefaultPort), fmt.Sprintf(":%d", inject.DefaultMetricsPort))
	}
	for _, port := range ports {
		l, err := net.Listen("tcp", port)
		if err != nil {
			t.Fatalf("Envoy's port %s is busy on this host (the pod's network is the host's): %v", port, err)
		}
		l.Close()
	}
	dir, err := os.MkdirTemp("", "shape") // short: unix socket paths in it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The containers' mounts live in their own mount namespaces and go with them; only the directories stay,
		// kept for a failed case.
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	in := filepath.Join(dir, "in.yaml")
	if err := os.WriteFile(in, s.manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"inject", "--mode=" + string(mode), "-f", in}, shapesInjectFlags...)
	if s.takeover {
		args = append(args, "--takeover")
	}
	args = append(append(args, s.injectArgs...), v.args...)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, injector(), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("shutdown-manager %s: %v: %s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var w struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(stdout.Bytes(), &w); err != nil {
		t.Fatalf("the injected manifest: %v", err)
	}
	spec := &w.Spec.Template.Spec
	if edit != nil {
		edit(spec)
	}
	if err := os.WriteFile(filepath.Join(dir, "out.yaml"), stdout.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod in %s (out.yaml: the injected manifest; <container>.log: each container's output)", dir)

	p := newTestPod(t, dir, spec)
	s.fill(t, p)
	envoyImage := map[string]string{"/usr/local/bin/envoy": envoyBin,
		"/lib": "/usr/lib", "/lib64": "/usr/lib64", "/usr/lib": "/usr/lib", "/usr/lib64": "/usr/lib64"}
	smImage := map[string]string{"/shutdown-manager": sm}
	smEntrypoint := []string{"/shutdown-manager"}

	// Init containers in order: ours run to their end as written; the sidecar (a native one, an init container
	// with restartPolicy Always, or a plain one) starts before Envoy and stays. The peers' init containers
	// (Contour's `contour bootstrap`) are what fill stands for.
	for _, c := range spec.InitContainers {
		if c.Name == inject.InstallContainer {
			p.images[c.Name] = smImage
			p.run(ctx, c.Name, smEntrypoint)
		}
	}
	if mode == inject.ModeSidecar {
		p.images[inject.SidecarContainer] = smImage
		p.start(inject.SidecarContainer, smEntrypoint) // p.container fails the test when inject added none
	}
	p.images["envoy"] = envoyImage
	envoyProc := p.start("envoy", nil)

	admin := s.admin(p)
	client := adminHTTP(admin)
	wantStates := []string{"LIVE"}
	if s.initializing {
		wantStates = []string{"PRE_INITIALIZING", "INITIALIZING"}
	}
	if err := waitState(ctx, client, envoyProc.Exited(), wantStates...); err != nil {
		t.Fatalf("Envoy's admin at %s: %v: %s", admin, err, envoyProc.LogEnd(30))
	}
	if httpHook {
		// kubelet's httpGet goes to the pod's IP: here the host's loopback, which the pod's containers share.
		api := fmt.Sprintf("127.0.0.1:%d", inject.DefaultPort)
		if !pollUntil(ctx, nil, func() bool {
			c, err := net.Dial("tcp", api)
			if err == nil {
				c.Close()
			}
			return err == nil
		}) {
			t.Fatalf("the sidecar's API %s: %v", api, ctx.Err())
		}
	} else if mode == inject.ModeSidecar {
		// The exec hook talks to the sidecar's socket: wait until it serves (kubelet would not run a preStop
		// before the pod started; a native sidecar is started before Envoy).
		sock := filepath.Join(p.volume(inject.SocketVolume), "api.sock")
		if err := waitFile(ctx, sock); err != nil {
			t.Fatalf("the sidecar's socket %s: %v", sock, err)
		}
	}

	envoy := p.container("envoy")
	var code int
	var hookOut string
	sawDraining := false
	switch mode {
	case inject.ModeHook, inject.ModeSidecar:
		if httpHook {
			code, hookOut = httpGetHook(ctx, t, envoy)
		} else {
			if envoy.Lifecycle == nil || envoy.Lifecycle.PreStop == nil || envoy.Lifecycle.PreStop.Exec == nil {
				t.Fatalf("Envoy's container has no preStop exec: %+v", envoy.Lifecycle)
			}
			code, hookOut = p.execIn(ctx, "envoy", envoyProc, envoy.Lifecycle.PreStop.Exec.Command)
		}
		sawDraining = serverState(ctx, client) == "DRAINING"
		if sawDraining {
			if got := readyStatus(ctx, client); got != http.StatusServiceUnavailable {
				t.Errorf("Envoy's /ready after the hook: %d, want 503", got)
			}
		}
	case inject.ModeAgent:
		pid, err := initPID(envoyProc)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		sawDraining = watchDraining(ctx, client, envoyProc.Exited())
		select {
		case <-envoyProc.Exited():
		case <-ctx.Done():
			t.Fatalf("agent mode's run did not end: %v", ctx.Err())
		}
		code = envoyProc.Cmd.ProcessState.ExitCode()
	}
	write(t, filepath.Join(dir, "prestop.log"), hookOut)
	outcomes := drainOutcomes(t, filepath.Join(dir, "envoy.log"), filepath.Join(dir, inject.SidecarContainer+".log"), filepath.Join(dir, "prestop.log"))
	t.Logf("exit %d, Envoy DRAINING: %v, drain outcomes %v", code, sawDraining, outcomes)

	if edit != nil {
		// A drain that never reached Envoy must not pass: exit 0 only with Envoy's health checks failing.
		if code == 0 && !sawDraining {
			t.Errorf("the drain exited 0 (outcomes %v) but Envoy never failed its health checks: a drain that reached no admin passed", outcomes)
		}
		return
	}
	if code != 0 {
		t.Errorf("the drain exited %d, want 0: %s", code, hookOut)
	}
	if !sawDraining && !s.initializing {
		t.Errorf("Envoy's /server_info never said DRAINING: its health checks did not fail")
	}
	if len(outcomes) == 0 {
		t.Errorf("no drain finished line in the logs: %s", hookOut)
	}
	for _, o := range outcomes {
		if o != "drained" {
			t.Errorf("drain outcome %q, want drained", o)
		}
	}
}

// httpGetHook runs Envoy's preStop httpGet as kubelet does (on the pod's IP: here the host's loopback) and returns
// 0 for a 2xx answer (kubelet's success), else the status (or -1 without an answer), and the body.
func httpGetHook(ctx context.Context, t *testing.T, envoy *corev1.Container) (int, string) {
	t.Helper()
	if envoy.Lifecycle == nil || envoy.Lifecycle.PreStop == nil || envoy.Lifecycle.PreStop.HTTPGet == nil {
		t.Fatalf("Envoy's container has no preStop httpGet: %+v", envoy.Lifecycle)
	}
	h := envoy.Lifecycle.PreStop.HTTPGet
	if h.Port.Type != 0 {
		t.Fatalf("preStop httpGet port %s: a named port, not handled here", h.Port.String())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", h.Port.IntValue(), h.Path), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 == 2 {
		return 0, string(b)
	}
	return resp.StatusCode, string(b)
}

// adminHTTP is a client of Envoy's admin from the host: "unix:<path>" or a TCP host:port.
func adminHTTP(admin string) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true}
	if sock, ok := strings.CutPrefix(admin, "unix:"); ok {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
	} else {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", admin)
		}
	}
	return &http.Client{Transport: tr, Timeout: 2 * time.Second}
}

func adminGet(ctx context.Context, c *http.Client, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://admin"+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// serverState is /server_info's state, "" when the admin does not answer.
func serverState(ctx context.Context, c *http.Client) string {
	code, b, err := adminGet(ctx, c, "/server_info")
	if err != nil || code != http.StatusOK {
		return ""
	}
	var info struct{ State string }
	if json.Unmarshal(b, &info) != nil {
		return ""
	}
	return info.State
}

func readyStatus(ctx context.Context, c *http.Client) int {
	code, _, _ := adminGet(ctx, c, "/ready")
	return code
}

// pollUntil calls f every 50 ms until it is true or ctx or stop ends; it reports whether f became true.
func pollUntil(ctx context.Context, stop <-chan struct{}, f func() bool) bool {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if f() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-stop:
			return f()
		case <-tick.C:
		}
	}
}

// waitState waits until Envoy's /server_info says one of states.
func waitState(ctx context.Context, c *http.Client, exited <-chan struct{}, states ...string) error {
	last := ""
	if !pollUntil(ctx, exited, func() bool { last = serverState(ctx, c); return slices.Contains(states, last) }) {
		return fmt.Errorf("state %q, want one of %v (Envoy exited, or %v)", last, states, ctx.Err())
	}
	return nil
}

func waitFile(ctx context.Context, path string) error {
	if !pollUntil(ctx, nil, func() bool { _, err := os.Stat(path); return err == nil }) {
		return ctx.Err()
	}
	return nil
}

// watchDraining reports whether Envoy's /server_info says DRAINING before exited.
func watchDraining(ctx context.Context, c *http.Client, exited <-chan struct{}) bool {
	return pollUntil(ctx, exited, func() bool { return serverState(ctx, c) == "DRAINING" })
}

// drainOutcomes are the outcomes of the "drain finished" lines in the logs (JSON lines; a missing log has none).
func drainOutcomes(t *testing.T, logs ...string) []string {
	t.Helper()
	var out []string
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line struct{ Msg, Outcome string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "drain finished" {
				out = append(out, line.Outcome)
			}
		}
		f.Close()
	}
	return out
}

// shapes are the peer shapes, from their real manifests.
func shapes(t *testing.T) []shape {
	t.Helper()
	var out []shape
	for _, w := range peers.Of(t, "contour") {
		if w.Kind == "DaemonSet" && strings.Contains(w.Source, "examples/render/contour.yaml#") {
			out = append(out, shape{name: "contour-daemonset", manifest: w.YAML, takeover: true,
				fill: func(t *testing.T, p *testPod) {
					write(t, filepath.Join(p.volume("envoy-config"), "envoy.json"), contourShapeBootstrap)
				},
				admin: func(p *testPod) string { return "unix:" + filepath.Join(p.volume("envoy-admin"), "admin.sock") },
			})
			break
		}
	}
	if len(out) == 0 {
		t.Fatalf("no DaemonSet in Contour's examples/render/contour.yaml")
	}
	for _, w := range peers.Of(t, "envoy-gateway") {
		var name, admin string
		switch {
		case strings.HasSuffix(w.Source, "/deployments/default.yaml#1"):
			name, admin = "envoy-gateway-deployment", "127.0.0.1:19000"
		case strings.HasSuffix(w.Source, "/deployments/ipv6.yaml#1"):
			name, admin = "envoy-gateway-deployment-ipv6", "[::1]:19000"
		default:
			continue
		}
		out = append(out, shape{name: name, manifest: w.YAML, takeover: true,
			fill:         fillEnvoyGatewaySDS,
			initializing: true,
			admin:        func(*testPod) string { return admin },
			tcpPorts:     []string{admin, ":19001"},
		})
	}
	if len(out) != 3 {
		t.Fatalf("Envoy Gateway's deployments/default.yaml and ipv6.yaml not both found")
	}
	plain := readRepoFile(t, "deploy/plain/envoy.yaml")
	boot := plainBootstrap(t)
	out = append(out, shape{name: "plain-tcp", manifest: plain,
		fill:     func(t *testing.T, p *testPod) { write(t, filepath.Join(p.volume("config"), "envoy.yaml"), boot) },
		admin:    func(*testPod) string { return "127.0.0.1:9901" },
		tcpPorts: []string{"127.0.0.1:9901", ":8080", ":8081"},
	})
	// deploy/plain/envoy.yaml with its admin on a unix socket in an emptyDir of Envoy's (its root filesystem is
	// read-only), given to inject with --admin-address as docs/settings.md's example.
	unixBoot := strings.Replace(boot, "socket_address: {address: 127.0.0.1, port_value: 9901}", "pipe: {path: /var/run/envoy/admin.sock}", 1)
	if unixBoot == boot {
		t.Fatalf("deploy/common/envoy-config.yaml's admin is not 127.0.0.1:9901 any more")
	}
	plainUnix := bytes.Replace(plain, []byte("        volumeMounts:\n        - name: config\n"),
		[]byte("        volumeMounts:\n        - name: envoy-admin\n          mountPath: /var/run/envoy\n        - name: config\n"), 1)
	plainUnix = bytes.Replace(plainUnix, []byte("      volumes:\n"), []byte("      volumes:\n      - name: envoy-admin\n        emptyDir: {}\n"), 1)
	if bytes.Count(plainUnix, []byte("envoy-admin")) != 2 {
		t.Fatalf("deploy/plain/envoy.yaml's volumes changed shape: cannot add the admin socket's emptyDir")
	}
	out = append(out, shape{name: "plain-unix", manifest: plainUnix, injectArgs: []string{"--admin-address=unix:///var/run/envoy/admin.sock"},
		fill: func(t *testing.T, p *testPod) { write(t, filepath.Join(p.volume("config"), "envoy.yaml"), unixBoot) },
		admin: func(p *testPod) string {
			return "unix:" + filepath.Join(p.volume("envoy-admin"), "admin.sock")
		},
		tcpPorts: []string{":8080", ":8081"},
	})
	return out
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readRepoFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// plainBootstrap is deploy/common/envoy-config.yaml's envoy.yaml: the ConfigMap deploy/plain mounts.
func plainBootstrap(t *testing.T) string {
	t.Helper()
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(readRepoFile(t, "deploy/common/envoy-config.yaml"), &cm); err != nil {
		t.Fatal(err)
	}
	boot, ok := cm.Data["envoy.yaml"]
	if !ok {
		t.Fatalf("deploy/common/envoy-config.yaml has no envoy.yaml")
	}
	return boot
}

// fillEnvoyGatewaySDS writes the two files of Envoy Gateway's sds ConfigMap that its bootstrap's xds_cluster
// reads (path_config_source must exist), naming the certificates of its certs Secret as Envoy Gateway does.
func fillEnvoyGatewaySDS(t *testing.T, p *testPod) {
	t.Helper()
	sds := p.volume("sds")
	write(t, filepath.Join(sds, "xds-trusted-ca.json"), `{"resources":[{"@type":"type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret","name":"xds_trusted_ca","validation_context":{"trusted_ca":{"filename":"/certs/ca.crt"},"match_typed_subject_alt_names":[{"san_type":"DNS","matcher":{"exact":"envoy-gateway"}}]}}]}`)
	write(t, filepath.Join(sds, "xds-certificate.json"), `{"resources":[{"@type":"type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret","name":"xds_certificate","tls_certificate":{"certificate_chain":{"filename":"/certs/tls.crt"},"private_key":{"filename":"/certs/tls.key"}}}]}`)
}

// contourShapeBootstrap is the bootstrap `contour bootstrap` writes (Contour v1.33's internal/envoy/v3: the admin
// API on the unix socket /admin/admin.sock with mode 0644, the envoy-admin cluster to it, and the stats-health
// listener its xDS serves, routing GET /ready and /stats to the admin), without the xDS parts (no control plane
// runs here): written here, not by the `contour` binary, which the integration tests do not build. The listener's
// port is 0 (any free port): the host is shared with other tests; nothing here connects to it.
const contourShapeBootstrap = `{
  "admin": {
    "access_log": [{"name": "envoy.access_loggers.file", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog", "path": "/dev/null"}}],
    "address": {"pipe": {"path": "/admin/admin.sock", "mode": 420}}
  },
  "static_resources": {
    "listeners": [{
      "name": "stats-health",
      "address": {"socket_address": {"address": "0.0.0.0", "port_value": 0}},
      "filter_chains": [{"filters": [{
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
          "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
          "stat_prefix": "stats",
          "route_config": {"virtual_hosts": [{"name": "backend", "domains": ["*"], "routes": [
            {"match": {"prefix": "/ready"}, "route": {"cluster": "envoy-admin"}},
            {"match": {"prefix": "/stats"}, "route": {"cluster": "envoy-admin"}}
          ]}]},
          "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]
        }
      }]}]
    }],
    "clusters": [{
      "name": "envoy-admin",
      "type": "STATIC",
      "connect_timeout": "0.250s",
      "load_assignment": {"cluster_name": "envoy-admin", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"pipe": {"path": "/admin/admin.sock", "mode": 420}}}}]}]}
    }]
  }
}
`

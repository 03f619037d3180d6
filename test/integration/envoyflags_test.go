package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testpki"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// validated matches Envoy's last line when --mode validate accepts its command line and bootstrap.
var validated = regexp.MustCompile(`configuration '([^']*)' OK`)

// envoyValidates runs `envoy --mode validate` with args and tells whether Envoy accepted them, and the bootstrap
// file it read ("" for none).
func envoyValidates(t *testing.T, bin testbed.Binary, args []string) (ok bool, path string, out string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	b, _ := exec.CommandContext(ctx, bin.Path, append([]string{"--mode", "validate", "--disable-hot-restart"}, args...)...).CombinedOutput()
	m := validated.FindSubmatch(b)
	if m == nil {
		return false, "", string(b)
	}
	return true, string(m[1]), string(b)
}

// TestEnvoyCommandLineForms: on the real Envoy, each form of its command line is accepted by Envoy exactly when
// envoyadmin reads an admin address from it, and then from the file Envoy reads: the flag and its value in two
// arguments or in one (split at the first space), `--` ending the flags; refused: flag=value, -c=value,
// -cvalue, a flag twice, a switch with a value, a flag Envoy does not have, a placeholder --config-yaml.
func TestEnvoyCommandLineForms(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		dir := t.TempDir()
		a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
		for _, f := range []struct{ path, port string }{{a, "19101"}, {b, "19102"}} {
			boot := "admin: {address: {socket_address: {address: 127.0.0.1, port_value: " + f.port + "}}}\n"
			if err := os.WriteFile(f.path, []byte(boot), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		v6 := "admin:\n  address:\n    socket_address:\n      address: ::1\n      port_value: 19103\n"
		forms := [][]string{
			{"-c", a}, {"--config-path", a}, {"-c " + a}, {"--config-path " + a}, {"-c ", a}, {"--config-path ", a},
			{"--config-yaml", v6}, {"--config-yaml " + v6}, {"--config-yaml " + v6, "-c " + a}, {"-c", a, "--config-yaml", "node: {id: x}"},
			{"--service-cluster default", "--service-node $(ENVOY_POD_NAME)", "--config-yaml " + v6, "--log-level warn", "--cpuset-threads", "--drain-strategy immediate", "--drain-time-s 60"},
			{"-c", a, "--", "-c", b}, {"-c", a, "--ignore_rest", "anything"}, {"--stats-tag a:b", "--stats-tag", "c:d", "-c", a},
			{"-c", "", "--config-yaml", v6}, {"--service-node", "-c", "-c", a},

			{"-c=" + a}, {"--config-path=" + a}, {"--config-yaml=" + v6}, {"-c" + a}, {"-c", a, "-c", b}, {"-c", a, "--config-path", a},
			{"-c", a, "--disable-hot-restart x"}, {"-c", a, "--bogus"}, {"-c", a, "extra"}, {"--config-yaml", "test bootstrap config"},
			{"-c", a, "--config-yaml", "test bootstrap config"}, {"-c"}, {"--config-yaml", "-c", a}, {"-c", a, "--log-level\tinfo"},
			{"-- ", "-c", a}, {"--", "-c", a}, {"--config-path  " + a}, {"-c", a, "--help"},
		}
		accepted, refused := 0, 0
		for _, form := range forms {
			ok, path, out := envoyValidates(t, bin, form)
			addr, err := envoyadmin.AdminFromCommandLine(append([]string{"envoy"}, form...), os.ReadFile)
			switch {
			case ok != (err == nil):
				t.Errorf("%q: envoy accepts it: %v; envoyadmin: %v, %v\nenvoy: %.400s", form, ok, addr, err, lastLine(out))
			case ok:
				accepted++
				cl, _ := envoyadmin.ParseCommandLine(form)
				if cl.ConfigPath != path {
					t.Errorf("%q: envoy read the bootstrap file %q, envoyadmin %q", form, path, cl.ConfigPath)
				}
			default:
				refused++
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("%q: refusal on several lines: %q", form, err)
				}
			}
		}
		if accepted != 16 || refused != len(forms)-16 {
			t.Errorf("envoy accepted %d and refused %d forms; want 16 and %d", accepted, refused, len(forms)-16)
		}
	})
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// envoyOf is the pod template of a peer's rendering and the index of its Envoy container.
func envoyOf(t *testing.T, w peers.Workload) (*metav1.ObjectMeta, *corev1.PodSpec, int) {
	t.Helper()
	var tpl *corev1.PodTemplateSpec
	switch w.Kind {
	case "Deployment":
		var d appsv1.Deployment
		if err := yaml.Unmarshal(w.YAML, &d); err != nil {
			t.Fatal(err)
		}
		tpl = &d.Spec.Template
	case "DaemonSet":
		var d appsv1.DaemonSet
		if err := yaml.Unmarshal(w.YAML, &d); err != nil {
			t.Fatal(err)
		}
		tpl = &d.Spec.Template
	default:
		t.Fatalf("%s: kind %s", w.Source, w.Kind)
	}
	i := slices.IndexFunc(tpl.Spec.Containers, func(c corev1.Container) bool { return c.Name == "envoy" })
	return &tpl.ObjectMeta, &tpl.Spec, i
}

// takenOverAdmin takes over the rendering's pod and returns the admin address our drain was given, or the
// takeover's refusal.
func takenOverAdmin(t *testing.T, w peers.Workload) (string, error) {
	t.Helper()
	meta, spec, _ := envoyOf(t, w)
	if err := inject.Inject(meta, spec, inject.Config{Image: "x", Takeover: true}); err != nil {
		return "", err
	}
	envoy := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "envoy" }) // the peer's containers are gone
	for _, a := range spec.Containers[envoy].Lifecycle.PreStop.Exec.Command {
		if v, ok := strings.CutPrefix(a, "--admin-address="); ok {
			return v, nil
		}
	}
	t.Fatalf("%s: the taken-over preStop hook names no admin address", w.Source)
	return "", nil
}

// movedDirs are the directories of the files a peer's rendering gives Envoy (Envoy Gateway's SDS files under
// /sds/ and its service account token; Contour's bootstrap, certificates and admin socket), moved into a
// directory of the test's; filePath finds the files named there.
var (
	movedDirs = []string{"/sds/", "/var/run/secrets/", "/config/", "/certs/", "/admin/"}
	filePath  = regexp.MustCompile(`(?:path|filename): "?((?:/sds/|/var/run/secrets/)[\w./-]+)`)
)

var contourBootstrapLine = regexp.MustCompile(`(?m)^(\s+)- bootstrap$`)

// localRendering is the rendering with the files it names moved into dir (those Envoy Gateway's bootstrap reads
// written there: an SDS file a valid empty DiscoveryResponse, a token any text), and Envoy Gateway's admin port
// 19000 replaced by port when port is not 0.
func localRendering(t *testing.T, w peers.Workload, dir string, port int) peers.Workload {
	t.Helper()
	text := string(w.YAML)
	for _, m := range filePath.FindAllStringSubmatch(text, -1) {
		f := m[1]
		path := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		content := "token"
		if strings.HasSuffix(f, ".json") {
			content = `{"resources":[]}`
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range movedDirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, before := range []string{" ", "=", "path: ", `"`} {
			text = strings.ReplaceAll(text, before+d, before+dir+d)
		}
	}
	if port != 0 {
		text = strings.ReplaceAll(text, "port_value: 19000\n", "port_value: "+strconv.Itoa(port)+"\n")
	}
	// Contour's admin socket, /admin/admin.sock by default, is given to contour bootstrap in dir.
	text = contourBootstrapLine.ReplaceAllString(text, "$1- bootstrap\n$1- --admin-address="+dir+"/admin/admin.sock")
	w.YAML = []byte(text)
	return w
}

// envoyArgv is the Envoy container's command line as kubelet starts it (command, then args), the binary bin.
func envoyArgv(t *testing.T, w peers.Workload, bin string) []string {
	t.Helper()
	_, spec, i := envoyOf(t, w)
	c := spec.Containers[i]
	if len(c.Command) == 0 || filepath.Base(c.Command[0]) != "envoy" {
		t.Fatalf("%s: Envoy's command %q: want envoy", w.Source, c.Command)
	}
	return append([]string{bin}, slices.Concat(c.Command[1:], c.Args)...)
}

// TestPeerRenderingsEnvoy: the real Envoy validates the command line and inline bootstrap of every Envoy
// Gateway rendering of every version the Go module proxy serves exactly when the takeover reads an admin
// address from it (the others are refused: Envoy would not start on them either); Contour's are started below.
func TestPeerRenderingsEnvoy(t *testing.T) {
	ws := peers.EveryVersion(t)
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		dir := shortTempDir(t)
		seen := map[string]bool{}
		var accepted, refused int
		for _, w := range ws {
			if w.Peer != "envoy-gateway" {
				continue
			}
			local := localRendering(t, w, dir, 0)
			argv := envoyArgv(t, local, bin.Path)
			key := strings.Join(argv, "\x00")
			if seen[key] {
				continue
			}
			seen[key] = true
			ok, _, out := envoyValidates(t, bin, argv[1:])
			admin, err := takenOverAdmin(t, local)
			if ok != (err == nil) || ok == w.EnvoyRefuses() {
				t.Errorf("%s: envoy accepts it: %v; takeover: %q, %v\nenvoy: %.400s", w.Source, ok, admin, err, lastLine(out))
			}
			if ok {
				accepted++
			} else {
				refused++
			}
		}
		t.Logf("%d distinct Envoy command lines of Envoy Gateway: %d validated by envoy %s and read by the takeover, %d refused by both", len(seen), accepted, bin.Version, refused)
		if accepted == 0 || refused == 0 {
			t.Errorf("accepted %d, refused %d: want both", accepted, refused)
		}
	})
}

// freePort19000 is 19000 when nothing listens there on addr, else a free port.
func freePort19000(t *testing.T, host string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "19000"))
	if err == nil {
		l.Close()
		return 19000
	}
	l, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s: %v", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestPeerRenderingAdminAnswers runs the real Envoy with the very command line of Envoy Gateway v1.2.4's and
// v1.5.0's IPv6 renderings (each flag and its value in one argument; the admin on [::1]:19000), v1.9.1's IPv6 and
// default ones, and Contour's (its bootstrap written by the real `contour bootstrap` when scripts/kube-binaries.sh
// --contour has built it), and checks that the admin address the takeover derives from the pod answers
// /server_info there. Adapted for a test machine only: the files' directories, and the admin port when 19000 is
// taken.
func TestPeerRenderingAdminAnswers(t *testing.T) {
	ws := peers.EveryVersion(t)
	pick := func(suffix string) peers.Workload {
		for _, w := range ws {
			if strings.HasSuffix(w.Source, suffix) {
				return w
			}
		}
		t.Fatalf("no rendering %s", suffix)
		return peers.Workload{}
	}
	eg := "github.com/envoyproxy/gateway@"
	renderings := []peers.Workload{
		pick(eg + "v1.2.4/internal/infrastructure/kubernetes/proxy/testdata/deployments/ipv6.yaml#1"),
		pick(eg + "v1.5.0/internal/infrastructure/kubernetes/proxy/testdata/deployments/ipv6.yaml#1"),
		pick(eg + "v1.9.1/internal/infrastructure/kubernetes/proxy/testdata/deployments/ipv6.yaml#1"),
		pick(eg + "v1.2.4/internal/infrastructure/kubernetes/proxy/testdata/daemonsets/default.yaml#1"),
		pick(eg + "v1.9.1/internal/infrastructure/kubernetes/proxy/testdata/deployments/default.yaml#1"),
	}
	contour := contourBinary()
	if contour == "" && os.Getenv("CI") == "true" {
		// Under CI a missing real part is a failure, never a skip: build it (the script takes a lock, so this
		// waits for .ci/run's background build of the same binary instead of building it twice).
		if out, err := exec.Command("../../scripts/kube-binaries.sh", "--contour").CombinedOutput(); err != nil {
			t.Fatalf("building Contour's contour: %v\n%s", err, out)
		}
		contour = contourBinary()
	}
	for _, w := range ws {
		if w.Peer == "contour" && strings.Contains(w.Source, "@"+peers.ContourVersion+"/examples/render/contour.yaml#") {
			renderings = append(renderings, w)
			break
		}
	}
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		for _, w := range renderings {
			t.Run(w.Source, func(t *testing.T) {
				if w.Peer == "contour" && contour == "" {
					t.Skip("Contour's contour is not built (scripts/kube-binaries.sh --contour): its bootstrap cannot be written") // not under CI: built above
				}
				dir := shortTempDir(t)
				host := "127.0.0.1"
				if strings.Contains(w.Source, "ipv6") {
					host = "::1"
				}
				port := 0
				if w.Peer == "envoy-gateway" {
					if p := freePort19000(t, host); p != 19000 {
						port = p
					}
				}
				local := localRendering(t, w, dir, port)
				admin, err := takenOverAdmin(t, local)
				if err != nil {
					t.Fatal(err)
				}
				_, spec, _ := envoyOf(t, local)
				if w.Peer == "contour" {
					writeContourCerts(t, dir)
					runContourBootstrap(t, contour, spec)
					if !strings.HasPrefix(admin, "unix://"+dir+"/admin/") {
						t.Errorf("the derived admin %s is not contour bootstrap's socket in %s/admin", admin, dir)
					}
				}
				argv := envoyArgv(t, local, bin.Path)
				argv = append(argv, "--use-dynamic-base-id") // several Envoys on one machine; no flag of the rendering's changed
				envoy, err := testproc.Start(context.Background(), "envoy", exec.Command(argv[0], argv[1:]...), filepath.Join(dir, "envoy.log"))
				if err != nil {
					t.Fatal(err)
				}
				envoy.StopAtCleanup(t, 0)
				addr, err := envoyadmin.ParseAddress(admin)
				if err != nil {
					t.Fatal(err)
				}
				ctx := testContext(t)
				client := envoyadmin.New(addr, envoyadmin.Options{})
				state, err := poll(ctx, func() (envoyadmin.ServerState, error) {
					if !envoy.Running() {
						return "", fmt.Errorf("envoy exited: %s", envoy.Tail(5))
					}
					return client.ServerState(ctx)
				})
				if err != nil {
					t.Fatalf("the derived admin address %s does not answer /server_info: %v (envoy's log: %s)", admin, err, envoy.LogPath)
				}
				t.Logf("%s: derived admin %s answers /server_info: %s", w.Source, admin, state)

				// Discovery at drain time reads the same from the running Envoy's argv in /proc (hook and agent mode).
				cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", envoy.Cmd.Process.Pid))
				if err != nil {
					t.Fatal(err)
				}
				found, err := envoyadmin.AdminFromCommandLine(strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00"), os.ReadFile)
				if err != nil || found.String() != admin {
					t.Errorf("from envoy's /proc/PID/cmdline: %v, %v; want %s", found, err, admin)
				}
				if want := map[bool]string{true: "[::1]", false: "127.0.0.1"}[host == "::1"]; w.Peer == "envoy-gateway" && !strings.Contains(admin, want) {
					t.Errorf("the derived admin %s is not on %s", admin, want)
				}
			})
		}
	})
}

// contourBinary is the `contour` scripts/kube-binaries.sh --contour built, or "" when it has not.
func contourBinary() string {
	out, err := exec.Command("../../scripts/kube-binaries.sh", "--print-contour-dir").Output()
	if err != nil {
		return ""
	}
	bin := filepath.Join(strings.TrimSpace(string(out)), "contour")
	if _, err := os.Stat(bin); err != nil {
		return ""
	}
	return bin
}

// writeContourCerts writes the certificates Contour's rendering mounts at /certs (moved into dir).
func writeContourCerts(t *testing.T, dir string) {
	t.Helper()
	ca, err := testpki.NewCA("contour test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf(nil, "envoy")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"ca.crt": ca.PEM, "tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, "certs", name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// runContourBootstrap runs the rendering's `contour bootstrap` init container's command with the real contour.
func runContourBootstrap(t *testing.T, contour string, spec *corev1.PodSpec) {
	t.Helper()
	for _, c := range spec.InitContainers {
		w := slices.Concat(c.Command, c.Args)
		if len(w) >= 2 && filepath.Base(w[0]) == "contour" && w[1] == "bootstrap" {
			cmd := exec.Command(contour, w[1:]...)
			cmd.Env = append(os.Environ(), "CONTOUR_NAMESPACE=projectcontour")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("contour %q: %v\n%s", w[1:], err, out)
			}
			return
		}
	}
	t.Fatal("the rendering has no contour bootstrap init container")
}

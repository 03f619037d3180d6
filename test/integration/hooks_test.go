package integration

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// A hung admin API (accepts, never answers) is not a gone Envoy: the drain keeps its deadline and ends error.
func TestHungAdminIsNotEnvoyGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	p := start(t, "drain", "--admin-address", "http://"+ln.Addr().String(), "--min-drain-duration", "0s", "--quiet-period", "0s",
		"--drain-timeout", "3s", "--admin-timeout", "200ms")
	f := p.finished(t, 20*time.Second)
	if code := p.wait(t, 5*time.Second); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if f.Outcome != "error" || f.Duration < 3*time.Second {
		t.Errorf("outcome %q after %s (%s); want error at the 3s deadline", f.Outcome, f.Duration, f.Reason)
	}
}

// Envoy (re)starting while the drain is being refused is not mistaken for gone: once its admin API
// answers, the drain goes on and ends drained. The drain dials a symlink that appears only once Envoy is
// ready, so Envoy shows up to it mid-window as a restarted one does (and the test bed's own readiness check
// is not raced by the drain).
func TestEnvoyStartingDuringTheGoneWindow(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		dir := shortTempDir(t)
		link := filepath.Join(dir, "later.sock")
		p := start(t, append([]string{"drain", "--admin-address", "unix://" + link, "--envoy-gone-after", "60s"}, fast()...)...)
		p.waitLog(t, "failing envoy health checks failed; retrying", 10*time.Second)
		e := startEnvoy(t, bin, testbed.Options{AdminUnix: true, Dir: dir})
		if err := os.Symlink(filepath.Join(dir, "admin.sock"), link); err != nil {
			t.Fatal(err)
		}
		f := p.finished(t, 30*time.Second)
		if f.Outcome != "drained" {
			t.Errorf("outcome %q (%s), want drained", f.Outcome, f.Reason)
		}
		if st := envoyState(t, e); st != "DRAINING" {
			t.Errorf("envoy state %s after the drain, want DRAINING", st)
		}
	})
}

// The exec hook's log goes to the stdout of Envoy's process, found by process — not PID 1 blindly — so it
// shows in `kubectl logs` of Envoy's container; and the hook finds Envoy's admin address by itself. Each
// case runs Envoy in a PID namespace of its own, as a container runtime does, and the hook inside it.
func TestHookLogsToEnvoysStdout(t *testing.T) {
	requireRoot(t)
	cases := []struct {
		name string
		pid1 string // "" : Envoy is PID 1; "pause": a pause-like PID 1 whose stdout is /dev/null (shareProcessNamespace)
	}{
		{"envoy is PID 1", ""},
		{"pause is PID 1", "pause"},
	}
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				var stdout safeBuffer
				wrapper := []string{"unshare", "--pid", "--fork", "--mount-proc"}
				if tc.pid1 == "pause" {
					// PID 1 keeps /dev/null as stdout and waits; Envoy, its child, writes to the test's pipe.
					wrapper = append(wrapper, "sh", "-c", `exec 3>&1 1>/dev/null; "$0" "$@" 1>&3 3>&- & wait $!`)
				}
				e := startEnvoy(t, bin, testbed.Options{AdminUnix: true, Wrapper: wrapper, Stdout: &stdout})
				// No --admin-address: the hook reads it from Envoy's command line and bootstrap.
				out, err := inNamespace(t, e, "", append([]string{"drain", "--log-output=envoy"}, fast()...)...)
				if err != nil {
					t.Fatalf("hook failed: %v\n%s", err, out)
				}
				if strings.Contains(out, "drain finished") {
					t.Errorf("the hook's log went to its own output, not Envoy's stdout:\n%s", out)
				}
				log := stdout.String()
				for _, want := range []string{`"msg":"admin address: read from envoy's bootstrap"`, `"msg":"drain finished"`, `"outcome":"drained"`} {
					if !strings.Contains(log, want) {
						t.Errorf("envoy's stdout lacks %s:\n%s", want, log)
					}
				}
				if st := envoyState(t, e); st != "DRAINING" {
					t.Errorf("envoy state %s after the hook, want DRAINING", st)
				}
			})
		}
	})
}

// A hook whose log destination cannot be opened (PID 1 is another user's: the hook runs as nobody) still
// drains, and says so once on stderr; only a bad flag value is a usage error.
func TestHookDrainsWhenItsLogCannotBeOpened(t *testing.T) {
	requireRoot(t)
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{Wrapper: []string{"unshare", "--pid", "--fork", "--mount-proc"}})
		// As nobody, with no HOME, from / (the hook's surroundings in a locked-down pod).
		out, err := inNamespace(t, e, "65534", append([]string{"drain", "--log-output=pid1", "--admin-address", e.AdminURL}, fast()...)...)
		if err != nil {
			t.Fatalf("hook exited with %v, want 0 (drained):\n%s", err, out)
		}
		if !strings.Contains(out, "log destination unavailable") || !strings.Contains(out, `"outcome":"drained"`) {
			t.Errorf("want one warning then the drain's log on stderr:\n%s", out)
		}
		if st := envoyState(t, e); st != "DRAINING" {
			t.Errorf("envoy state %s after the hook, want DRAINING", st)
		}
	})
}

// inNamespace runs shutdown-manager with args inside the PID and mount namespaces of e (started with an
// unshare wrapper), as uid when not "", with an empty environment, and returns its combined output.
func inNamespace(t *testing.T, e *testbed.Envoy, uid string, args ...string) (string, error) {
	t.Helper()
	// unshare --fork runs the namespace's PID 1 as its child: that child's host PID names the namespaces.
	children, err := os.ReadFile("/proc/" + strconv.Itoa(e.Cmd.Process.Pid) + "/task/" + strconv.Itoa(e.Cmd.Process.Pid) + "/children")
	if err != nil || len(strings.Fields(string(children))) == 0 {
		t.Fatalf("finding the namespace's PID 1: %v (%q)", err, children)
	}
	nsArgs := []string{"--target", strings.Fields(string(children))[0], "--pid", "--mount", "--wd=/"}
	if uid != "" {
		nsArgs = append(nsArgs, "--setuid", uid, "--setgid", uid)
		// nobody must be able to run the binary: its build directory is private to root.
		if err := os.Chmod(filepath.Dir(smBin), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx := testContext(t)
	cmd := exec.CommandContext(ctx, "nsenter", append(append(nsArgs, "--", smBin), args...)...)
	cmd.Env = []string{} // no HOME, no PATH, no TMPDIR
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func requireRoot(t *testing.T) {
	t.Helper()
	_, errU := exec.LookPath("unshare")
	_, errN := exec.LookPath("nsenter")
	if os.Geteuid() == 0 && errU == nil && errN == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test needs root, unshare and nsenter (util-linux) to run Envoy in a PID namespace of its own")
	}
	t.Skip("needs root, unshare and nsenter")
}

// closedPort is a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A second SIGTERM to serve while its drain holds waiters: the drain is canceled with a true reason, the
// waiters are answered 503 with it before the API closes, and serve exits 1 (it left before its drain released).
// A SIGINT to drain says the same of itself.
func TestSecondSignalCancelsWithATrueReason(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		holdTCP(ctx, t, e, 50*time.Second)

		t.Run("serve", func(t *testing.T) {
			p, a := serve(t, e, fast("--min-drain-duration", "0s", "--quiet-period", "0s")...)
			shutdown := make(chan string, 1)
			go func() { code, body, _ := a.get(ctx, "/shutdown"); shutdown <- strconv.Itoa(code) + " " + body }()
			a.waitStatus(t, 10*time.Second, func(s status) bool { return s.State == "waiting" && s.Open == 1 })
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			p.waitLog(t, "waiting for the drain to release", 5*time.Second)
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			got := <-shutdown
			if !strings.HasPrefix(got, "503 canceled: canceled by SIGTERM after ") || !strings.Contains(got, "with 1 in flight") {
				t.Errorf("waiting /shutdown answered %q, want 503 canceled by SIGTERM with 1 in flight", got)
			}
			if code := p.wait(t, 10*time.Second); code != 1 {
				t.Errorf("serve exit code %d, want 1", code)
			}
		})
		t.Run("drain", func(t *testing.T) {
			p := start(t, append([]string{"drain", "--admin-address", e.AdminURL}, fast("--min-drain-duration", "0s", "--quiet-period", "0s")...)...)
			p.waitLog(t, "envoy health checks failing", 10*time.Second)
			if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			f := p.finished(t, 10*time.Second)
			if f.Outcome != "canceled" || !strings.HasPrefix(f.Reason, "canceled by SIGINT after ") || strings.Contains(f.Reason, "deadline") {
				t.Errorf("outcome %q reason %q, want canceled by SIGINT", f.Outcome, f.Reason)
			}
			if code := p.wait(t, 5*time.Second); code != 1 {
				t.Errorf("drain exit code %d, want 1", code)
			}
		})
	})
}

// A sidecar restarted in the middle of a drain shows Envoy's real state in /status (DRAINING), with the
// count unknown (null), instead of "idle" with "open: 0"; and it does not drain again by itself.
func TestStatusAfterRestartMidDrain(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := testContext(t)
		holdTCP(ctx, t, e, 50*time.Second)

		p, a := serve(t, e, fast("--min-drain-duration", "0s", "--quiet-period", "0s")...)
		go a.get(ctx, "/shutdown")
		a.waitStatus(t, 10*time.Second, func(s status) bool { return s.State == "waiting" && s.Open == 1 })
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		p.wait(t, 5*time.Second)

		_, a2 := serve(t, e, fast()...)
		code, body, err := a2.get(ctx, "/status")
		if err != nil || code != 200 {
			t.Fatalf("/status = %d %v", code, err)
		}
		var st struct {
			State      string `json:"state"`
			Open       *int64 `json:"open"`
			EnvoyState string `json:"envoy_state"`
			Listeners  []any  `json:"listeners"`
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		if st.State != "idle" || st.EnvoyState != "DRAINING" || st.Open != nil || st.Listeners == nil {
			t.Errorf("/status after a restart mid-drain = %s; want state idle, envoy_state DRAINING, open null, listeners []", body)
		}
	})
}

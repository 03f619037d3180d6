package integration

import (
	"bytes"
	"errors"
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
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// agent starts Envoy under `shutdown-manager run FLAGS --`; the admin address comes from the bootstrap
// (a unix socket). It returns the Envoy (whose Cmd is the manager) and Envoy's own PID.
func agent(t *testing.T, bin testbed.Binary, flags ...string) (*testbed.Envoy, int) {
	t.Helper()
	return agentEnv(t, bin, nil, flags...)
}

// agentEnv is agent with env ("NAME=value") added to the manager's environment, which Envoy inherits.
func agentEnv(t *testing.T, bin testbed.Binary, env []string, flags ...string) (*testbed.Envoy, int) {
	t.Helper()
	wrapper := append(append([]string{smBin, "run", "--log-level", "debug"}, flags...), "--")
	if len(env) > 0 {
		wrapper = append(append([]string{"env"}, env...), wrapper...) // env execs the manager: the same process
	}
	e := startEnvoy(t, bin, testbed.Options{AdminUnix: true, Wrapper: wrapper})
	kids := children(e.Cmd.Process.Pid)
	if len(kids) != 1 {
		t.Fatalf("the manager has children %v, want exactly envoy", kids)
	}
	t.Cleanup(func() { assertGone(t, append(kids, e.Cmd.Process.Pid)...) })
	return e, kids[0]
}

// exitOf waits for the manager to exit, for at most d, and returns its exit code and how long it took.
func exitOf(t *testing.T, e *testbed.Envoy, d time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	select {
	case <-e.Exited():
	case <-time.After(d):
		t.Fatalf("the manager did not exit within %s", d)
	}
	return e.Cmd.ProcessState.ExitCode(), time.Since(start)
}

// SIGTERM under load: the manager drains, stops Envoy, and exits 0; no client request fails.
func TestAgentSIGTERMUnderLoad(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e, _ := agent(t, bin, "--min-drain-duration", "1s", "--quiet-period", "0s", "--check-interval", "100ms", "--drain-timeout", "30s")
		ctx := testContext(t)
		loads := []*testbed.Load{
			testbed.KeepAlive(ctx, e.HTTPAddr, 4, 10*time.Millisecond, "/"),
			testbed.HTTP2(ctx, e.HTTPAddr, 2, "/sleep?d=100ms"),
			testbed.KeepAlive(ctx, e.HTTPAddr, 3, 0, "/sleep?d=2s"),
		}
		waitInFlight(t, e, 3)
		if err := e.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		// Endpoint removal reaches the clients within the minimum drain duration; they stop sending.
		time.Sleep(500 * time.Millisecond)
		var wg sync.WaitGroup
		for _, l := range loads {
			wg.Go(l.Drain)
		}
		wg.Wait()
		code, _ := exitOf(t, e, 30*time.Second)
		if code != 0 {
			t.Errorf("manager exit code %d, want 0 (envoy quit cleanly)", code)
		}
		for _, l := range loads {
			if r := l.Wait(); r.Failed != 0 || r.OK == 0 {
				t.Errorf("clients: %s; want no failure", r)
			}
		}
		log := readLog(t, e)
		for _, want := range []string{`"msg":"signal received; draining envoy"`, `"msg":"drain trigger","method":"signal SIGTERM"`, `"outcome":"drained"`, `"msg":"envoy stopped; exiting with its status","by":"quit"`} {
			if !strings.Contains(log, want) {
				t.Errorf("manager log lacks %s", want)
			}
		}
	})
}

// `run --listen` serves the API: /shutdown drains without a signal, then the manager stops Envoy and exits 0.
func TestAgentShutdownEndpoint(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		sock := "unix://" + filepath.Join(shortTempDir(t), "api.sock")
		e, _ := agent(t, bin, "--listen", sock, "--min-drain-duration", "500ms", "--quiet-period", "0s", "--check-interval", "100ms")
		ctx := testContext(t)
		long := testbed.Long(ctx, e.HTTPAddr, 1, 2*time.Second)
		waitInFlight(t, e, 1)
		code, body, err := newAPI(sock).get(ctx, "/shutdown")
		if err != nil || code != 200 || !strings.HasPrefix(body, "drained") {
			t.Fatalf("/shutdown = %d %q %v, want 200 drained", code, body, err)
		}
		if r := long.Wait(); r.OK != 1 {
			t.Errorf("long request: %s", r)
		}
		if code, _ := exitOf(t, e, 15*time.Second); code != 0 {
			t.Errorf("manager exit code %d, want 0", code)
		}
	})
}

// Envoy SIGKILLed by someone else: the manager exits at once with 137 and says envoy died.
func TestAgentEnvoyKilled(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e, envoyPID := agent(t, bin)
		if err := syscall.Kill(envoyPID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		code, took := exitOf(t, e, 10*time.Second)
		if code != 137 {
			t.Errorf("manager exit code %d, want 137", code)
		}
		if took > 2*time.Second {
			t.Errorf("manager exited %s after envoy died, want at once", took)
		}
		if log := readLog(t, e); !strings.Contains(log, `"msg":"envoy exited by itself; exiting with its status","status":"killed by signal killed (9)"`) {
			t.Errorf("manager log does not say envoy died:\n%s", testproc.LastLines(log, 5))
		}
	})
}

// A connection that never closes: the manager exits at the drain deadline plus the stop, not later.
func TestAgentDeadlineWithStuckConnection(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e, _ := agent(t, bin, "--min-drain-duration", "500ms", "--quiet-period", "0s", "--check-interval", "100ms", "--drain-timeout", "2s", "--stop-timeout", "5s")
		ctx := testContext(t)
		holdTCP(ctx, t, e, 45*time.Second)
		if err := e.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		code, took := exitOf(t, e, 20*time.Second)
		if code != 0 {
			t.Errorf("manager exit code %d, want 0", code)
		}
		// Deadline 2s, then /quitquitquit ends Envoy at once (on a busy machine it took over a second: 5s of
		// stop-timeout keep that from SIGKILL, 137); at most the stop-timeout more.
		if took < 2*time.Second || took > 7*time.Second+500*time.Millisecond {
			t.Errorf("manager exited %s after SIGTERM, want at the 2s deadline plus at most the 5s stop", took)
		}
		if log := readLog(t, e); !strings.Contains(log, `"outcome":"timeout"`) || !strings.Contains(log, `"drain_outcome":"timeout"`) {
			t.Errorf("manager log does not report the timeout:\n%s", testproc.LastLines(log, 6))
		}
	})
}

// Envoy with a bad config: the manager exits with Envoy's own status, and Envoy's error is visible.
func TestAgentBadConfig(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		dir := shortTempDir(t)
		cfg := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(cfg, []byte("admin: {address: {pipe: {path: "+dir+"/admin.sock}}}\nstatic_resources: {listeners: [{name: broken, address: {}}]}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		envoyArgs := []string{bin.Path, "-c", cfg, "--disable-hot-restart"}
		direct := exec.Command(envoyArgs[0], envoyArgs[1:]...)
		_ = direct.Run()
		want := direct.ProcessState.ExitCode()
		if want == 0 {
			t.Fatal("envoy accepted the bad config")
		}

		var stderr bytes.Buffer
		cmd := exec.Command(smBin, append([]string{"run", "--"}, envoyArgs...)...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != want {
			t.Fatalf("manager: %v, want exit code %d (envoy's)", err, want)
		}
		out := stderr.String()
		if !strings.Contains(out, "critical") && !strings.Contains(out, "error") {
			t.Errorf("envoy's error is not visible in the output:\n%s", testproc.LastLines(out, 10))
		}
		if !strings.Contains(out, `envoy exited by itself`) {
			t.Errorf("manager does not say envoy exited:\n%s", testproc.LastLines(out, 5))
		}
	})
}

// Signals are forwarded to the child, orphans re-parented to the manager are reaped, and a second SIGTERM
// skips the rest of the drain. The child is a small shell script: Envoy cannot show these.
func TestAgentSignalsAndOrphans(t *testing.T) {
	dir := shortTempDir(t)
	script := `trap 'echo got-HUP' HUP; trap 'echo got-USR1' USR1; trap 'echo got-USR2' USR2
(sleep 0.2 &)
echo ready
while :; do sleep 0.05; done`
	var stdout safeBuffer
	cmd := exec.Command(smBin, "run", "--log-level", "debug", "--admin-address", "unix://"+dir+"/none.sock",
		"--min-drain-duration", "0s", "--quiet-period", "0s", "--drain-timeout", "30s", "--stop-timeout", "1s", "--", "sh", "-c", script)
	cmd.Stdout = &stdout
	var stderr safeBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed when Wait has returned waitErr
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("the manager's output is still held open 10s after it was killed: a child outlived it")
		}
		if t.Failed() {
			t.Logf("manager stderr:\n%s\nstdout:\n%s", stderr.String(), stdout.String())
		}
	})
	waitFor(t, "the child to start", func() bool { return strings.Contains(stdout.String(), "ready") })
	kids := children(cmd.Process.Pid)
	t.Cleanup(func() { assertGone(t, kids...) })

	waitFor(t, "the orphan to be reaped", func() bool { return strings.Contains(stderr.String(), `"msg":"reaped orphaned process"`) })
	if z := zombies(cmd.Process.Pid); len(z) > 0 {
		t.Errorf("zombie children of the manager: %v", z)
	}
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2} {
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		want := "got-" + strings.TrimPrefix(unixSignalName(sig), "SIG")
		waitFor(t, "the child to get "+want, func() bool { return strings.Contains(stdout.String(), want) })
	}

	// Nothing at the admin address: the drain would retry until its 30s deadline. A second SIGTERM stops now.
	cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "the drain to start", func() bool { return strings.Contains(stderr.String(), `"msg":"drain started"`) })
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the manager did not exit after a second SIGTERM")
	}
	var ee *exec.ExitError
	if err := waitErr; !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("manager: %v, want exit code 143 (the child died of SIGTERM after quit failed)", waitErr)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("manager took %s after the second SIGTERM", took)
	}
	if !strings.Contains(stderr.String(), "second signal: skipping the rest of the drain") {
		t.Errorf("manager log lacks the second-signal line")
	}
}

// children lists the PIDs of pid's children.
func children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// zombies lists pid's children that have exited and not been reaped.
func zombies(pid int) []int {
	var out []int
	for _, c := range children(pid) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(c) + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 && strings.HasPrefix(s[i+1:], " Z") {
			out = append(out, c)
		}
	}
	return out
}

// assertGone fails the test if any of the processes still exists (as a process or a zombie).
func assertGone(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
				t.Errorf("process %d (%s) left behind", pid, strings.ReplaceAll(string(b), "\x00", " "))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func readLog(t *testing.T, e *testbed.Envoy) string {
	t.Helper()
	b, err := os.ReadFile(e.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitFor polls cond every 10ms for at most 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func unixSignalName(s syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGHUP: "SIGHUP", syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2"}[s]
}

// safeBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

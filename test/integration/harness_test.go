// Package integration runs the real shutdown-manager binary against real Envoy releases (every binary
// testbed.FindBinaries finds: the lines test/envoy-versions.txt pins, after `make envoy`), with real clients over loopback.
package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/image"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// smBin is the binary under test, built by TestMain: the pod binary (cmd/shutdown-manager-pod), what Envoy's pods
// run. cliBin is the full CLI (cmd/shutdown-manager), for the commands only it has (inject).
var smBin, cliBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sm-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go meterStalls()
	smBin = filepath.Join(dir, "shutdown-manager")
	cliBin = filepath.Join(dir, "cli", "shutdown-manager")
	for _, b := range []struct {
		out, pkg string
		flags    []string
	}{{smBin, "../../cmd/shutdown-manager-pod", image.PodBuildFlags}, {cliBin, "../../cmd/shutdown-manager", nil}} {
		build := exec.Command("go", append(append([]string{"build", "-race"}, b.flags...), "-o", b.out, b.pkg)...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", b.pkg+":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// forEachEnvoy runs f as a subtest for every Envoy binary of the whole suite (the oldest and the newest line of
// test/envoy-versions.txt). Without one, the test fails under CI=true and is skipped elsewhere: CI must never pass
// by not testing.
func forEachEnvoy(t *testing.T, f func(t *testing.T, bin testbed.Binary)) {
	t.Helper()
	eachEnvoy(t, testbed.ScopeSuite, f)
}

// forEachEnvoyLine runs f as a subtest for every pinned Envoy line, the ones between the oldest and the newest
// too: the count and drain tests, whose facts (stat names, drain behaviour) change from line to line.
func forEachEnvoyLine(t *testing.T, f func(t *testing.T, bin testbed.Binary)) {
	t.Helper()
	eachEnvoy(t, testbed.ScopeCore, f)
}

func eachEnvoy(t *testing.T, scope string, f func(t *testing.T, bin testbed.Binary)) {
	t.Helper()
	for _, bin := range testbed.BinariesTB(t) {
		if scope == testbed.ScopeSuite && bin.Scope != testbed.ScopeSuite {
			continue
		}
		t.Run("envoy-"+bin.Version, func(t *testing.T) { f(t, bin) })
	}
}

// startEnvoy starts an upstream and an Envoy in front of it (testbed.StartTB); both stop in the test's cleanup,
// Envoy after every cleanup registered later.
func startEnvoy(t *testing.T, bin testbed.Binary, opts testbed.Options) *testbed.Envoy {
	t.Helper()
	return testbed.StartTB(t, bin, testbed.StartUpstreamTB(t), opts)
}

// testTimeout bounds what a test waits for that has no deadline of its own (a /shutdown that never answers, a
// load, a command): a hang fails the test within a minute instead of at go test's -timeout.
const testTimeout = time.Minute

// testContext returns t.Context() ended after testTimeout.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// shortTempDir is a temporary directory with a path short enough for unix sockets.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// fast are drain flags that keep tests short; each test adds what it is about. The quiet period is off
// (its default, 3s, would hold every drain with traffic 3s past its last request): quiet_test.go tests it.
func fast(extra ...string) []string {
	return append([]string{"--min-drain-duration", "1s", "--quiet-period", "0s", "--check-interval", "100ms", "--drain-timeout", "30s", "--log-level", "debug"}, extra...)
}

// logLine is one JSON log line of shutdown-manager.
type logLine map[string]any

func (l logLine) str(k string) string { s, _ := l[k].(string); return s }

// proc is a running shutdown-manager whose JSON log is collected.
type proc struct {
	cmd     *exec.Cmd
	mu      sync.Mutex
	lines   []logLine
	raw     bytes.Buffer
	newLine chan struct{} // closed and replaced on every line
	exited  chan struct{}
	exitAt  time.Time
	code    int
	waited  atomic.Int64 // nanoseconds its threads were runnable but not running (sampleCPUWait)
	begun   stallMark    // at its start
}

// start runs shutdown-manager with args; it is killed at the end of the test if still running.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, args...)
}

// startEnv is start with env ("NAME=value") added to the test's environment.
func startEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startIn(t, env, nil, args...)
}

// startIn is startEnv run by wrapper (such as unshare; it must kill shutdown-manager when killed itself).
func startIn(t *testing.T, env, wrapper []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(smBin, args...)
	if len(wrapper) > 0 {
		cmd = exec.Command(wrapper[0], append(append(wrapper[1:len(wrapper):len(wrapper)], smBin), args...)...)
	}
	p := &proc{cmd: cmd, newLine: make(chan struct{}), exited: make(chan struct{})}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = io.Discard
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.begun = p.mark()
	go p.sampleCPUWait()
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var l logLine
			_ = json.Unmarshal(sc.Bytes(), &l)
			p.mu.Lock()
			p.raw.Write(sc.Bytes())
			p.raw.WriteByte('\n')
			if l != nil {
				p.lines = append(p.lines, l)
			}
			close(p.newLine)
			p.newLine = make(chan struct{})
			p.mu.Unlock()
		}
		err := p.cmd.Wait()
		p.mu.Lock()
		p.exitAt = time.Now()
		p.code = p.cmd.ProcessState.ExitCode()
		if err != nil && p.code < 0 {
			p.code = -1
		}
		p.mu.Unlock()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("shutdown-manager %s log:\n%s", args[0], p.log())
		}
	})
	return p
}

// sampleCPUWait reads, every 50 ms until p exits, how long p's threads have waited for a CPU (runnable, not
// running): the second field of /proc/<pid>/task/*/schedstat, summed over the threads.
func (p *proc) sampleCPUWait() {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	dir := fmt.Sprintf("/proc/%d/task", p.cmd.Process.Pid)
	for {
		select {
		case <-p.exited:
			return
		case <-tick.C:
		}
		stats, _ := filepath.Glob(filepath.Join(dir, "*", "schedstat"))
		var sum int64
		for _, f := range stats {
			b, err := os.ReadFile(f)
			var run, wait int64
			if err == nil {
				if _, err := fmt.Sscan(string(b), &run, &wait); err == nil {
					sum += wait
				}
			}
		}
		if sum > p.waited.Load() { // a thread that ended takes its share with it: keep the most seen
			p.waited.Store(sum)
		}
	}
}

// stalled is how late a 10 ms timer of this test process has fired, summed since TestMain (only lateness past
// 5 ms counts): what the machine (its CPUs, its memory, the host under the VM) took from every process on it.
var stalled atomic.Int64

// meterStalls adds to stalled until the test binary exits.
func meterStalls() {
	const tick, noise = 10 * time.Millisecond, 5 * time.Millisecond
	last := time.Now()
	for {
		time.Sleep(tick)
		now := time.Now()
		if late := now.Sub(last) - tick; late > noise {
			stalled.Add(int64(late))
		}
		last = now
	}
}

// stallMark is a moment's reading of what delays a process's timers for no fault of its own: how long it has
// waited for a CPU (runnable, not running: /proc/<pid>/task/*/schedstat, summed over its threads, at most 50 ms
// old; zero where /proc has no schedstat), how late this test process's own timer has been (stalled), and how long
// some task of the machine waited on its disk or its memory (/proc/pressure/{io,memory}'s "some" total; zero
// without pressure stall information): a page of the binary read back from a busy disk stops it too.
type stallMark struct{ cpuWait, machine, pressure time.Duration }

// mark is p's stallMark now.
func (p *proc) mark() stallMark {
	return stallMark{time.Duration(p.waited.Load()), time.Duration(stalled.Load()), pressureStall("io") + pressureStall("memory")}
}

// pressureStall is /proc/pressure/<resource>'s "some" total: how long at least one task waited on it.
func pressureStall(resource string) time.Duration {
	b, err := os.ReadFile("/proc/pressure/" + resource)
	if err != nil {
		return 0
	}
	var avg10, avg60, avg300 float64
	var total int64
	if _, err := fmt.Sscanf(string(b), "some avg10=%f avg60=%f avg300=%f total=%d", &avg10, &avg60, &avg300, &total); err != nil {
		return 0
	}
	return time.Duration(total) * time.Microsecond
}

// stalledSince is how long p may have been kept from running since m: its wait for a CPU plus the machine's
// stalls and its tasks' waits on disk and memory.
func (p *proc) stalledSince(m stallMark) time.Duration {
	now := p.mark()
	return now.cpuWait - m.cpuWait + now.machine - m.machine + now.pressure - m.pressure
}

// releasedByDeadline fails t unless f, a drain that began at mark m, ended at its deadline: not before it, and at
// most slack after it plus what kept the process from running meanwhile (stalledSince). A drain that ignored its
// deadline is held by the work in flight (far longer in these tests); a starved machine delays every timer of the
// process, the deadline's too: in a busy CI run a drain (9 polls of 100 ms in 5.1 s: it barely ran) released 3.1 s
// late. (The engine's own tests, internal/drain, check the deadline to the nanosecond on a fake clock; here it is
// the real binary on a real Envoy.)
func releasedByDeadline(t *testing.T, p *proc, f finished, deadline, slack time.Duration, m stallMark) {
	t.Helper()
	stall := p.stalledSince(m)
	if f.Outcome != string(drain.OutcomeTimeout) || f.Duration < deadline || f.Duration > deadline+slack+stall {
		t.Errorf("outcome %q after %s (%s); want timeout at the %s deadline, within %s of it plus the %s the "+
			"process was kept from running", f.Outcome, f.Duration, f.Reason, deadline, slack, stall.Round(time.Millisecond))
	} else if stall > 100*time.Millisecond {
		t.Logf("released %s after the %s deadline; the process was kept from running for %s meanwhile",
			f.Duration-deadline, deadline, stall.Round(time.Millisecond))
	}
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.raw.String()
}

// waitLog waits for a log line with msg, for at most d.
func (p *proc) waitLog(t *testing.T, msg string, d time.Duration) logLine {
	t.Helper()
	deadline := time.After(d)
	for i := 0; ; {
		p.mu.Lock()
		for ; i < len(p.lines); i++ {
			if p.lines[i].str("msg") == msg {
				l := p.lines[i]
				p.mu.Unlock()
				return l
			}
		}
		ch := p.newLine
		p.mu.Unlock()
		select {
		case <-ch:
		case <-p.exited:
			p.mu.Lock()
			n := len(p.lines)
			p.mu.Unlock()
			if i >= n {
				t.Fatalf("shutdown-manager exited without logging %q", msg)
			}
		case <-deadline:
			t.Fatalf("no log line %q within %s", msg, d)
		}
	}
}

// wait waits for the process to exit, for at most d, and returns its exit code.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		t.Fatalf("shutdown-manager still running after %s", d)
	}
	return p.code
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// linesOf returns the log lines with msg, in order.
func (p *proc) linesOf(msg string) []logLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []logLine
	for _, l := range p.lines {
		if l.str("msg") == msg {
			out = append(out, l)
		}
	}
	return out
}

// releasedAtFloor fails t unless p's drain counted nothing in flight at any poll, and its wait, the phase right
// after the minimum duration, ended drained: nothing held it past the floor. (Behaviour, not timing: on a starved
// machine the floor's poll may come late, and the release with it.)
func releasedAtFloor(t *testing.T, p *proc) {
	t.Helper()
	counts := p.linesOf("work in flight")
	if len(counts) == 0 {
		t.Error(`no "work in flight" line in the drain's log (it logs them at debug level): nothing shows what it counted`)
	}
	for _, l := range counts {
		if open, _ := l["open"].(float64); open != 0 {
			t.Errorf("the drain counted %v in flight at %s: it must count nothing here", open, l.str("elapsed"))
		}
	}
	if floor, next := p.afterFloor(); floor == nil || !phaseEnded(next, drain.PhaseWaiting, drain.CauseDrained) {
		t.Errorf("the drain's phases ended %v; want the minimum duration, then the wait drained", p.phases())
	}
}

// afterFloor returns the log line of the floor's end (the minimum duration's phase, ended by its time) and of the
// phase that ended right after it, where the floor released the drain to; both nil if the log has no such pair.
func (p *proc) afterFloor() (floor, next logLine) {
	phases := p.linesOf("drain phase ended")
	i := slices.IndexFunc(phases, func(l logLine) bool { return phaseEnded(l, drain.PhaseMinDuration, drain.CauseElapsed) })
	if i < 0 || i+1 >= len(phases) {
		return nil, nil
	}
	return phases[i], phases[i+1]
}

// phaseEnded reports whether l, a "drain phase ended" line, ends phase ph by cause c.
func phaseEnded(l logLine, ph drain.Phase, c drain.Cause) bool {
	return l.str("phase") == string(ph) && l.str("cause") == string(c)
}

// phases lists the drain's phases as they ended, "phase cause" each, for a failure's message.
func (p *proc) phases() []string {
	var out []string
	for _, l := range p.linesOf("drain phase ended") {
		out = append(out, l.str("phase")+" "+l.str("cause"))
	}
	return out
}

// finished is the "drain finished" log line's fields.
type finished struct {
	Outcome  string
	Open     float64
	Duration time.Duration
	Reason   string
}

func (p *proc) finished(t *testing.T, d time.Duration) finished {
	t.Helper()
	l := p.waitLog(t, "drain finished", d)
	dur, _ := time.ParseDuration(l.str("duration"))
	open, _ := l["open"].(float64)
	return finished{Outcome: l.str("outcome"), Open: open, Duration: dur, Reason: l.str("reason")}
}

// api is a client of a serving shutdown-manager.
type api struct {
	base   string
	client *http.Client
}

func newAPI(listen string) api {
	if path, ok := strings.CutPrefix(listen, "unix://"); ok {
		return api{base: "http://sm", client: &http.Client{Transport: &http.Transport{DialContext: testbed.UnixDialer(path)}}}
	}
	return api{base: "http://" + listen, client: &http.Client{}}
}

func (a api) get(ctx context.Context, path string) (int, string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path, nil)
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// serve starts `shutdown-manager serve` on 127.0.0.1:0 and returns its API once it serves.
func serve(t *testing.T, e *testbed.Envoy, args ...string) (*proc, api) {
	t.Helper()
	p := start(t, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-address", e.AdminURL}, args...)...)
	l := p.waitLog(t, "serving", 10*time.Second)
	return p, newAPI(l.str("listen"))
}

// status is the part of GET /status the tests read.
type status struct {
	State   string `json:"state"`
	Open    int64  `json:"open"`
	Outcome string `json:"outcome"`
	// CutByClient is the work in flight the client side cut during the drain (cut_test.go).
	CutByClient *struct {
		Requests    int64 `json:"requests"`
		Connections int64 `json:"connections"`
	} `json:"cut_by_client"`
	// The drain's timeline: when it began, when Envoy began failing health checks, and when each phase ended.
	Started            *time.Time `json:"started"`
	HealthChecksFailed *time.Time `json:"health_checks_failed"`
	Phases             []struct {
		Phase   drain.Phase `json:"phase"`
		Elapsed float64     `json:"elapsed_seconds"`
	} `json:"phases"`
}

// phaseEnd is when the drain's phase p ended, from its start and the phase's elapsed seconds; false if it has not.
func (s status) phaseEnd(p drain.Phase) (time.Time, bool) {
	for _, e := range s.Phases {
		if e.Phase == p && s.Started != nil {
			return s.Started.Add(time.Duration(e.Elapsed * float64(time.Second))), true
		}
	}
	return time.Time{}, false
}

// failingHealthChecks reports whether the drain has failed Envoy's health checks and not released: its floor, its
// quiet period or its wait. A test that waits for the floor (min_duration, 1 s with fast()) can miss it: a starved
// make test once let the whole second pass between two polls of /status (the engine's read of Envoy's listeners
// took 1.9 s of it) and the test waited for a phase that had gone.
func failingHealthChecks(s status) bool {
	switch drain.Phase(s.State) {
	case drain.PhaseMinDuration, drain.PhaseQuiet, drain.PhaseWaiting:
		return true
	}
	return false
}

// waitStatus polls /status until cond holds, for at most d.
func (a api) waitStatus(t *testing.T, d time.Duration, cond func(status) bool) status {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var st status
	for {
		code, body, err := a.get(ctx, "/status")
		if err == nil && code == 200 {
			st = status{}
			if json.Unmarshal([]byte(body), &st) == nil && cond(st) {
				return st
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("status condition not met within %s; last status %+v", d, st)
		case <-tick.C:
		}
	}
}

// envoyState reads Envoy's own server state (LIVE, DRAINING) from its admin API.
func envoyState(t *testing.T, e *testbed.Envoy) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	b, err := e.AdminGet(ctx, "/server_info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ State string }
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	return info.State
}

// stopEnvoy sends Envoy SIGTERM (what kubelet does once the preStop hook returns) and waits for its exit.
func stopEnvoy(t *testing.T, e *testbed.Envoy) {
	t.Helper()
	if err := e.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Exited():
	case <-time.After(15 * time.Second):
		t.Fatal("envoy did not exit within 15s of SIGTERM")
	}
}

// runStatus runs `shutdown-manager status` against admin and returns what it printed (stdout and stderr).
// The binary is built with -race and runs beside every other test on two CPUs: its default of 1 s per
// admin request (the drain's bound on a hung admin API, tested elsewhere) is raised to 10 s, so that one
// starved answer does not fail a test about what status prints.
func runStatus(ctx context.Context, admin string, args ...string) (string, error) {
	return runOutput(ctx, append([]string{"status", "--admin-address", admin, "--admin-timeout", "10s"}, args...)...)
}

// runOutput runs shutdown-manager to completion and returns its combined output.
func runOutput(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, smBin, args...).CombinedOutput()
	return string(out), err
}

// holdTCP opens one connection through Envoy's TCP proxy for d (or until the test ends) and waits until Envoy
// counts it, so that a drain started next sees it.
func holdTCP(ctx context.Context, t *testing.T, e *testbed.Envoy, d time.Duration) *testbed.Load {
	t.Helper()
	hold := testbed.TCPHold(ctx, e.TCPAddr, d)
	t.Cleanup(hold.Stop)
	waitStat(t, e, "listener.ingress_tcp.downstream_cx_active", 1)
	return hold
}

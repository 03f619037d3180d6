package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The children are this test binary, re-executed with helperArg and a mode (as os/exec's own tests do):
// TestMain runs the mode instead of the tests. A child says what it sees, one line at a time, on its stdout,
// which the test reads through a pipe; that is how the test waits for it, never by sleeping.
const helperArg = "supervisor-test-helper"

func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == helperArg {
		os.Exit(helper(os.Args[2]))
	}
	// Built with -race, a child that ran goroutines waits a second at its exit (the race runtime's
	// atexit_sleep_ms); the children have nothing to report.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

// helper is a child's life in each mode.
//   - exit3: exits with status 3.
//   - stdin-eof: exits 0 if its stdin is at its end at once (/dev/null), 1 otherwise.
//   - orphan: starts a block child, prints its pid, and exits without waiting for it.
//   - block: waits for a signal that never comes.
//   - serve: prints "ready", then the name of every SIGHUP, SIGUSR1 and SIGUSR2 it gets; exits 0 when it
//     reads "quit" on stdin (as Envoy does on POST /quitquitquit); SIGTERM kills it.
//   - deaf-to-quit: serve, but prints "quit ignored" instead of exiting.
//   - deaf: deaf-to-quit, and ignores SIGTERM too (only SIGKILL ends it).
func helper(mode string) int {
	switch mode {
	case "exit3":
		return 3
	case "stdin-eof":
		if n, err := os.Stdin.Read(make([]byte, 1)); n == 0 && errors.Is(err, io.EOF) {
			return 0
		}
		return 1
	case "orphan":
		cmd := exec.Command(os.Args[0], helperArg, "block")
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(cmd.Process.Pid)
		return 0
	case "block":
		never := make(chan os.Signal, 1)
		signal.Notify(never, syscall.SIGUSR2)
		<-never
		return 0
	}
	deafToQuit := mode == "deaf-to-quit" || mode == "deaf"
	if mode == "deaf" {
		signal.Ignore(syscall.SIGTERM)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	fmt.Println("ready")
	for {
		select {
		case s := <-sigs:
			fmt.Println(s.(syscall.Signal).String())
		case l := <-lines:
			if l != "quit" {
				continue
			}
			if !deafToQuit {
				return 0
			}
			fmt.Println("quit ignored")
		}
	}
}

// failAfter bounds every wait of these tests: it is how long a wait may take before the test fails, never
// a synchronisation.
const failAfter = 30 * time.Second

// child is a started helper: its Process, its stdout's lines, and its stdin.
type child struct {
	*Process
	lines chan string // closed at the end of its stdout
	stdin *os.File
	logs  chan slog.Record
}

// start starts the helper in mode under Start; the test's cleanup closes it (killed, reaped, reaping stopped).
func start(t *testing.T, mode string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := make(chan slog.Record, 64)
	p, err := Start(exe, []string{exe, helperArg, mode}, [3]*os.File{inR, outW, nil}, slog.New(recorder{logs}))
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		t.Fatalf("Start: %v", err)
	}
	c := &child{Process: p, lines: make(chan string, 16), stdin: inW, logs: logs}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		p.Close()
		inW.Close()
		outR.Close()
	})
	return c
}

// expect waits for the child's next line and fails unless it is want.
func (c *child) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got, ok := <-c.lines:
		if !ok {
			t.Fatalf("the child's stdout ended; want the line %q", want)
		}
		if got != want {
			t.Fatalf("the child said %q, want %q", got, want)
		}
	case <-time.After(failAfter):
		t.Fatalf("the child did not say %q within %s", want, failAfter)
	}
}

// waitExited waits until Exited is closed.
func (c *child) waitExited(t *testing.T) {
	t.Helper()
	select {
	case <-c.Exited():
	case <-time.After(failAfter):
		t.Fatalf("Exited not closed within %s", failAfter)
	}
}

// stop runs Stop in a goroutine, bounded by failAfter, and returns its answer.
func (c *child) stop(t *testing.T, quit func(context.Context) error, timeout time.Duration) string {
	t.Helper()
	step := make(chan string, 1)
	go func() { step <- c.Stop(quit, timeout) }()
	select {
	case s := <-step:
		return s
	case <-time.After(failAfter):
		t.Fatalf("Stop did not return within %s", failAfter)
		return ""
	}
}

// messages is the messages logged so far, in order.
func (c *child) messages() []string {
	var m []string
	for {
		select {
		case r := <-c.logs:
			m = append(m, r.Message)
		default:
			return m
		}
	}
}

// recorder is a slog.Handler that hands every record to a channel (dropping it when the channel is full).
type recorder struct{ ch chan slog.Record }

func (recorder) Enabled(context.Context, slog.Level) bool { return true }
func (h recorder) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Clone():
	default:
	}
	return nil
}
func (h recorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recorder) WithGroup(string) slog.Handler      { return h }

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestExitStatus: a child that exits by itself closes Exited, and its status is passed on as a shell says
// it; Signal and Stop then do nothing.
func TestExitStatus(t *testing.T) {
	c := start(t, "exit3")
	c.waitExited(t)
	if got := c.ExitCode(); got != 3 {
		t.Errorf("ExitCode() = %d, want 3", got)
	}
	if got := c.Describe(); got != "exit status 3" {
		t.Errorf("Describe() = %q, want %q", got, "exit status 3")
	}
	if err := c.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("Signal after the exit: %v, want nil", err)
	}
	quitCalled := false
	if got := c.stop(t, func(context.Context) error { quitCalled = true; return nil }, time.Minute); got != "already exited" {
		t.Errorf("Stop after the exit = %q, want %q", got, "already exited")
	}
	if quitCalled {
		t.Error("Stop after the exit called quit")
	}
}

// TestNilStdinIsDevNull: a nil stdio file is /dev/null, so the child reads the end of its stdin at once.
func TestNilStdinIsDevNull(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(exe, []string{exe, helperArg, "stdin-eof"}, [3]*os.File{}, slog.New(recorder{make(chan slog.Record, 64)}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	select {
	case <-p.Exited():
	case <-time.After(failAfter):
		t.Fatalf("Exited not closed within %s", failAfter)
	}
	if got := p.ExitCode(); got != 0 {
		t.Errorf("the child's stdin is not at its end at once: exit code %d, want 0", got)
	}
}

// TestSignalForwarded: Signal reaches the child, each signal as sent, in order.
func TestSignalForwarded(t *testing.T) {
	c := start(t, "serve")
	c.expect(t, "ready")
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2} {
		if err := c.Signal(sig); err != nil {
			t.Fatalf("Signal(%s): %v", sig, err)
		}
		c.expect(t, sig.String())
	}
	if pid := c.Pid(); pid <= 0 {
		t.Errorf("Pid() = %d", pid)
	}
}

// TestStopQuit: a child that exits on quit ends at the first step; quit gets a context bounded by the
// timeout; nothing is logged.
func TestStopQuit(t *testing.T) {
	c := start(t, "serve")
	c.expect(t, "ready")
	var deadline bool
	quit := func(ctx context.Context) error {
		_, deadline = ctx.Deadline()
		_, err := io.WriteString(c.stdin, "quit\n")
		return err
	}
	if got := c.stop(t, quit, time.Minute); got != "quit" {
		t.Fatalf("Stop = %q, want quit", got)
	}
	if !deadline {
		t.Error("quit's context has no deadline")
	}
	c.waitExited(t)
	if got := c.ExitCode(); got != 0 {
		t.Errorf("ExitCode() = %d, want 0", got)
	}
	if m := c.messages(); len(m) != 0 {
		t.Errorf("logged %q, want nothing", m)
	}
}

// TestStopQuitFails: when quit fails, SIGTERM goes at once (not after the timeout), and the child's death
// by it is passed on as 128+15.
func TestStopQuitFails(t *testing.T) {
	c := start(t, "serve")
	c.expect(t, "ready")
	began := time.Now()
	if got := c.stop(t, func(context.Context) error { return errors.New("connection refused") }, time.Hour); got != "sigterm" {
		t.Fatalf("Stop = %q, want sigterm", got)
	}
	if d := time.Since(began); d >= time.Hour {
		t.Errorf("Stop took %s: it waited for the timeout", d)
	}
	if got, want := c.ExitCode(), 128+int(syscall.SIGTERM); got != want {
		t.Errorf("ExitCode() = %d, want %d", got, want)
	}
	if got, want := c.Describe(), "killed by signal terminated (15)"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	if got, want := c.messages(), []string{"asking envoy to quit failed; sending SIGTERM"}; !equal(got, want) {
		t.Errorf("logged %q, want %q", got, want)
	}
}

// TestStopTimeoutThenSIGTERM: a child that ignores quit gets SIGTERM once the timeout has passed, not
// before.
func TestStopTimeoutThenSIGTERM(t *testing.T) {
	c := start(t, "deaf-to-quit")
	c.expect(t, "ready")
	const timeout = 200 * time.Millisecond
	quit := func(context.Context) error {
		_, err := io.WriteString(c.stdin, "quit\n")
		return err
	}
	began := time.Now()
	if got := c.stop(t, quit, timeout); got != "sigterm" {
		t.Fatalf("Stop = %q, want sigterm", got)
	}
	if d := time.Since(began); d < timeout {
		t.Errorf("Stop returned after %s: SIGTERM came before the %s timeout", d, timeout)
	}
	c.expect(t, "quit ignored") // quit reached the child before SIGTERM ended it
	if got, want := c.ExitCode(), 128+int(syscall.SIGTERM); got != want {
		t.Errorf("ExitCode() = %d, want %d", got, want)
	}
	if got, want := c.messages(), []string{"envoy still running after quit; sending SIGTERM"}; !equal(got, want) {
		t.Errorf("logged %q, want %q", got, want)
	}
}

// TestStopSIGKILL: a child that ignores quit and SIGTERM is killed killGrace after the SIGTERM, and Stop
// returns once it is reaped.
func TestStopSIGKILL(t *testing.T) {
	c := start(t, "deaf")
	c.expect(t, "ready")
	const timeout = 100 * time.Millisecond
	quit := func(context.Context) error {
		_, err := io.WriteString(c.stdin, "quit\n")
		return err
	}
	began := time.Now()
	if got := c.stop(t, quit, timeout); got != "sigkill" {
		t.Fatalf("Stop = %q, want sigkill", got)
	}
	if d := time.Since(began); d < timeout+killGrace {
		t.Errorf("Stop returned after %s: SIGKILL came before the timeout plus killGrace (%s)", d, timeout+killGrace)
	}
	select {
	case <-c.Exited():
	default:
		t.Fatal("Stop returned before Exited was closed")
	}
	c.expect(t, "quit ignored")
	if got, want := c.ExitCode(), 128+int(syscall.SIGKILL); got != want {
		t.Errorf("ExitCode() = %d, want %d", got, want)
	}
	if got, want := c.Describe(), "killed by signal killed (9)"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	want := []string{"envoy still running after quit; sending SIGTERM", "envoy still running; sending SIGKILL"}
	if got := c.messages(); !equal(got, want) {
		t.Errorf("logged %q, want %q", got, want)
	}
}

// TestOrphanReaped: a process the child leaves behind is re-parented to this one (a child subreaper) and
// reaped here when it exits, not left a zombie.
func TestOrphanReaped(t *testing.T) {
	c := start(t, "orphan")
	var line string
	select {
	case line = <-c.lines:
	case <-time.After(failAfter):
		t.Fatalf("the child did not print its child's pid within %s", failAfter)
	}
	orphan, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("the child printed %q, want a pid", line)
	}
	c.waitExited(t)
	// The orphan is this process's child now: until it is reaped, its pid is not reused, so the signal is
	// its.
	if err := syscall.Kill(orphan, syscall.SIGKILL); err != nil {
		t.Fatalf("killing the orphan %d: %v", orphan, err)
	}
	deadline := time.After(failAfter)
	for {
		select {
		case r := <-c.logs:
			if r.Message != "reaped orphaned process" {
				continue
			}
			var pid int64
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "pid" {
					pid = a.Value.Int64()
				}
				return true
			})
			if pid == int64(orphan) {
				return
			}
		case <-deadline:
			t.Fatalf("the orphan %d was not reaped within %s", orphan, failAfter)
		}
	}
}

// TestClose: Close kills a running child and returns once it is reaped; after it, this process reaps no
// other child, so a child started by os/exec is waited for by its own Cmd. (Close used to return before its
// reaper had stopped; that race is microseconds wide, and this test does not catch it reliably: it checks
// the contract.)
func TestClose(t *testing.T) {
	c := start(t, "serve")
	c.expect(t, "ready")
	c.Close()
	select {
	case <-c.Exited():
	default:
		t.Fatal("Close returned before Exited was closed")
	}
	if got, want := c.ExitCode(), 128+int(syscall.SIGKILL); got != want {
		t.Errorf("ExitCode() = %d, want %d", got, want)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	err = exec.Command(exe, helperArg, "exit3").Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("a child of os/exec after Close: %v, want exit status 3 (was it reaped by Close's reaper?)", err)
	}
}

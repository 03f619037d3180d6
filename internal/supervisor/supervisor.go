// Package supervisor runs Envoy as a child process: it starts it with the caller's stdio, forwards
// signals, reaps it and every orphan that is re-parented to this process, and stops it in order.
//
// The process reaps with wait4(-1) itself (it never calls os.Process.Wait or exec.Cmd.Wait), as an init
// must: as PID 1, or as a child subreaper (which it makes itself), every orphaned descendant becomes its
// child, and an unreaped child is a zombie.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process is a started child.
type Process struct {
	proc   *os.Process
	log    *slog.Logger
	exited chan struct{}
	status syscall.WaitStatus // written before exited is closed

	stopReaper func()
	reaperDone chan struct{} // closed when reap returns
}

// Start starts path with args (args[0] is the program name as the child sees it), with stdin, stdout and
// stderr passed through untouched (a nil one is /dev/null), and makes this process a child subreaper so
// that orphans left by the child are reaped here. The child is killed if this process dies (PR_SET_PDEATHSIG).
func Start(path string, args []string, stdio [3]*os.File, log *slog.Logger) (*Process, error) {
	for i, f := range stdio {
		if f != nil {
			continue
		}
		null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", os.DevNull, err)
		}
		defer null.Close() // the child has its own copy once started
		stdio[i] = null
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		log.Warn("cannot become a child subreaper; orphans of envoy will not be reaped here", "err", err)
	}
	p := &Process{log: log, exited: make(chan struct{}), reaperDone: make(chan struct{})}
	// Listen for SIGCHLD before the child exists, so that no exit is missed.
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	proc, err := os.StartProcess(path, args, &os.ProcAttr{
		Files: []*os.File{stdio[0], stdio[1], stdio[2]},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		signal.Stop(chld)
		return nil, fmt.Errorf("starting %s: %w", path, err)
	}
	p.proc = proc
	stop := make(chan struct{})
	var once sync.Once
	p.stopReaper = func() { once.Do(func() { close(stop) }) }
	go p.reap(chld, stop)
	return p, nil
}

// reap collects every exited child whenever SIGCHLD arrives, until stop; the supervised child's
// status is kept and Exited closed.
func (p *Process) reap(chld chan os.Signal, stop <-chan struct{}) {
	defer close(p.reaperDone)
	defer signal.Stop(chld)
	// A slow tick as well: SIGCHLDs coalesce, and one could come between Notify and a wait4 pass.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			if pid == p.proc.Pid {
				p.status = ws
				close(p.exited)
				continue
			}
			p.log.Debug("reaped orphaned process", "pid", pid, "status", describe(ws))
		}
		select {
		case <-chld:
		case <-tick.C:
		case <-stop:
			return
		}
	}
}

// Pid is the child's process ID.
func (p *Process) Pid() int { return p.proc.Pid }

// Exited is closed once the child has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitCode is the child's exit status as a shell reports it: its code, or 128+N if signal N killed it.
// Valid once Exited is closed.
func (p *Process) ExitCode() int {
	if p.status.Signaled() {
		return 128 + int(p.status.Signal())
	}
	return p.status.ExitStatus()
}

// Describe says how the child ended ("exit status 1", "killed by signal killed"). Valid once Exited is closed.
func (p *Process) Describe() string { return describe(p.status) }

func describe(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return fmt.Sprintf("killed by signal %s (%d)", ws.Signal(), int(ws.Signal()))
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// Signal sends sig to the child; after it has exited, it does nothing.
func (p *Process) Signal(sig os.Signal) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := p.proc.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling envoy (pid %d) with %s: %w", p.proc.Pid, sig, err)
	}
	return nil
}

// killGrace is how long Stop waits after SIGTERM before SIGKILL.
const killGrace = time.Second

// Agent mode's stop, as `run` and the pod mutation that sizes its grace period both count it.
//
// Kubelet kills (SIGKILL) whatever still runs terminationGracePeriodSeconds after the pod's deletion began, so
// agent mode keeps DefaultStopTimeout plus StopMargin of the grace period in hand beyond the drain: Stop's
// whole course after the drain has released, and a little slack so that kubelet's SIGKILL never comes first.
const (
	// DefaultStopTimeout is `run`'s default --stop-timeout, the timeout given to Stop: after the drain, how
	// long Envoy gets to exit after /quitquitquit before SIGTERM, then SIGKILL killGrace (one second) later.
	DefaultStopTimeout = 5 * time.Second
	// StopMargin is what a grace period keeps in hand beyond Stop's timeout: killGrace, between SIGTERM and
	// SIGKILL, and one second for scheduling. Two seconds.
	StopMargin = killGrace + time.Second
)

// Stop ends the child in order: quit (Envoy's POST /quitquitquit; SIGTERM at once if that fails), up to
// timeout for it to exit, then SIGTERM, then SIGKILL killGrace later. It returns once the child is reaped,
// at the latest timeout plus killGrace after it was called, and says which step ended it. It takes no context on
// purpose: once called, a stop always ends the child (one given up half way would leave Envoy running with no
// one to reap it), and its bound is its own, timeout plus killGrace, which the grace period is sized for.
func (p *Process) Stop(quit func(context.Context) error, timeout time.Duration) string {
	select {
	case <-p.exited:
		return "already exited"
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	step := "quit"
	if err := quit(ctx); err != nil {
		p.log.Warn("asking envoy to quit failed; sending SIGTERM", "err", err)
		step = "sigterm"
		_ = p.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.exited:
		return step
	case <-ctx.Done():
	}
	if step == "quit" {
		p.log.Warn("envoy still running after quit; sending SIGTERM", "stop_timeout", timeout.String())
		_ = p.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
			return "sigterm"
		case <-time.After(killGrace):
		}
	}
	p.log.Warn("envoy still running; sending SIGKILL")
	_ = p.Signal(syscall.SIGKILL)
	<-p.exited
	return "sigkill"
}

// Close kills the child if it still runs, waits until it is reaped, and stops reaping: once it returns, this
// process reaps no other child (one that a later Start, or an exec.Cmd, waits for).
func (p *Process) Close() {
	_ = p.Signal(syscall.SIGKILL)
	<-p.exited
	p.stopReaper()
	<-p.reaperDone
}

// Package testproc starts the processes of tests and harnesses (Envoy, etcd, kube-apiserver, containerd,
// kubelet, ...) in one way: each in a process group of its own, its output in a log file, stopped by its PID
// (the group's ID) and nothing else; a failure message names the log and quotes its end.
//
// The core API does not depend on package testing; only tb.go adds the cleanup of a testing.TB.
package testproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a process started by [Start]. Its fields are read-only.
type Proc struct {
	// Name names the process in messages, like "kube-apiserver".
	Name string
	// LogPath is the file that holds the process's stdout and stderr (those the caller had not set), or "" if the
	// caller set both.
	LogPath string
	// Cmd is the started command. Use Wait, Exited and Stop rather than Cmd.Wait, which only one caller may use;
	// Cmd.ProcessState is set once Exited is closed.
	Cmd *exec.Cmd

	exited chan struct{} // closed once Cmd.Wait has returned; err is set before
	err    error

	// killMu is held by kill from its check of exited until killed is set, and by Killed: a SIGKILL can end the
	// process (and close exited) before kill records it, and a caller that saw Exited must not read false then.
	killMu sync.Mutex
	killed bool
}

// Start starts cmd in a process group of its own (see sysProcAttr), its nil Stdout and Stderr going to logPath
// (created, or truncated), unless logPath is "". name is for messages.
//
// When ctx is done the process group is killed (SIGKILL), as exec.CommandContext kills the process. A process
// that a cleanup stops is started with context.Background(): a test's own context ends before its cleanups run,
// and a later-registered cleanup may still need the process, or check what the test left behind.
func Start(ctx context.Context, name string, cmd *exec.Cmd, logPath string) (*Proc, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	if logPath != "" && (cmd.Stdout == nil || cmd.Stderr == nil) {
		log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, fmt.Errorf("creating the log of %s: %w", name, err)
		}
		defer log.Close() // the child has its own descriptor once started
		if cmd.Stdout == nil {
			cmd.Stdout = log
		}
		if cmd.Stderr == nil {
			cmd.Stderr = log
		}
	} else {
		logPath = ""
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	setSysProcAttr(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, Cmd: cmd, exited: make(chan struct{})}
	stopKill := context.AfterFunc(ctx, p.kill)
	go func() {
		p.err = cmd.Wait()
		stopKill()
		close(p.exited)
	}()
	return p, nil
}

// kill sends SIGKILL to the process group unless the process has exited, and records that it did.
func (p *Proc) kill() {
	p.killMu.Lock()
	defer p.killMu.Unlock()
	select {
	case <-p.exited:
		return
	default:
	}
	// The leader is not reaped yet (Wait has not returned), so its PID still names this group.
	if signalGroup(p.Cmd.Process.Pid, syscall.SIGKILL) == nil {
		p.killed = true
	}
}

// Stop ends the process and waits until it is reaped: SIGTERM to its group then, if it has not exited within
// grace, SIGKILL to the group; with grace 0, SIGKILL at once. If the process had exited already, whatever is left
// of its group (children of a wrapper, say) gets SIGKILL. Stop is idempotent and safe for concurrent use; on a nil
// Proc (a teardown registered before the start, which failed) it does nothing.
func (p *Proc) Stop(grace time.Duration) {
	if p == nil {
		return
	}
	select {
	case <-p.exited:
		_ = signalGroup(p.Cmd.Process.Pid, syscall.SIGKILL)
		return
	default:
	}
	if grace > 0 && signalGroup(p.Cmd.Process.Pid, syscall.SIGTERM) == nil {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.exited:
		case <-t.C:
		}
	}
	select {
	case <-p.exited:
		_ = signalGroup(p.Cmd.Process.Pid, syscall.SIGKILL) // what the leader left in its group
	default:
		p.kill()
		<-p.exited
	}
}

// Signal sends sig to the process alone (not its group); after it has exited it returns [os.ErrProcessDone].
func (p *Proc) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// Wait waits until the process has exited and returns the result of [exec.Cmd.Wait]. Any number of goroutines
// may call it; all get the same result.
func (p *Proc) Wait() error {
	<-p.exited
	return p.err
}

// Exited returns a channel that is closed once the process has exited and been reaped.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Killed reports whether Stop or the end of Start's context sent the process SIGKILL, as opposed to the
// process exiting by itself or on a signal sent with Signal or Stop's SIGTERM.
func (p *Proc) Killed() bool {
	p.killMu.Lock()
	defer p.killMu.Unlock()
	return p.killed
}

// Tail returns the last n lines of the log, or "" if there is no log or it cannot be read.
func (p *Proc) Tail(n int) string {
	if p.LogPath == "" {
		return ""
	}
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	return LastLines(string(b), n)
}

// LogEnd says, for a failure message, where the log is and quotes its last n lines:
// "end of /path/to/x.log:\n...".
func (p *Proc) LogEnd(n int) string {
	if p.LogPath == "" {
		return fmt.Sprintf("%s logs to its caller's writers, not to a file", p.Name)
	}
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("end of %s: (%v)", p.LogPath, err)
	}
	return fmt.Sprintf("end of %s:\n%s", p.LogPath, LastLines(string(b), n))
}

// LastLines is the last n lines of s (its trailing newlines dropped): the end of a log or of a command's output
// for a test's message.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// FreePorts returns n distinct TCP ports of the IP address host that were free a moment ago: for a process that
// takes its ports as flags (one a test cannot hand a listener), which retries its start if another took one since.
func FreePorts(host string, n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close() // held until all are chosen, so that they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// signalGroup sends sig to the process group pgid; when the group no longer exists it returns os.ErrProcessDone.
func signalGroup(pgid int, sig syscall.Signal) error {
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

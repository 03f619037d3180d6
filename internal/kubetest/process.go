package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// pollInterval is how often a readiness check is repeated while a process starts.
const pollInterval = 100 * time.Millisecond

// logTailLines is how much of a log a failure message quotes; the whole log stays on disk.
const logTailLines = 20

// errExited reports that a process ended while we waited for it to be ready.
var errExited = errors.New("exited")

// process is one binary the harness started, with its output in a log file.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once Wait has returned; err is set before
	err     error
}

// startProcess runs path with args in its own process group (see sysProcAttr), stdout and stderr to logPath.
func startProcess(name, logPath, path string, args ...string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating the log of %s: %w", name, err)
	}
	defer log.Close() // the child has its own descriptor once started
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop kills the process (and anything it started) by its PID, which is its process group, and waits for it.
// Safe to call more than once.
func (p *process) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	killGroup(p.cmd.Process.Pid)
	<-p.exited
}

// waitReady calls ready every pollInterval until it returns nil (then waitReady returns nil), the process exits
// (an error wrapping errExited) or timeout passes (an error with ready's last error). Every error names the log.
func (p *process) waitReady(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	last := errors.New("not checked yet")
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s %w (%v) before it was ready; end of its log %s:\n%s",
				p.name, errExited, p.err, p.logPath, p.logTail(logTailLines))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready within %s (last check: %v); end of its log %s:\n%s",
				p.name, timeout, last, p.logPath, p.logTail(logTailLines))
		case <-tick.C:
		}
	}
}

// logContains reports whether the process's log holds s (for instance a bind error).
func (p *process) logContains(s string) bool {
	b, err := os.ReadFile(p.logPath)
	return err == nil && bytes.Contains(b, []byte(s))
}

// logTail returns the last n lines of the process's log.
func (p *process) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", p.logPath, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

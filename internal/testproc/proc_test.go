package testproc

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitLimit bounds every wait on a process here; they take milliseconds.
const waitLimit = 10 * time.Second

func start(ctx context.Context, t *testing.T, script string) *Proc {
	t.Helper()
	p, err := Start(ctx, "sh", exec.Command("/bin/sh", "-c", script), filepath.Join(t.TempDir(), "sh.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(0) })
	return p
}

// waitLog waits until the log holds s.
func waitLog(t *testing.T, p *Proc, s string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(waitLimit)
	for !strings.Contains(p.Tail(10), s) {
		select {
		case <-tick.C:
		case <-limit:
			t.Fatalf("no %q in the log within %s; %s", s, waitLimit, p.LogEnd(10))
		}
	}
}

func TestStopTermThenKill(t *testing.T) {
	t.Run("exits on SIGTERM", func(t *testing.T) {
		p := start(t.Context(), t, "trap 'echo got-TERM; exit 0' TERM; echo ready; while :; do sleep 0.05; done")
		waitLog(t, p, "ready")
		p.Stop(waitLimit)
		if err := p.Wait(); err != nil || p.Killed() {
			t.Errorf("Wait = %v, Killed = %v; want a clean exit on SIGTERM", err, p.Killed())
		}
		if !strings.Contains(p.Tail(5), "got-TERM") {
			t.Errorf("the process did not see SIGTERM; %s", p.LogEnd(5))
		}
	})
	t.Run("killed after the grace", func(t *testing.T) {
		p := start(t.Context(), t, "trap '' TERM; echo ready; exec sleep 60")
		waitLog(t, p, "ready")
		p.Stop(100 * time.Millisecond)
		if err := p.Wait(); err == nil || !p.Killed() {
			t.Errorf("Wait = %v, Killed = %v; want SIGKILL once SIGTERM was ignored", err, p.Killed())
		}
		p.Stop(time.Second) // no-op now
		if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("Signal after the exit = %v, want os.ErrProcessDone", err)
		}
	})
}

// TestStopKillsTheGroup: a child left in the group (a wrapper's, say) goes with the process, even when the
// process had exited first.
func TestStopKillsTheGroup(t *testing.T) {
	for _, exitFirst := range []bool{false, true} {
		t.Run("leader exited "+strconv.FormatBool(exitFirst), func(t *testing.T) {
			script := "sleep 60 & echo child=$!; wait"
			if exitFirst {
				script = "sleep 60 & echo child=$!"
			}
			p := start(t.Context(), t, script)
			waitLog(t, p, "child=")
			pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(p.Tail(1), "child=")))
			if err != nil {
				t.Fatal(err)
			}
			if exitFirst {
				<-p.Exited()
			}
			child, err := os.FindProcess(pid)
			if err != nil {
				t.Fatal(err)
			}
			p.Stop(0)
			// The child is a child of init (or of a subreaper) now, not ours to wait for: its state says it died.
			limit := time.After(waitLimit)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for alive(pid) {
				select {
				case <-tick.C:
				case <-limit:
					_ = child.Kill()
					t.Fatalf("the group's child %d still runs %s after Stop", pid, waitLimit)
				}
			}
		})
	}
}

// alive reports whether pid runs (exists and is not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil // no /proc: a zombie counts as alive
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(after, "Z")
}

func TestContextKills(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	p := start(ctx, t, "echo ready; exec sleep 60")
	waitLog(t, p, "ready")
	cancel()
	select {
	case <-p.Exited():
	case <-time.After(waitLimit):
		t.Fatalf("still running %s after the context ended", waitLimit)
	}
	if !p.Killed() || p.Wait() == nil {
		t.Errorf("Killed = %v, Wait = %v; want killed", p.Killed(), p.Wait())
	}
	if _, err := Start(ctx, "sh", exec.Command("/bin/true"), ""); err == nil {
		t.Error("Start with an ended context succeeded")
	}
}

func TestLog(t *testing.T) {
	p := start(t.Context(), t, "for i in 1 2 3 4 5; do echo line$i; done; echo oops >&2")
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if got, want := p.Tail(2), "line5\noops"; got != want {
		t.Errorf("Tail(2) = %q, want %q", got, want)
	}
	if got, want := p.LogEnd(1), "end of "+p.LogPath+":\noops"; got != want {
		t.Errorf("LogEnd(1) = %q, want %q", got, want)
	}
	var out strings.Builder
	cmd := exec.Command("/bin/sh", "-c", "echo hi")
	cmd.Stdout, cmd.Stderr = &out, &out
	q, err := Start(t.Context(), "sh", cmd, filepath.Join(t.TempDir(), "unused.log"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Wait(); err != nil || out.String() != "hi\n" || q.LogPath != "" || q.Tail(1) != "" {
		t.Errorf("with the caller's writers: Wait %v, output %q, LogPath %q, Tail %q; want hi and no log file",
			err, out.String(), q.LogPath, q.Tail(1))
	}
}

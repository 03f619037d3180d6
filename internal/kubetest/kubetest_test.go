package kubetest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// The API server itself is tested in test/kube; these are the harness's own rules, with plain processes.

func TestBuildCommand(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"etcd", "kube-apiserver", "kubectl"}, "make kube"},
		{[]string{"kubectl"}, "make kube"},
		{[]string{"etcd", "kube-apiserver", "kubelet"}, `KUBE_BINARIES="etcd kube-apiserver kubelet" scripts/kube-binaries.sh`},
	} {
		if got := BuildCommand(tc.names...); got != tc.want {
			t.Errorf("BuildCommand(%q) = %s, want %s", tc.names, got, tc.want)
		}
	}
}

func TestBinDirNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "etcd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubectl"), []byte("not executable"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvBinDir, dir)
	if got, err := BinDir("etcd"); err != nil || got != dir {
		t.Errorf("BinDir(etcd) = %q, %v; want %q, nil", got, err, dir)
	}
	_, err := BinDir("etcd", "kube-apiserver", "kubectl")
	want := "no kube-apiserver, kubectl in " + dir + " ($KUBE_BIN_DIR): set it to a directory that has them, or unset it and run `make kube`"
	if err == nil || err.Error() != want {
		t.Errorf("BinDir with two missing: %v, want %s", err, want)
	}
}

// TestStartOnFreePortsRetriesATakenPort: a process that exits saying its address is in use is started again on
// other ports; any other early exit is an error at once.
func TestStartOnFreePortsRetriesATakenPort(t *testing.T) {
	dir := t.TempDir()
	var started [][]int
	start := func(script string) func([]int) (*testproc.Proc, error) {
		return func(ports []int) (*testproc.Proc, error) {
			started = append(started, ports)
			if len(started) == 1 || script != "serve" {
				return startProcess("fake", filepath.Join(dir, "first.log"), "/bin/sh", "-c",
					"echo 'listen tcp 127.0.0.1:"+strconv.Itoa(ports[0])+": bind: address already in use'; exit 1")
			}
			return startProcess("fake", filepath.Join(dir, "second.log"), "/bin/sh", "-c", "exec sleep 60")
		}
	}
	ready := func(context.Context) error { return nil }
	notYet := func(context.Context) error { return errors.New("not yet") }

	t.Run("retried", func(t *testing.T) {
		started = nil
		p, err := startOnFreePorts(t.Context(), "127.0.0.1", 2, start("serve"), time.Minute, func(ctx context.Context) error {
			if len(started) == 1 {
				return notYet(ctx) // the first one never becomes ready: it exits
			}
			return ready(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop(0)
		if len(started) != 2 || len(started[0]) != 2 || started[0][0] == started[0][1] {
			t.Errorf("started on %v, want two attempts on two distinct ports each", started)
		}
	})
	t.Run("gives up", func(t *testing.T) {
		started = nil
		_, err := startOnFreePorts(t.Context(), "127.0.0.1", 1, start("always in use"), time.Minute, notYet)
		if !errors.Is(err, errExited) || len(started) != startAttempts {
			t.Errorf("after %d attempts: %v; want %d attempts and an exit error", len(started), err, startAttempts)
		}
	})
	t.Run("other exit", func(t *testing.T) {
		started = nil
		_, err := startOnFreePorts(t.Context(), "127.0.0.1", 1, func([]int) (*testproc.Proc, error) {
			started = append(started, nil)
			return startProcess("fake", filepath.Join(dir, "other.log"), "/bin/sh", "-c", "echo 'Error: unknown flag'; exit 1")
		}, time.Minute, notYet)
		if !errors.Is(err, errExited) || len(started) != 1 {
			t.Errorf("after %d attempts: %v; want 1 attempt and an exit error", len(started), err)
		}
	})
}

// TestRemoveAbandoned: a directory whose owner process is gone is removed; one whose owner runs, and kept logs
// (no owner file), stay.
func TestRemoveAbandoned(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // os.TempDir
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{ // name -> owner.pid content ("" = none)
		"kubetest-abandoned": strconv.Itoa(dead.Process.Pid),
		"kubetest-running":   strconv.Itoa(os.Getpid()),
		"kubetest-kept-logs": "",
	}
	for name, owner := range dirs {
		if err := os.Mkdir(filepath.Join(tmp, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(tmp, name, ownerFile), []byte(owner+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	removeAbandoned()
	for name := range dirs {
		_, err := os.Stat(filepath.Join(tmp, name))
		if got, want := err == nil, name != "kubetest-abandoned"; got != want {
			t.Errorf("%s exists = %v, want %v", name, got, want)
		}
	}
}

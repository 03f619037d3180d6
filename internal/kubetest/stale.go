package kubetest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ownerFile, in Dir, holds the PID of the test process that started the API server. A test binary killed outright
// (SIGKILL, or Ctrl-C: package testing runs no cleanups on a signal) takes etcd and kube-apiserver with it (see
// testproc.Start) but leaves Dir, over 100 MB of etcd data; the next Start removes such directories. A failed test's
// kept logs have no ownerFile, so they stay until removed by hand.
const ownerFile = "owner.pid"

// dirPattern names the directories Start creates under os.TempDir.
const dirPattern = "kubetest-*"

// writeOwner records this process as dir's owner.
func writeOwner(dir string) error {
	return os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
}

// removeAbandoned removes every directory Start created whose owner process no longer exists. Errors are ignored:
// the sweep only saves disk space.
func removeAbandoned() {
	owners, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPattern, ownerFile))
	for _, f := range owners {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(filepath.Dir(f))
		}
	}
}

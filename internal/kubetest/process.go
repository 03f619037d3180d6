package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// pollInterval is how often a readiness check is repeated while a process starts.
const pollInterval = 100 * time.Millisecond

// logTailLines is how much of a log a failure message quotes; the whole log stays on disk.
const logTailLines = 20

// errExited reports that a process ended while we waited for it to be ready.
var errExited = errors.New("exited")

// startProcess runs path with args (see testproc.Start), stdout and stderr to logPath. It lives until stop
// (the API server's cleanup) kills it: the data is temporary, so nothing is gained by a graceful stop.
func startProcess(name, logPath, path string, args ...string) (*testproc.Proc, error) {
	return testproc.Start(context.Background(), name, exec.Command(path, args...), logPath)
}

// waitReady calls ready every pollInterval until it returns nil (then waitReady returns nil), p exits (an error
// wrapping errExited) or timeout passes (an error with ready's last error). Every error names the log.
func waitReady(ctx context.Context, p *testproc.Proc, timeout time.Duration, ready func(context.Context) error) error {
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
		case <-p.Exited():
			return fmt.Errorf("%s %w (%v) before it was ready; %s", p.Name, errExited, p.Wait(), p.LogEnd(logTailLines))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready within %s (last check: %v); %s", p.Name, timeout, last, p.LogEnd(logTailLines))
		case <-tick.C:
		}
	}
}

// logContains reports whether p's log holds s (for instance a bind error).
func logContains(p *testproc.Proc, s string) bool {
	b, err := os.ReadFile(p.LogPath)
	return err == nil && bytes.Contains(b, []byte(s))
}

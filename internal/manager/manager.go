// Package manager runs what the command line describes: the drain engine with its admin client, metrics and
// Events (the stack, stack.go), the HTTP API's listeners (api.go), and the three ways a drain is driven —
// Serve (a sidecar's API), Run (Envoy as a child) and Drain (one drain, for hooks and people), with the
// --via path to a sidecar (via.go). Its configurations are plain values validated by internal/cli, which
// also turns this package's errors into exit codes: nothing here knows a flag.
package manager

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
)

// ErrReported is a failure already told to the user in the log: the command exits 1 and adds nothing.
var ErrReported = errors.New("failure reported")

// ErrMisconfigured is a drain that ended misconfigured (Envoy's admin address is wrong), already told in the
// log; it is an ErrReported, and the command exits 3.
var ErrMisconfigured = fmt.Errorf("%w: envoy's admin address is misconfigured", ErrReported)

// ExitStatus ends the process with this code, already explained in the log (Run: Envoy's exit status).
type ExitStatus int

func (e ExitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// signalCause is the cause a signal cancels a context with: "SIGTERM".
func signalCause(sig os.Signal) error {
	if s, ok := sig.(syscall.Signal); ok {
		return errors.New(unix.SignalName(s))
	}
	return errors.New(sig.String())
}

// signalCaller names the process itself as a drain's caller, for a signal it received.
func signalCaller(sig os.Signal) drain.Caller {
	return drain.Caller{Method: "signal " + signalCause(sig).Error()}
}

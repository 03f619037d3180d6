// Package kubelet reproduces, for processes on one machine, the order in which kubelet terminates a pod's
// containers, so the benchmark can run the peers' real binaries as their projects deploy them.
//
// The order (see /work/shared/TERMINATION.md): every container's preStop hook starts at once; a container
// gets SIGTERM when its own hook returns (or at once without a hook); at the end of the grace period a hook
// still running is cut, its container gets SIGTERM and, MinStopGrace later, SIGKILL; a container still
// running at the end of the grace period gets SIGKILL. Nothing orders one container against another.
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// MinStopGrace is the time kubelet still gives a container whose hook used up the grace period, between
// SIGTERM and SIGKILL (kubelet's minimum grace period of 2 s).
const MinStopGrace = 2 * time.Second

// Process is a container's main process.
type Process interface {
	Signal(os.Signal) error
	// Exited is closed once the process has exited and been reaped.
	Exited() <-chan struct{}
}

// Hook is a preStop hook. Run returns when the hook ends or ctx (the grace period) is done; it must not
// outlive ctx.
type Hook interface {
	Run(ctx context.Context) HookResult
}

// Container is one container of the pod.
type Container struct {
	Name string
	// Main is the container's process. nil: the caller stops it itself once Hook has returned (the bench
	// does so for Envoy, whose SIGTERM it times).
	Main Process
	// PreStop is the container's preStop hook; nil for none.
	PreStop Hook
}

// HookKind classifies how a hook ended.
type HookKind string

const (
	HookNone          HookKind = ""               // no hook
	HookAnswered      HookKind = "answered"       // an httpGet hook got an HTTP answer (Status)
	HookNoResponse    HookKind = "no response"    // an httpGet hook's connection failed or closed without an answer
	HookExited        HookKind = "exited"         // an exec hook's command exited (Status is its exit code, -1 if killed)
	HookNeverReturned HookKind = "never returned" // the hook was still running at the end of the grace period
)

// HookResult is how one hook ended.
type HookResult struct {
	Kind   HookKind
	Status int    // HTTP status (HookAnswered) or exit code (HookExited)
	Err    string // the error behind HookNoResponse, or the exec error
	Start  time.Time
	End    time.Time
}

// String is the hook outcome as the report shows it: "answered 200", "no response", "exit 0", ...
func (r HookResult) String() string {
	switch r.Kind {
	case HookAnswered:
		return fmt.Sprintf("answered %d", r.Status)
	case HookExited:
		return fmt.Sprintf("exit %d", r.Status)
	case HookNone:
		return "no hook"
	}
	return string(r.Kind)
}

// ContainerResult is what happened to one container.
type ContainerResult struct {
	Name    string
	Hook    HookResult
	SIGTERM time.Time // when SIGTERM was sent (zero: Main is nil, or it had exited already)
	Exited  time.Time // when Main exited (zero: Main is nil, or it was still running when killed)
	Killed  bool      // SIGKILL at the end of the grace period
}

// Termination is a pod's termination in progress, started by [Terminate].
type Termination struct {
	hookDone map[string]chan struct{}
	results  []ContainerResult // results[i].Hook is written before hookDone of container i is closed
	index    map[string]int
	done     chan struct{}
}

// Terminate begins terminating the containers at once with grace period grace, and returns. ctx ending
// acts as the end of the grace period. Every container's hook starts now; see the package comment for
// the order.
func Terminate(ctx context.Context, grace time.Duration, cs []Container) *Termination {
	t := &Termination{hookDone: map[string]chan struct{}{}, results: make([]ContainerResult, len(cs)),
		index: map[string]int{}, done: make(chan struct{})}
	graceCtx, cancel := context.WithTimeout(ctx, grace)
	var wg sync.WaitGroup
	for i, c := range cs {
		hd := make(chan struct{})
		t.hookDone[c.Name], t.index[c.Name] = hd, i
		wg.Go(func() { stop(graceCtx, c, &t.results[i], hd) })
	}
	go func() {
		wg.Wait()
		cancel()
		close(t.done)
	}()
	return t
}

// Hook waits until the named container's hook has returned (at once if it has none) and returns how it ended.
func (t *Termination) Hook(name string) HookResult {
	<-t.hookDone[name]
	return t.results[t.index[name]].Hook
}

// Done is closed when every container has stopped (or been killed).
func (t *Termination) Done() <-chan struct{} { return t.done }

// Results waits for Done and returns one result per container, in the order given to Terminate.
func (t *Termination) Results() []ContainerResult {
	<-t.done
	return t.results
}

// stop runs one container's termination: hook, SIGTERM, and SIGKILL at the end of the grace period.
func stop(graceCtx context.Context, c Container, res *ContainerResult, hookDone chan struct{}) {
	res.Name = c.Name
	if c.PreStop != nil {
		res.Hook = c.PreStop.Run(graceCtx)
	}
	close(hookDone)
	if c.Main == nil {
		return
	}
	killCtx := graceCtx
	if res.Hook.Kind == HookNeverReturned {
		// The hook used up the grace period: kubelet still gives the container MinStopGrace.
		var cancel context.CancelFunc
		killCtx, cancel = context.WithTimeout(context.WithoutCancel(graceCtx), MinStopGrace)
		defer cancel()
	}
	select {
	case <-c.Main.Exited():
		res.Exited = time.Now() // it died during the hook (a sidecar's own failure)
		return
	default:
	}
	res.SIGTERM = time.Now()
	c.Main.Signal(syscall.SIGTERM)
	select {
	case <-c.Main.Exited():
		res.Exited = time.Now()
	case <-killCtx.Done():
		res.Killed = true
		c.Main.Signal(syscall.SIGKILL)
		<-c.Main.Exited()
	}
}

// ExecHook is an exec preStop hook: a command run beside the container's process.
type ExecHook struct {
	Path string
	Args []string
	Env  []string  // the whole environment; nil: none at all (an exec hook gets the container's, set by the caller)
	Log  io.Writer // the command's stdout and stderr (nil: discarded, as kubelet does but for its event)
}

// Run runs the command; at the end of ctx it is killed and the hook never returned.
func (h ExecHook) Run(ctx context.Context) HookResult {
	r := HookResult{Start: time.Now()}
	cmd := exec.CommandContext(ctx, h.Path, h.Args...)
	cmd.Env = h.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Stdout, cmd.Stderr = h.Log, h.Log
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	r.End = time.Now()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.Kind = HookNeverReturned
	case err == nil:
		r.Kind = HookExited
	case errors.As(err, &exit):
		r.Kind, r.Status, r.Err = HookExited, exit.ExitCode(), err.Error()
	default:
		r.Kind, r.Status, r.Err = HookExited, -1, err.Error()
	}
	return r
}

// HTTPGetHook is an httpGet preStop hook: kubelet's GET to the container's port.
type HTTPGetHook struct {
	URL    string
	Client *http.Client // nil: a client of its own, with no timeout but the grace period (kubelet's)
}

// Run sends the GET and reads the answer; an answer ends the hook whatever its status.
func (h HTTPGetHook) Run(ctx context.Context) HookResult {
	r := HookResult{Start: time.Now()}
	client := h.Client
	if client == nil {
		client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL, nil)
	if err != nil {
		r.End, r.Kind, r.Err = time.Now(), HookNoResponse, err.Error()
		return r
	}
	resp, err := client.Do(req)
	if err == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
	}
	r.End = time.Now()
	switch {
	case err == nil:
		r.Kind, r.Status = HookAnswered, resp.StatusCode
	case ctx.Err() != nil:
		r.Kind = HookNeverReturned
	default:
		r.Kind, r.Err = HookNoResponse, err.Error()
	}
	return r
}

// Cmd is a started exec.Cmd as a Process: Exited is closed once Wait has returned.
type Cmd struct {
	*exec.Cmd
	exited chan struct{}
	err    error
}

// Start starts cmd and reaps it in the background.
func Start(cmd *exec.Cmd) (*Cmd, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Cmd{Cmd: cmd, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// Signal sends sig to the process (nothing once it has exited).
func (c *Cmd) Signal(sig os.Signal) error {
	select {
	case <-c.exited:
		return os.ErrProcessDone
	default:
	}
	return c.Process.Signal(sig)
}

// Exited is closed once the process has been reaped.
func (c *Cmd) Exited() <-chan struct{} { return c.exited }

// ExitStatus is how the process ended, once Exited is closed: "exit N" or "signal X".
func (c *Cmd) ExitStatus() string {
	<-c.exited
	ps := c.ProcessState
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit %d", ps.ExitCode())
}

// Kill kills the process if it still runs and waits for it.
func (c *Cmd) Kill() {
	c.Signal(syscall.SIGKILL)
	<-c.exited
}

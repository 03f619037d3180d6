package testbed

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Serve is a running `shutdown-manager serve` on a unix socket, as the sidecar of one Envoy: what the
// demo and the benchmark terminate Envoy through, the way kubelet does (Shutdown is the preStop hook).
type Serve struct {
	cmd     *exec.Cmd
	sock    string
	LogPath string // the manager's JSON log (stdout and stderr)
	client  *http.Client
	exited  chan struct{}
}

// StartServe starts `manager serve` for the admin at adminURL, listening on dir/sm.sock, and waits until it
// answers GET /healthz (bounded: 5 s).
func StartServe(ctx context.Context, manager, dir, adminURL string, extra ...string) (*Serve, error) {
	sock := filepath.Join(dir, "sm.sock")
	os.Remove(sock)
	args := append([]string{"serve", "--listen", "unix://" + sock, "--admin-address", adminURL, "--log-format", "json"}, extra...)
	m := &Serve{sock: sock, LogPath: filepath.Join(dir, "manager.log"), exited: make(chan struct{})}
	log, err := os.OpenFile(m.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	m.cmd = exec.Command(manager, args...)
	m.cmd.Stdout, m.cmd.Stderr = log, log
	// Dies with the bench (PR_SET_PDEATHSIG), whatever happens to it.
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { m.cmd.Wait(); close(m.exited) }()
	m.client = &http.Client{Transport: &http.Transport{DialContext: UnixDialer(sock)}}
	// The socket appears once the manager listens; nothing to await but the answer (bounded).
	deadline := time.Now().Add(5 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://sm/healthz", nil)
		resp, err := m.client.Do(req)
		cancel()
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return m, nil
			}
		}
		select {
		case <-m.exited:
			return nil, fmt.Errorf("shutdown-manager serve exited at start; log %s: %s", m.LogPath, tailFile(m.LogPath, 5))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			m.Kill()
			return nil, fmt.Errorf("shutdown-manager serve not answering /healthz: %v", err)
		}
		time.Sleep(5 * time.Millisecond) // readiness poll of a just-started process
	}
}

// Shutdown is the preStop hook: GET /shutdown, which blocks until the drain releases.
func (m *Serve) Shutdown(ctx context.Context) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://sm/shutdown", nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// Pid returns the manager's process id.
func (m *Serve) Pid() int { return m.cmd.Process.Pid }

// Stop sends SIGTERM and waits up to 10 s for the exit (the manager waits --trigger-wait for a late
// /shutdown when none came), then kills it.
func (m *Serve) Stop() {
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		m.Kill()
	}
}

// Kill kills the manager and waits for it.
func (m *Serve) Kill() {
	m.cmd.Process.Kill()
	<-m.exited
}

// tailFile returns the last n lines of the file at path, or "" if it cannot be read.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

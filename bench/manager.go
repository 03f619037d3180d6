package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// serveProc is a running `shutdown-manager serve` on a unix socket, as the sidecar of one Envoy.
type serveProc struct {
	cmd     *exec.Cmd
	sock    string
	logPath string
	client  *http.Client
	exited  chan struct{}
}

// startServe starts `manager serve` for the admin at adminURL, listening on dir/sm.sock, and waits until it
// answers GET /healthz (bounded: 5 s).
func startServe(ctx context.Context, manager, dir, adminURL string, extra []string) (*serveProc, error) {
	sock := filepath.Join(dir, "sm.sock")
	os.Remove(sock)
	args := append([]string{"serve", "--listen", "unix://" + sock, "--admin-address", adminURL, "--log-format", "json"}, extra...)
	m := &serveProc{sock: sock, logPath: filepath.Join(dir, "manager.log"), exited: make(chan struct{})}
	log, err := os.OpenFile(m.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
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
	m.client = &http.Client{Transport: &http.Transport{DialContext: testbed.UnixDialer(sock)}}
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
			return nil, fmt.Errorf("shutdown-manager serve exited at start; log %s: %s", m.logPath, tail(m.logPath, 5))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			m.kill()
			return nil, fmt.Errorf("shutdown-manager serve not answering /healthz: %v", err)
		}
		time.Sleep(5 * time.Millisecond) // readiness poll of a just-started process
	}
}

// shutdown is the preStop hook: GET /shutdown, which blocks until the drain releases.
func (m *serveProc) shutdown(ctx context.Context) (int, string, error) {
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

// pid returns the manager's process id.
func (m *serveProc) pid() int { return m.cmd.Process.Pid }

// stop sends SIGTERM and waits up to 10 s for the exit (the manager waits --trigger-wait for a late
// /shutdown when none came), then kills it.
func (m *serveProc) stop() {
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		m.kill()
	}
}

func (m *serveProc) kill() {
	m.cmd.Process.Kill()
	<-m.exited
}

// drainFinished reads the time and outcome of the manager's JSON log line "drain finished" from path.
func drainFinished(path string) (time.Time, string) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, "no log"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var l struct {
			Time    time.Time `json:"time"`
			Msg     string    `json:"msg"`
			Outcome string    `json:"outcome"`
		}
		if json.Unmarshal(line, &l) == nil && l.Msg == "drain finished" {
			return l.Time, l.Outcome
		}
	}
	return time.Time{}, "no drain finished line"
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// procStat is what /proc/PID says about a process.
type procStat struct {
	cpu   time.Duration // utime + stime
	rssKB int64         // VmRSS
	hwmKB int64         // VmHWM (peak RSS)
}

// clockTick is USER_HZ, 100 on every Linux platform Go supports.
const clockTick = 100

// readProc reads /proc/PID/stat and /proc/PID/status.
func readProc(pid int) (procStat, error) {
	var ps procStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ps, err
	}
	// The command name (field 2) may hold spaces; the fields after its closing parenthesis are fixed.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ps, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return ps, errors.New("short /proc stat")
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14
	st, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	ps.cpu = time.Duration(ut+st) * time.Second / clockTick
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ps, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			ps.rssKB = n
		case "VmHWM":
			ps.hwmKB = n
		}
	}
	return ps, nil
}

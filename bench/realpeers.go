package main

// The peers' real binaries, run as their projects deploy them (see /work/shared/ANCHORS.md): the peer's
// sidecar server as the shutdown-manager container's process, the peer's `envoy shutdown` command as that
// container's exec preStop hook, and an httpGet preStop hook on the Envoy container to the sidecar. The
// order of a pod's termination is kubelet's (package kubelet): each container gets SIGTERM when its own
// hook returns. bench/run.sh gives it Contour's real binary by default (-contour-bin: the one the e2e runs,
// built by scripts/kube-binaries.sh --contour from tools/kube-oldest/go.mod); Envoy Gateway's only when the user
// gives one (-envoy-gateway-bin).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/bench/kubelet"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// The peers' deployments, as their projects write them.
const (
	contourGrace = 300 * time.Second // terminationGracePeriodSeconds of Contour's Envoy DaemonSet
	egGrace      = 360 * time.Second // Envoy Gateway: drain timeout (60 s) + 300 s

	// Envoy Gateway's sidecar listens on this port and its `envoy shutdown` dials Envoy's admin on
	// egAdminPort; neither is a flag. Its ready file is a fixed path too.
	egSidecarPort = 19002
	egAdminPort   = 19000
	egReadyFile   = "/tmp/shutdown-ready"
)

// podSpec is one peer's pod: its sidecar server, its exec hook and Envoy's httpGet hook.
type podSpec struct {
	bin         string
	sidecarArgs []string
	healthz     string // URL of the sidecar's liveness endpoint
	hookArgs    []string
	envoyHook   string // URL of Envoy's httpGet preStop hook
	readyFile   string // removed before and after each termination
	grace       time.Duration
}

// contourPod is Contour's deployment: `contour envoy shutdown-manager` (port 8090 in a pod; a free port
// here) with its ready file in the shared emptyDir, `contour envoy shutdown` as its preStop hook talking to
// Envoy's admin unix socket, and Envoy's preStop GET /shutdown.
func contourPod(bin, dir, adminSock string, port int) podSpec {
	ready := filepath.Join(dir, "ok")
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	return podSpec{
		bin:         bin,
		sidecarArgs: []string{"envoy", "shutdown-manager", "--serve-port", strconv.Itoa(port), "--ready-file", ready},
		healthz:     base + "/healthz",
		hookArgs:    []string{"envoy", "shutdown", "--admin-address", adminSock, "--ready-file", ready},
		envoyHook:   base + "/shutdown",
		readyFile:   ready,
		grace:       contourGrace,
	}
}

// egPod is Envoy Gateway's deployment: `envoy-gateway envoy shutdown-manager` (port 19002), `envoy-gateway
// envoy shutdown` with its default drain timeouts as the preStop hook, Envoy's preStop GET /shutdown/ready.
func egPod(bin string) podSpec {
	base := "http://127.0.0.1:" + strconv.Itoa(egSidecarPort)
	return podSpec{
		bin:         bin,
		sidecarArgs: []string{"envoy", "shutdown-manager"},
		healthz:     base + "/healthz",
		hookArgs: []string{"envoy", "shutdown", "--drain-timeout", egDrainTimeout.String(),
			"--min-drain-duration", egMinDrain.String(), "--exit-at-connections", "0"},
		envoyHook: base + "/shutdown/ready",
		readyFile: egReadyFile,
		grace:     egGrace,
	}
}

// freePort returns a port on 127.0.0.1 free a moment ago (the peer's sidecar cannot be handed a listener).
func freePort() (int, error) {
	ports, err := testproc.FreePorts("127.0.0.1", 1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// portFree reports an error if something on this machine already listens on 127.0.0.1:port.
func portFree(port int) error {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return fmt.Errorf("port %d is taken (Envoy Gateway's peer needs it; it cannot be moved): %w", port, err)
	}
	return l.Close()
}

// sidecar is a peer's running sidecar server.
type sidecar struct {
	cmd *kubelet.Cmd
	log string
}

// startSidecar starts the peer's sidecar server and waits (bounded: 10 s) until its /healthz answers.
func startSidecar(ctx context.Context, spec podSpec, dir string) (*sidecar, error) {
	if err := os.Remove(spec.readyFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing the ready file: %w", err)
	}
	logPath := filepath.Join(dir, "peer-sidecar.log")
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(spec.bin, spec.sidecarArgs...)
	cmd.Env = hookEnv()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the bench
	c, err := kubelet.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", spec.bin, err)
	}
	s := &sidecar{cmd: c, log: logPath}
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get(spec.healthz)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-c.Exited():
			return nil, fmt.Errorf("%s %v exited at start (%s); log %s", spec.bin, spec.sidecarArgs, c.ExitStatus(), logPath)
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.Kill()
			return nil, fmt.Errorf("%s %v: %s not answering within 10 s (%v); log %s", spec.bin, spec.sidecarArgs, spec.healthz, err, logPath)
		}
		time.Sleep(20 * time.Millisecond) // readiness poll of a just-started process
	}
}

// hookEnv is the environment of the peers' processes: no KUBERNETES_SERVICE_HOST, so Envoy Gateway's hook
// logs to its own stdout (our log file) rather than to /proc/1/fd/1.
func hookEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
}

// preparePod starts the peer's sidecar beside r's Envoy; release runs the pod's termination in kubelet's
// order and returns when Envoy's hook returns (kubelet then sends Envoy SIGTERM: terminate does), with
// the sidecar's own story to follow. bench is the bench's context: the pod's termination is bounded by the
// grace period (the peer's, or the bench's cap if shorter), not by the end of release's context.
func preparePod(bench context.Context, c *config, r *rig, spec podSpec) (func(context.Context) releaseResult, func(), error) {
	sc, err := startSidecar(bench, spec, r.dir)
	if err != nil {
		return nil, nil, err
	}
	var term *kubelet.Termination
	release := func(context.Context) releaseResult {
		hookLog, err := os.OpenFile(filepath.Join(r.dir, "peer-hook.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return releaseResult{at: time.Now(), outcome: "error: " + err.Error()}
		}
		grace := min(spec.grace, c.capAfter)
		term = kubelet.Terminate(bench, grace, []kubelet.Container{
			{Name: "shutdown-manager", Main: sc.cmd, PreStop: kubelet.ExecHook{Path: spec.bin, Args: spec.hookArgs, Env: hookEnv(), Log: hookLog}},
			{Name: "envoy", PreStop: kubelet.HTTPGetHook{URL: spec.envoyHook}}, // Envoy's SIGTERM: terminate's
		})
		go func() { <-term.Done(); hookLog.Close() }()
		h := term.Hook("envoy")
		rr := releaseResult{at: h.End, hook: h.String()}
		cut := h.Kind == kubelet.HookNeverReturned
		byCap := grace < spec.grace // the bench's cap, not the peer's grace period, ended the termination
		if cut {
			rr.capped = true
			if byCap {
				rr.hook = atCap
			}
		}
		rr.sidecar = func() sidecarStory {
			res := term.Results()[0]
			st := sidecarStory{Hook: res.Hook.String(), Exit: sc.cmd.ExitStatus()}
			if res.Hook.Kind == kubelet.HookNeverReturned && byCap {
				st.Hook = atCap
			}
			if res.Killed {
				st.Exit += " (SIGKILL at the grace end)"
			}
			_, ferr := os.Stat(spec.readyFile)
			st.Claims = claims(res.Hook, h, ferr == nil)
			if st.Claims == noVerdict && byCap {
				st.Claims = "none within the bench's cap"
			}
			return st
		}
		switch {
		case h.Kind == kubelet.HookAnswered && h.Status < 300:
			rr.outcome = "released"
		case h.Kind == kubelet.HookAnswered:
			rr.outcome = fmt.Sprintf("answered %d", h.Status)
		case h.Kind == kubelet.HookNoResponse:
			rr.outcome = "released (hook got no response)"
		}
		return rr
	}
	cleanup := func() {
		if term != nil {
			<-term.Done() // bounded by the grace period
		}
		sc.cmd.Kill()
		os.Remove(spec.readyFile)
	}
	return release, cleanup, nil
}

// claims is the verdict the peer gives: its exec hook exiting 0 or writing its ready file, or its sidecar
// answering Envoy's hook with a 2xx, says the drain succeeded.
func claims(sidecarHook, envoyHook kubelet.HookResult, readyWritten bool) string {
	switch {
	case sidecarHook.Kind == kubelet.HookExited && sidecarHook.Status == 0 && readyWritten:
		return "success (exit 0, ready file written)"
	case sidecarHook.Kind == kubelet.HookExited && sidecarHook.Status == 0:
		return "success (exit 0)"
	case envoyHook.Kind == kubelet.HookAnswered && envoyHook.Status < 300:
		return fmt.Sprintf("success (answered %d)", envoyHook.Status)
	case sidecarHook.Kind == kubelet.HookExited:
		return fmt.Sprintf("failure (exit %d)", sidecarHook.Status)
	case envoyHook.Kind == kubelet.HookAnswered:
		return fmt.Sprintf("failure (answered %d)", envoyHook.Status)
	}
	return noVerdict
}

// noVerdict: neither hook returned within the grace period.
const noVerdict = "no verdict (never returned)"

// prepareRealContour runs Contour's binary; r's Envoy has its admin on a unix socket (Contour's way).
func prepareRealContour(bench context.Context, r *rig, _ tuning) (func(context.Context) releaseResult, func(), error) {
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	return preparePod(bench, r.c, r, contourPod(r.c.contourBin, r.dir, filepath.Join(r.dir, "admin.sock"), port))
}

// prepareRealEG runs Envoy Gateway's binary; r's Envoy has its admin on 127.0.0.1:19000 (Envoy Gateway's).
func prepareRealEG(bench context.Context, r *rig, _ tuning) (func(context.Context) releaseResult, func(), error) {
	if err := portFree(egSidecarPort); err != nil {
		return nil, nil, err
	}
	return preparePod(bench, r.c, r, egPod(r.c.egBin))
}

// peerFootprint measures a peer's sidecar server idle: binary size, RSS after a second, CPU over
// c.footIdle.
func peerFootprint(ctx context.Context, c *config, name string, spec podSpec, dir string) (PeerFootprint, error) {
	pf := PeerFootprint{Name: name}
	fi, err := os.Stat(spec.bin)
	if err != nil {
		return pf, err
	}
	pf.BinaryBytes = fi.Size()
	sc, err := startSidecar(ctx, spec, dir)
	if err != nil {
		return pf, err
	}
	defer sc.cmd.Kill()
	pid := sc.cmd.Process.Pid
	sleepCtx(ctx, time.Second) // let the process settle before measuring (deliberate)
	p0, err := readProc(pid)
	if err != nil {
		return pf, err
	}
	sleepCtx(ctx, c.footIdle) // the measurement window
	p1, err := readProc(pid)
	if err != nil {
		return pf, err
	}
	pf.RSSKB, pf.MeasuredS = p1.rssKB, c.footIdle.Seconds()
	pf.CPUSecPerMinute = (p1.cpu - p0.cpu).Seconds() / c.footIdle.Seconds() * 60
	return pf, nil
}

// PeerFootprint is a peer's sidecar server, measured idle by this bench.
type PeerFootprint struct {
	Name            string  `json:"name"`
	BinaryBytes     int64   `json:"binary_bytes"`
	RSSKB           int64   `json:"rss_kb"`
	MeasuredS       float64 `json:"measured_s"`
	CPUSecPerMinute float64 `json:"cpu_s_per_min"`
}

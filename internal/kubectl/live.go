package kubectl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// Live is what the manager in a pod says of its drain now: its GET /status, read through the API server's
// pods/proxy (the API server connects to the pod's IP and port). Only a manager with an HTTP API on a port has
// one: sidecar mode with --hook http, agent mode with --listen; hook mode and a unix socket have none.
type Live struct {
	Port int `json:"port,omitempty"`
	// State is the drain's phase (idle, delay, min_duration, quiet, waiting, released); Open what --count
	// counts at the last poll (nil before one); Outcome how a released drain ended.
	State     string `json:"state,omitempty"`
	Open      *int64 `json:"open,omitempty"`
	Outcome   string `json:"outcome,omitempty"`
	Envoy     string `json:"envoyState,omitempty"`
	LastError string `json:"lastError,omitempty"`
	// Error is why /status could not be read (the API server's refusal, the pod not answering).
	Error string `json:"error,omitempty"`
	// Exec is set where `check --live` ran `shutdown-manager status` in the drain's container instead (liveExec):
	// the container and the command, which Envoy, LastError and Error then report.
	Exec *LiveExec `json:"exec,omitempty"`
}

// LiveExec is the command `check --live` ran in a pod through pods/exec, and where.
type LiveExec struct {
	Container string   `json:"container"`
	Command   []string `json:"command"`
	Admin     string   `json:"admin,omitempty"` // the admin address the command read Envoy at, as it says
}

// Text is Live in a table cell: "waiting 12", "idle", "released drained", or the error's reason.
func (l *Live) Text() string {
	switch {
	case l == nil:
		return "<none>"
	case l.Error != "":
		return "error"
	}
	s := l.State
	if l.Open != nil && l.State != "idle" {
		s += " " + strconv.FormatInt(*l.Open, 10)
	}
	if l.Outcome != "" {
		s += " " + l.Outcome
	}
	return s
}

// apiPort is the TCP port of the manager's HTTP API in pod p: the --listen of a container running
// `shutdown-manager serve` or `run` (its command and arguments up to a "--"), or 0 when it has none there.
func apiPort(p corev1.Pod) int {
	var containers []corev1.Container
	containers = append(containers, p.Spec.InitContainers...) // a native sidecar
	containers = append(containers, p.Spec.Containers...)
	for _, c := range containers {
		words := append(append([]string(nil), c.Command...), c.Args...)
		manager := false
		for i, w := range words {
			if w == "--" {
				break
			}
			if w == "serve" || w == "run" {
				manager = true
			}
			v, ok := strings.CutPrefix(w, "--listen=")
			if !ok && w == "--listen" && i+1 < len(words) {
				v, ok = words[i+1], true
			}
			if !ok || !manager || strings.Contains(v, "://") {
				continue
			}
			if _, port, err := net.SplitHostPort(v); err == nil {
				if n, err := strconv.Atoi(port); err == nil && n > 0 {
					return n
				}
			}
		}
	}
	return 0
}

// live reads the /status of the manager of pod p through pods/proxy, or nil when the pod has no API port or
// no IP (not running yet).
func live(ctx context.Context, api Getter, p corev1.Pod) *Live {
	port := apiPort(p)
	if port == 0 || p.Status.PodIP == "" {
		return nil
	}
	l := &Live{Port: port}
	path := "/api/v1/namespaces/" + url.PathEscape(p.Namespace) + "/pods/" + url.PathEscape(p.Name+":"+strconv.Itoa(port)) + "/proxy/status"
	var st struct {
		State      string `json:"state"`
		Open       *int64 `json:"open"`
		Outcome    string `json:"outcome"`
		EnvoyState string `json:"envoy_state"`
		LastError  string `json:"last_error"`
	}
	if err := getJSON(ctx, api, path, nil, &st); err != nil {
		l.Error = fmt.Sprintf("reading /status through pods/proxy: %v", err)
		return l
	}
	l.State, l.Open, l.Outcome, l.Envoy, l.LastError = st.State, st.Open, st.Outcome, st.EnvoyState, st.LastError
	return l
}

// Execer runs a command in a container of a pod through the API server's pods/exec, with no stdin and no TTY
// (kubeapi.Client.Exec): code is the command's exit status once it ran, err the exec's own failure.
type Execer interface {
	Exec(ctx context.Context, namespace, pod, container string, command []string, stdout, stderr io.Writer) (code int, err error)
}

// exitUsage is the manager's exit status for bad flags or arguments (cli.ExitUsage).
const exitUsage = 2

// execTimeout bounds `check --live`'s exec in one pod: the API server's stream to kubelet, and `status`'s reads
// of Envoy's admin API.
const execTimeout = 30 * time.Second

// execOutputMax is as much of the command's stdout and stderr as liveExec keeps: `status -o json` writes a few
// kilobytes; a binary that writes more is not that command.
const execOutputMax = 1 << 20

// liveExec is `check --live` where the manager has no API port (hook mode, the default; agent mode; a sidecar on
// a unix socket): the drain's own binary runs `shutdown-manager status` in the drain's own container, with the
// drain's --admin-address if it has one (else, as the drain, it reads Envoy's process). Envoy answering it is
// evidence that the drain will reach Envoy from there; the command failing is evidence it will not. It needs
// create on pods/exec, which can run anything in the pod, so it is asked only with --live.
func liveExec(ctx context.Context, x Execer, in *injection) *Live {
	l := &Live{Exec: &LiveExec{Container: in.drainer.Name}}
	bin := ""
	switch {
	case in.drainer.Name == inject.SidecarContainer && len(in.drainer.Command) == 0:
		bin = inject.ImageBinary // the sidecar runs our image's entrypoint with its arguments
	case len(in.words) > 0:
		bin = in.words[0]
	}
	if !path.IsAbs(bin) {
		l.Error = fmt.Sprintf("the drain's command line does not start with the binary's path (%q): nothing to exec", bin)
		return l
	}
	l.Exec.Command = []string{bin, "status", "-o", "json"}
	if addr, ok := in.flag("admin-address"); ok {
		l.Exec.Command = append(l.Exec.Command, "--admin-address="+addr)
	}
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	var stdout, stderr capped
	code, err := x.Exec(ctx, in.pod.Namespace, in.pod.Name, in.drainer.Name, l.Exec.Command, &stdout, &stderr)
	said := lastLine(stderr.String())
	switch {
	case err != nil:
		l.Error = err.Error()
	case code == exitUsage:
		// Not an answer about Envoy: a binary that does not take these flags (another version).
		l.Error = fmt.Sprintf("%s: exit %d (bad usage): %s", strings.Join(l.Exec.Command, " "), code, said)
	case code != 0:
		l.LastError = fmt.Sprintf("%s in container %s: exit %d: %s", strings.Join(l.Exec.Command, " "), in.drainer.Name, code, said)
	default:
		var rep struct {
			Admin      string `json:"admin_address"`
			EnvoyState string `json:"envoy_state"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || rep.EnvoyState == "" {
			l.Error = fmt.Sprintf("%s: exit 0 but no envoy_state in its output (%v): %.200q", strings.Join(l.Exec.Command, " "), err, stdout.String())
			return l
		}
		l.Envoy, l.Exec.Admin = rep.EnvoyState, rep.Admin
	}
	return l
}

// capped keeps the first execOutputMax bytes written to it and drops the rest, without failing the writer.
type capped struct{ bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := execOutputMax - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// lastLine is the last non-empty line of s, where a command says why it failed.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

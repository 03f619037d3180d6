package kubectl

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
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

//go:build e2e && linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// The external load balancer of the lb-* scenarios: HAProxy from Debian on the host, configured by
// docs/examples/haproxy.cfg (the file docs/load-balancers.md shows), its backends the Envoy pods' IPs read once at
// its start (it does not watch Kubernetes, as a cloud load balancer with static targets, NLB in IP mode, does not),
// checked by HTTP on each pod's readiness listener with HAProxy's default check (HTTP/1.0, no Host). The timing
// (the file's `inter 3s fall 3`): the readiness listener answers 503 from the drain's start, so the pod is marked
// down between 2 and 3 intervals after it, 6–9 s, at a check phase no one chooses: always after the 5 s floor of
// today's fixed wait (so the control loses requests in every run, not by luck of the phase) and within the quiet
// period's reach. With 2 failures (3–6 s) the control would lose requests at some phases only.
const haproxyExample = "docs/examples/haproxy.cfg"

// lbClients and lbInterval: the load through a load balancer, each request a new connection (what an LB passing
// TCP through brings a backend): 4 clients, one request each 20 ms, about 150 a second, a third to each pod.
const (
	lbClients  = 4
	lbInterval = 20 * time.Millisecond
)

// lbMarkDownWait bounds the wait, once the pod is gone, for HAProxy to mark it down: 3 checks 3 s apart, each
// bounded by the file's 2 s check timeout, and then some.
const lbMarkDownWait = 20 * time.Second

// lbLongClients and lbLongRequest: the long requests of a scenario with long set, each client one keep-alive
// connection through the load balancer sending them back to back (started before the per-request load, so that
// HAProxy's round robin spreads them over the pods). A request that began in the warm-up (loadWarmUp) is in flight
// until 17–20 s after the delete, long after HAProxy marks the pod down (6–9 s): the test asserts that the pod
// had such sessions then.
const (
	lbLongClients = 6
	lbLongRequest = 20 * time.Second
)

// haproxyConfig returns docs/examples/haproxy.cfg bound to bind, its servers the pods ips (by name) on :8080.
// mode "tcp": the file as it is, TCP passed through, no retry and no redispatch (a connect failure reaches the
// client, as with NLB); "tcp-shutdown-sessions": the same, killing the sessions of a server it marks down
// (on-marked-down shutdown-sessions: what AWS NLB's unhealthy connection termination does by default);
// "http-retry": an L7 proxy that retries a failed connect on another pod (HTTP mode, retry-on conn-failure,
// redispatch), which hides connect failures from clients.
func haproxyConfig(root, mode, bind string, pods, ips []string) (string, error) {
	edits := []replacement{{"\n  bind :80\n", "\n  bind " + bind + "\n"}}
	switch mode {
	case "http-retry":
		edits = append(edits, replacement{"  mode tcp\n  retries 0\n  no option redispatch\n",
			"  mode http\n  retries 3\n  retry-on conn-failure\n  option redispatch 1\n"})
	case "tcp-shutdown-sessions":
		edits = append(edits, replacement{" inter 3s fall 3 rise 2\n", " inter 3s fall 3 rise 2 on-marked-down shutdown-sessions\n"})
	}
	return haproxyConfigFrom(root, haproxyExample, edits, pods, ips, 8080)
}

// haproxyConfigFrom returns the HAProxy configuration example (a file of docs/examples) with edits made (each must
// apply) and its server lines replaced by one per name, at ips[i]:port.
func haproxyConfigFrom(root, example string, edits []replacement, names, ips []string, port int) (string, error) {
	text, err := readEdited(root, example, edits)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, l := range strings.SplitAfter(text, "\n") {
		if !strings.HasPrefix(l, "  server ") {
			b.WriteString(l)
		}
	}
	for i, n := range names {
		fmt.Fprintf(&b, "  server %s %s:%d\n", n, ips[i], port)
	}
	return b.String(), nil
}

// haproxy is a running HAProxy; its server state changes (stderr, in the foreground) are kept with the time they
// were read.
type haproxy struct {
	Addr string
	cmd  *exec.Cmd
	done chan struct{}

	mu    sync.Mutex
	lines []stampedLine
}

type stampedLine struct {
	at   time.Time
	text string
}

func startHAProxy(ctx context.Context, t *testing.T, c *Cluster, root, mode string, pods, ips []string) *haproxy {
	t.Helper()
	return launchHAProxy(ctx, t, c, "haproxy-"+mode+".cfg", func(bind string) (string, error) {
		return haproxyConfig(root, mode, bind, pods, ips)
	})
}

// launchHAProxy starts HAProxy on a free loopback port with the configuration config returns for that bind
// address (written to file, in the cluster's directory); t's cleanup ends it and logs its lines.
func launchHAProxy(ctx context.Context, t *testing.T, c *Cluster, file string, config func(bind string) (string, error)) *haproxy {
	t.Helper()
	port, err := freePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	h := &haproxy{Addr: fmt.Sprintf("127.0.0.1:%d", port), done: make(chan struct{})}
	text, err := config(h.Addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(c.Dir, file)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "haproxy", "-c", "-f", cfg).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	h.cmd = exec.Command("haproxy", "-db", "-f", cfg) // the teardown ends it, by its PID
	stderr, err := h.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("starting haproxy: %v", err)
	}
	go func() {
		defer close(h.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			h.mu.Lock()
			h.lines = append(h.lines, stampedLine{time.Now(), sc.Text()})
			h.mu.Unlock()
		}
		_ = h.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = h.cmd.Process.Kill()
		<-h.done
		t.Logf("haproxy's log:\n%s", h.log())
	})
	return h
}

func (h *haproxy) log() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, l := range h.lines {
		fmt.Fprintf(&b, "%s %s\n", l.at.UTC().Format("15:04:05.000"), l.text)
	}
	return b.String()
}

// down returns when HAProxy reported server down after since, and its reason; ok false if it did not.
func (h *haproxy) down(server string, since time.Time) (at time.Duration, reason string, ok bool) {
	return h.marked(server, "DOWN", since)
}

// up returns when HAProxy reported server up (again) after since, and its reason; ok false if it did not.
func (h *haproxy) up(server string, since time.Time) (at time.Duration, reason string, ok bool) {
	return h.marked(server, "UP", since)
}

// marked returns the first line after since where HAProxy reported server as state (DOWN or UP): how long after
// since it was read, and the line's reason.
func (h *haproxy) marked(server, state string, since time.Time) (at time.Duration, reason string, ok bool) {
	at, text, ok := h.markedLine(server, state, since)
	if !ok {
		return 0, "", false
	}
	reason = text
	if _, r, found := strings.Cut(text, "reason: "); found {
		reason, _, _ = strings.Cut(r, ", check duration")
	}
	return at, reason, true
}

// markedLine returns the first line after since where HAProxy reported server as state, and when it was read.
func (h *haproxy) markedLine(server, state string, since time.Time) (at time.Duration, text string, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.lines {
		if !l.at.Before(since) && strings.Contains(l.text, "Server envoy/"+server+" is "+state) {
			return l.at.Sub(since), l.text, true
		}
	}
	return 0, "", false
}

var sessionsActive = regexp.MustCompile(`(\d+) sessions active`)

// activeAtDown returns the sessions HAProxy had open to server when it marked it down after since (its log line's
// "N sessions active"); ok false if it did not mark it down or did not say.
func (h *haproxy) activeAtDown(server string, since time.Time) (int, bool) {
	_, text, ok := h.markedLine(server, "DOWN", since)
	m := sessionsActive.FindStringSubmatch(text)
	if !ok || m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

// podIPs returns the IP of each pod.
func podIPs(ctx context.Context, t *testing.T, c *Cluster, ns string, pods []string) []string {
	t.Helper()
	var ips []string
	for _, p := range pods {
		ip := strings.TrimSpace(mustKubectl(ctx, t, c, "-n", ns, "get", "pod", p, "-o", "jsonpath={.status.podIP}"))
		if ip == "" {
			t.Fatalf("pod %s has no IP", p)
		}
		ips = append(ips, ip)
	}
	return ips
}

// runLBDelete deletes the oldest of the three Envoy pods while a new connection per request runs through addr: the
// Service's ClusterIP (kube-proxy), or with s.lb HAProxy on the host in front of the pod IPs.
func runLBDelete(ctx context.Context, t *testing.T, c *Cluster, root, ns, addr string, s scenario, r row) row {
	pods := envoyPods(ctx, t, c, ns)
	if len(pods) != 3 {
		t.Fatalf("want three Envoy pods, have %v", pods)
	}
	victim := pods[0]
	var lb *haproxy
	if s.lb != "" {
		lb = startHAProxy(ctx, t, c, root, s.lb, pods, podIPs(ctx, t, c, ns, pods))
		addr = lb.Addr
		if err := waitOK(ctx, addr); err != nil {
			t.Fatalf("through HAProxy: %v\n%s", err, lb.log())
		}
	}
	var long *testbed.Load
	if s.long {
		long = testbed.KeepAlive(ctx, addr, lbLongClients, 0, "/sleep?d="+lbLongRequest.String())
	}
	l := testbed.ConnPerRequest(ctx, addr, lbClients, lbInterval, "/")
	logs := followLogs(ctx, c, ns, victim, managerContainer(s))
	if !wait(ctx, loadWarmUp) {
		t.Fatal("interrupted")
	}
	if res := l.Snapshot(); res.OK == 0 || res.Failed > 0 {
		t.Fatalf("the load before the delete: %s", res)
	}
	began := time.Now()
	mustKubectl(ctx, t, c, "-n", ns, "delete", "pod", victim, "--wait=false")
	waitGone(ctx, t, c, ns, victim)
	r.gone = time.Since(began)
	if lb != nil {
		// The load runs on until HAProxy has marked the pod down (when Envoy exited first, its checks time out:
		// later than the 503s would have): every connection it sent the pod is counted.
		_ = poll(ctx, lbMarkDownWait, func() error {
			if _, _, ok := lb.down(victim, began); !ok {
				return fmt.Errorf("HAProxy has not marked %s down", victim)
			}
			return nil
		})
	}
	if !wait(ctx, 2*time.Second) {
		t.Fatal("interrupted")
	}
	l.Drain()
	res := l.Wait()
	r.sent, r.failed, r.errors, r.connectionShut = res.Sent, res.Failed, res.Errors, res.ConnectionClose
	r.p99 = percentile(l.Latencies(), 0.99)
	var longRes testbed.Result
	if long != nil {
		// The long requests in flight end (at most lbLongRequest from now): each is counted.
		long.Drain()
		longRes = long.Wait()
		r.sent, r.failed, r.connectionShut = r.sent+longRes.Sent, r.failed+longRes.Failed, r.connectionShut+longRes.ConnectionClose
		r.errors = maps.Clone(r.errors)
		if r.errors == nil {
			r.errors = map[string]int64{}
		}
		for k, v := range longRes.Errors {
			r.errors[k] += v
		}
	}
	select {
	case <-logs.done:
	case <-time.After(10 * time.Second):
	}
	r.drain = logs.drainResults()
	if len(r.drain) == 0 {
		r.drain = []string{"no drain logged"}
	}
	reasons := podEventReasons(ctx, t, c, ns, victim)
	var notes []string
	if lb != nil {
		if at, why, ok := lb.down(victim, began); ok {
			notes = append(notes, fmt.Sprintf("HAProxy marked the pod down %s after the delete (%s)", at.Round(100*time.Millisecond), why))
		} else {
			notes = append(notes, "HAProxy never marked the pod down")
		}
	}
	reasonsText := strings.Join(logs.drainReasons(), "; ")
	cut := cutRequests(reasonsText)
	var cutEvent bool
	active, activeOK := 0, false
	if long != nil {
		active, activeOK = lb.activeAtDown(victim, began)
		notes = append(notes, fmt.Sprintf("long requests (%d clients, %s each, keep-alive): %d sent, %d failed; the drain reported %d cut by the client side; HAProxy had %d sessions on the pod when it marked it down",
			lbLongClients, lbLongRequest, longRes.Sent, longRes.Failed, cut, active))
		for _, m := range podEventMessages(ctx, t, c, ns, victim, "Drained") {
			cutEvent = cutEvent || cutRequests(m) > 0
		}
	}
	notes = append(notes, "drain: "+reasonsText)
	r.note = strings.Join(notes, "; ")
	t.Logf("%s: sent=%d failed=%d errors=%v p99=%s pod gone in %s; drains: %v; %s; Events: %v", s.name, r.sent, r.failed,
		r.errors, r.p99, r.gone.Round(time.Millisecond), r.drain, r.note, reasons)
	switch {
	case ctx.Err() != nil:
		t.Fatal("interrupted")
	case !slices.Contains(reasons, "DrainStarted") || !slices.Contains(reasons, "Drained"):
		t.Errorf("events of pod %s: %v; want DrainStarted and Drained", victim, reasons)
	case s.reportOnly:
		r.pass = true
	case s.long && (!activeOK || active == 0):
		t.Errorf("HAProxy had no session on the pod when it marked it down (%d, read: %v): this run shows nothing of sessions killed or kept", active, activeOK)
	case s.control && r.failed == 0 && s.long:
		t.Errorf("the control (HAProxy killing the sessions of the pod it marks down) lost no request: this test cannot show the drain reporting a cut")
	case s.control && r.failed == 0:
		t.Errorf("the control (the fixed floor alone behind a load balancer) lost no request: this test cannot tell the quiet period from none")
	case !s.control && r.failed > 0:
		t.Errorf("%d of %d requests failed: %v", r.failed, r.sent, r.errors)
	case s.long && r.failed > 0 && (cut == 0 || !cutEvent):
		t.Errorf("the clients lost %d requests (%v) and the drain reported %d cut by the client side (in its Drained Event: %v): the loss is hidden",
			r.failed, r.errors, cut, cutEvent)
	case s.long && r.failed == 0 && cut > 0:
		t.Errorf("no request was lost, yet the drain reported %d cut by the client side", cut)
	default:
		r.pass = true
	}
	return r
}

// clientCut finds the drain's count of requests cut by the client side in its reason (drain.Cut.Text).
var clientCut = regexp.MustCompile(`the client side cut (\d+) requests? in flight`)

// cutRequests returns the requests cut by the client side that text (a drain's reason, an Event's message)
// reports; 0 if it reports none.
func cutRequests(text string) int {
	n := 0
	for _, m := range clientCut.FindAllStringSubmatch(text, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

// drainReasons returns, from the manager's JSON log, why the floor and the quiet period ended ("drain phase
// ended") and the reason of the "drain finished" line.
func (f *logFollower) drainReasons() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var res []string
	for _, line := range strings.Split(f.text.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch m["msg"] {
		case "drain phase ended":
			if p := fmt.Sprint(m["phase"]); p == "min_duration" || p == "quiet" {
				res = append(res, fmt.Sprintf("%s ended at %v: %v", p, m["elapsed"], m["reason"]))
			}
		case "drain finished":
			res = append(res, fmt.Sprint(m["reason"]))
		}
	}
	return res
}

// wsDrainTimeout is the drain timeout of the WebSocket scenario: well under the grace period (45 s in deploy/).
const wsDrainTimeout = 15 * time.Second

// runWSDeadline holds a WebSocket through the Service to the one Envoy pod and deletes the pod: the WebSocket is
// work in flight, so the drain holds it to the deadline, the pod goes then (not at the grace period), and the
// DrainTimedOut Event says what was open.
func runWSDeadline(ctx context.Context, t *testing.T, c *Cluster, ns, addr string, r row) row {
	pods := envoyPods(ctx, t, c, ns)
	if len(pods) != 1 {
		t.Fatalf("want one Envoy pod, have %v", pods)
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ws, err := testbed.OpenWebSockets(octx, addr, 1)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	logs := followLogs(ctx, c, ns, pods[0], "envoy")
	grace := strings.TrimSpace(mustKubectl(ctx, t, c, "-n", ns, "get", "pod", pods[0], "-o", "jsonpath={.spec.terminationGracePeriodSeconds}"))
	graceSeconds, _ := strconv.Atoi(grace)
	began := time.Now()
	mustKubectl(ctx, t, c, "-n", ns, "delete", "pod", pods[0], "--wait=false")
	// Well into the drain, before its deadline: the WebSocket still echoes (the drain keeps it).
	if !wait(ctx, wsDrainTimeout-5*time.Second) {
		t.Fatal("interrupted")
	}
	during := ws.Open(2 * time.Second)
	waitGone(ctx, t, c, ns, pods[0])
	r.gone = time.Since(began)
	after := ws.Open(2 * time.Second)
	select {
	case <-logs.done:
	case <-time.After(10 * time.Second):
	}
	r.drain = logs.drainResults()
	out := mustKubectl(ctx, t, c, "-n", ns, "get", "events", "--field-selector", "involvedObject.name="+pods[0]+",reason=DrainTimedOut",
		"-o", `jsonpath={range .items[*]}{.message}{"\n"}{end}`)
	event := strings.TrimSpace(out)
	const want = "1 WebSocket/upgraded connection still open"
	r.sent = 1 // the one WebSocket, ended by Envoy's exit at the deadline (what the scenario wants), not a failure
	r.note = fmt.Sprintf("grace period %s s; WebSocket open %s into the drain: %v, after the pod went: %v; DrainTimedOut Event: %q",
		grace, wsDrainTimeout-5*time.Second, during == 1, after == 1, event)
	t.Logf("%s: pod gone in %s (drain timeout %s); drains: %v; %s", r.scenario.name, r.gone.Round(time.Millisecond),
		wsDrainTimeout, r.drain, r.note)
	switch {
	case len(r.drain) != 1 || !strings.HasPrefix(r.drain[0], "timeout"):
		t.Errorf("want one drain that ended at its deadline (outcome timeout), the manager logged %v", r.drain)
	case during != 1:
		t.Errorf("the WebSocket no longer echoed %s into the drain, before its deadline", wsDrainTimeout-5*time.Second)
	case !strings.Contains(event, want):
		t.Errorf("the DrainTimedOut Event says %q, want it to name %q", event, want)
	case r.gone >= time.Duration(graceSeconds)*time.Second:
		t.Errorf("the pod took %s to go, not less than its grace period (%d s): it was killed, not ended at the drain deadline", r.gone, graceSeconds)
	case r.gone < wsDrainTimeout:
		t.Errorf("the pod went after %s, before the drain deadline (%s), with a WebSocket open", r.gone, wsDrainTimeout)
	default:
		r.pass = true
	}
	return r
}

// checkGoneSooner fails t unless the scenario quick went sooner than slow, when both ran and passed: the quiet
// period with a low floor against today's fixed 5 s through kube-proxy.
func checkGoneSooner(t *testing.T, rows []row, quick, slow string) {
	var q, s *row
	for i := range rows {
		switch rows[i].scenario.name {
		case quick:
			q = &rows[i]
		case slow:
			s = &rows[i]
		}
	}
	if q == nil || s == nil || !q.pass || !s.pass {
		return
	}
	t.Logf("delete → pod gone through kube-proxy: %s %s, %s %s", quick, q.gone.Round(time.Millisecond), slow, s.gone.Round(time.Millisecond))
	if q.gone >= s.gone {
		t.Errorf("%s's pod went after %s, not sooner than %s's (%s)", quick, q.gone, slow, s.gone)
	}
}

//go:build e2e && linux

package e2e

// Contour's cloud shape (issue 29 item 4; make e2e-fleet, after the contour-fleet scenarios, on the same edge
// nodes): Contour's Envoy DaemonSet (its hostPorts 80 and 443 kept, as Contour ships them; no hostPort added)
// behind Contour's own `envoy` Service from the same file of its module (examples/render/contour.yaml): type
// LoadBalancer, externalTrafficPolicy Local. No cloud controller runs: the API server gives the Service its
// nodePorts and its healthCheckNodePort, and the e2e plays the cloud: HAProxy on the host
// (docs/examples/haproxy-nodeports.cfg) sends to each edge node's address on the nodePort of port 80, and checks
// each node's healthCheckNodePort (GET /healthz every 3 s, 3 failures down, 2 successes up), which the node's own
// kube-proxy answers: 200 while the node has a ready (not terminating) endpoint of the Service, 503 otherwise
// (pkg/proxy/healthcheck, LocalReadyEndpoints). Traffic that reaches a node's nodePort goes to the node's own Envoy
// only: while it terminates, to it as long as it is serving (Ready), and is dropped once it is not (KEP-1669).
//
// Measured per node: when kube-proxy's /healthz answer changed (polled by the test every 100 ms from the host),
// when the old pod's Ready condition turned False (its lastTransitionTime), when HAProxy marked the node down and
// up, the drain. Asserted: on every node the check failed during the rollout and passed again (else the scenario
// does not test what it says); the control (no manager) loses requests; the DaemonSet taken over with
// --drain-delay loses none (as the contour-fleet scenarios assert). Contour's manager and the takeover without the
// delay are reported.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
)

// haproxyNodePortsExample is the cloud load balancer's stand-in: the e2e replaces its bind address, check port and
// servers.
const haproxyNodePortsExample = "docs/examples/haproxy-nodeports.cfg"

// haproxyNodePortsCheck is the line of haproxyNodePortsExample whose port the e2e replaces by the Service's
// healthCheckNodePort.
const haproxyNodePortsCheck = "default-server check port 32000 "

// contourLBDrainDelay is the takeover's --drain-delay: the node check's mark-down, counted from the deletion, which
// is when kube-proxy's check starts failing (3 checks 3 s apart: 6-9 s, plus kube-proxy's sync), so Envoy stays
// ready, and the node serving, until the load balancer has left the node (docs/load-balancers.md).
const contourLBDrainDelay = "10s"

var contourLBScenarios = []contourFleetScenario{
	// Contour's manager: reported, not asserted. Behind HAProxy on hostPorts (contour-fleet-shipped) it lets Envoy
	// go within about 1.5 s and loses requests in every run; in this shape, in the first run (2026-11-26 22:20
	// UTC), it held each Envoy 12-15 s, until after its pod was unready (its poll every 5 s found HTTP connections
	// open until then), past HAProxy's mark-down (7-8 s), and lost none of 7,954.
	{name: "contour-lb-shipped", shape: contourShape{hostPorts: true}, lb: true, reported: true},
	// The control, which must lose requests: without a manager Envoy ends at kubelet's SIGTERM, at the deletion,
	// and HAProxy sends to the node until it has seen 3 failed checks of kube-proxy's answer (6-9 s).
	{name: "contour-lb-no-manager", shape: contourShape{hostPorts: true, noManager: true}, control: true, lb: true},
	// Taken over, with --drain-delay covering the node check's mark-down: 0 failed, asserted.
	{name: "contour-lb-takeover", shape: contourShape{hostPorts: true, events: true}, inject: []string{"--takeover", "--drain-delay=" + contourLBDrainDelay}, lb: true},
	// Taken over with the defaults (no delay): reported, not asserted. Envoy's /ready fails at the deletion, so the
	// pod is unready after Contour's probe has failed 3 times 4 s apart (8-12 s), and kube-proxy then drops the
	// node's traffic; HAProxy marks the node down 6-9 s after kube-proxy's check fails. Whether the pod is unready
	// before the node is marked down depends on the two phases: 0 failed in most runs, a loss in some.
	{name: "contour-lb-takeover-no-delay", shape: contourShape{hostPorts: true, events: true}, inject: []string{"--takeover"}, lb: true, reported: true},
}

// contourLBService returns Contour's `envoy` Service from the module's examples/render/contour.yaml (the file the
// DaemonSet comes from), without its namespace; it fails t unless it is a LoadBalancer with externalTrafficPolicy
// Local.
func contourLBService(ctx context.Context, t *testing.T) string {
	t.Helper()
	dir, err := peers.Download(ctx, peers.ContourModule, peers.ContourVersion)
	if err != nil {
		t.Fatal(err) // contourDaemonSet has read the same module
	}
	path := filepath.Join(dir, strings.TrimSuffix(contourSource, "#"))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		svc := &corev1.Service{}
		if yaml.Unmarshal([]byte(doc), svc) != nil || svc.Kind != "Service" || svc.Name != "envoy" {
			continue
		}
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
			t.Fatalf("%s: Contour's envoy Service is type %q, externalTrafficPolicy %q: want LoadBalancer, Local: update test/e2e/contour_lb_test.go",
				path, svc.Spec.Type, svc.Spec.ExternalTrafficPolicy)
		}
		svc.Namespace = ""
		out, err := yaml.Marshal(svc)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	t.Fatalf("%s: no Service envoy", path)
	return ""
}

// startContourLB applies Contour's Service in ns, waits until every edge node's kube-proxy answers 200 on its
// healthCheckNodePort, and starts HAProxy in front of the nodes' nodePort and the watch of their /healthz.
func startContourLB(ctx context.Context, t *testing.T, c *Cluster, root, ns string, edge []*Node) (*haproxy, *healthzWatch) {
	t.Helper()
	applyText(ctx, t, c, ns, contourLBService(ctx, t))
	out := mustKubectl(ctx, t, c, "-n", ns, "get", "service", "envoy", "-o",
		`jsonpath={.spec.ports[?(@.name=="http")].nodePort} {.spec.healthCheckNodePort}`)
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("Contour's Service: nodePort and healthCheckNodePort %q", out)
	}
	nodePort, err1 := strconv.Atoi(f[0])
	hcPort, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || nodePort == 0 || hcPort == 0 {
		t.Fatalf("Contour's Service: nodePort and healthCheckNodePort %q", out)
	}
	var names, ips []string
	for _, n := range edge {
		names, ips = append(names, n.Name), append(ips, n.IP)
		addr := net.JoinHostPort(n.IP, strconv.Itoa(hcPort))
		var last healthzAnswer
		if err := poll(ctx, time.Minute, func() error {
			last = getHealthz(ctx, addr)
			if last.status != http.StatusOK || last.local != 1 {
				return fmt.Errorf("%s answered %s", addr, last)
			}
			return nil
		}); err != nil {
			t.Fatalf("node %s: kube-proxy's healthCheckNodePort: %v", n.Name, err)
		}
		t.Logf("node %s: kube-proxy's healthCheckNodePort %s: %s", n.Name, addr, last)
	}
	t.Logf("Contour's Service: type LoadBalancer, externalTrafficPolicy Local, nodePort %d (port 80), healthCheckNodePort %d", nodePort, hcPort)
	lb := launchHAProxy(ctx, t, c, "haproxy-"+ns+".cfg", func(bind string) (string, error) {
		return haproxyConfigFrom(root, haproxyNodePortsExample, []replacement{
			{"\n  bind :80\n", "\n  bind " + bind + "\n"},
			{haproxyNodePortsCheck, fmt.Sprintf("default-server check port %d ", hcPort)},
		}, names, ips, nodePort)
	})
	hz := watchHealthz(ctx, edge, hcPort)
	t.Cleanup(hz.stop)
	return lb, hz
}

// healthzAnswer is one answer of kube-proxy's healthCheckNodePort: its status (0: no answer) and the local
// endpoints it counted.
type healthzAnswer struct {
	at     time.Time
	status int
	local  int
	err    string
}

func (a healthzAnswer) String() string {
	if a.status == 0 {
		return "no answer: " + a.err
	}
	return fmt.Sprintf("%d (localEndpoints %d)", a.status, a.local)
}

// healthzClient opens a connection per check, as a load balancer's checks do.
var healthzClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// getHealthz sends GET /healthz to addr.
func getHealthz(ctx context.Context, addr string) healthzAnswer {
	a := healthzAnswer{at: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		a.err = err.Error()
		return a
	}
	resp, err := healthzClient.Do(req)
	if err != nil {
		a.err = err.Error()
		return a
	}
	defer resp.Body.Close()
	var body struct {
		LocalEndpoints int `json:"localEndpoints"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err := json.Unmarshal(b, &body); err != nil {
		a.err = fmt.Sprintf("status %d, body %q: %v", resp.StatusCode, b, err)
		return a
	}
	a.status, a.local = resp.StatusCode, body.LocalEndpoints
	return a
}

// healthzWatch polls each node's healthCheckNodePort every 100 ms and keeps the answers that differ from the one
// before.
type healthzWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu      sync.Mutex
	changes map[string][]healthzAnswer // node name -> changes, oldest first
}

func watchHealthz(ctx context.Context, edge []*Node, port int) *healthzWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &healthzWatch{cancel: cancel, changes: map[string][]healthzAnswer{}}
	for _, n := range edge {
		addr := net.JoinHostPort(n.IP, strconv.Itoa(port))
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			var last healthzAnswer
			for first := true; ; first = false {
				a := getHealthz(ctx, addr)
				if ctx.Err() != nil {
					return
				}
				if first || a.status != last.status || a.local != last.local {
					w.mu.Lock()
					w.changes[n.Name] = append(w.changes[n.Name], a)
					w.mu.Unlock()
				}
				last = a
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	return w
}

func (w *healthzWatch) get(node string) []healthzAnswer {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.changes[node])
}

// stop ends the polling and waits for it.
func (w *healthzWatch) stop() {
	w.once.Do(func() {
		w.cancel()
		w.wg.Wait()
	})
}

// healthzNode is what one node's kube-proxy answered from a time on: when it first answered other than 200, with
// what, and when it answered 200 again.
type healthzNode struct {
	down, up     time.Duration
	downOK, upOK bool
	downAnswer   string
}

func (h healthzNode) String() string {
	if !h.downOK {
		return "200 throughout"
	}
	s := fmt.Sprintf("%s at %s → ", h.downAnswer, h.down.Round(100*time.Millisecond))
	if !h.upOK {
		return s + "not 200 again"
	}
	return s + fmt.Sprintf("200 at %s", h.up.Round(100*time.Millisecond))
}

// node returns node's answers from since on.
func (w *healthzWatch) node(node string, since time.Time) healthzNode {
	var h healthzNode
	for _, a := range w.get(node) {
		if a.at.Before(since) {
			continue
		}
		switch {
		case !h.downOK && a.status != http.StatusOK:
			h.down, h.downOK, h.downAnswer = a.at.Sub(since), true, a.String()
		case h.downOK && a.status == http.StatusOK:
			h.up, h.upOK = a.at.Sub(since), true
			return h
		}
	}
	return h
}

// writeContourLBSection appends the contour-lb scenarios' table to the fleet's report.
func writeContourLBSection(b *strings.Builder, rows []contourFleetRow) {
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n## Contour's DaemonSet behind a `LoadBalancer` Service with `externalTrafficPolicy: Local` (the cloud shape)\n\n")
	b.WriteString("The same DaemonSet on the same edge nodes (its hostPorts 80 and 443 kept as Contour ships them, no hostPort added), behind " +
		"Contour's own `envoy` Service from the same file (type LoadBalancer, externalTrafficPolicy Local; test/e2e/contour_lb_test.go). " +
		"No cloud controller: HAProxy on the host plays the cloud (docs/examples/haproxy-nodeports.cfg): each edge node's address on the " +
		"Service's nodePort, checked by GET /healthz on the Service's healthCheckNodePort, answered by the node's kube-proxy, " +
		"`inter 3s fall 3 rise 2`, TCP, `retries 0`, no redispatch. " +
		fmt.Sprintf("Load through HAProxy only: %d clients, a request each %s, each on a new connection. ", lbClients, lbInterval) +
		"`kubectl rollout restart daemonset/envoy`; times are from the restart (deletion and Ready=False in whole seconds, from the " +
		"API's timestamps). *kube-proxy /healthz*: the node's healthCheckNodePort polled by the test every 100 ms: when it first " +
		"answered other than 200 after the restart, and when 200 again. *Ready=False*: the old pod's Ready condition turned False " +
		"(its readiness probe failed, or Envoy exited). Asserted: on every node /healthz failed and passed again; the control " +
		"(no manager) loses requests; taken over with --drain-delay, 0 failed, no FailedPreStopHook, DrainStarted and Drained on " +
		"every old pod, every old pod gone after HAProxy had marked its node down.\n\n")
	b.WriteString("| scenario | requests (sent / failed) | errors | rollout | node | old pod: deletion began → Ready=False → gone | kube-proxy /healthz | HAProxy down → up (time down) | drain (manager's log) | Events of the old pod (its start's left out) | pass |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		name := r.s.name + " (`" + strings.Join(append([]string{"inject"}, r.s.inject...), " ") + "`)"
		switch {
		case r.s.control && r.s.shape.noManager:
			name = r.s.name + " (no manager: must fail)"
		case r.s.inject == nil:
			name = r.s.name + " (Contour's manager: reported)"
		case r.s.reported:
			name += " (reported)"
		}
		if len(r.nodes) == 0 {
			fmt.Fprintf(b, "| %s | – | – | – | – | – | – | – | %s | – | %v |\n", name, r.note, r.pass)
			continue
		}
		for i, n := range r.nodes {
			first, pass := r.firstCells(name, i)
			lbCell := n.lbCell()
			unready := "not seen"
			if n.unreadyOK {
				unready = n.unready.String()
			}
			drain := n.drain
			if n.quiet != "–" {
				drain += "; quiet: " + n.quiet
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s: %s → %s → %s | %s | %s | %s | %s | %s |\n", first[0], first[1], first[2], first[3],
				n.node, n.pod, n.deleted, unready, n.gone.Round(100*time.Millisecond), cell(n.healthz.String()), cell(lbCell), cell(drain),
				cell(strings.Join(endEvents(n.events), ", ")), pass)
		}
	}
}

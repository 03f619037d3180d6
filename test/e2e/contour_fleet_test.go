//go:build e2e && linux

package e2e

// Contour's Envoy DaemonSet as a fleet behind an external load balancer (issue 20 item 2; make e2e-fleet, after the
// other fleet scenarios): Contour's real DaemonSet (internal/peers, edited as contour_test.go's comment says, with
// contourShape.hostPorts) on three edge nodes (2, 3 and 4, labelled edgeLabel; not the first node, the host's own
// network namespace, where the CNI portmap plugin's hostPort chains would be left in the host's iptables), its
// hostPorts 80 and 443 kept, Contour's updateStrategy (maxUnavailable 10%: one node at a time), grace period 300 s,
// the distroless-like EnvoyImage (no shell: checked), the admin API on the unix socket /admin/admin.sock.
//
// In front: HAProxy on the host (docs/examples/haproxy-nodes.cfg), each edge node's address port 80 a server, its
// check an HTTP/1.1 GET /ready on the node's port 8002 (the one hostPort added) every 3 s, 3 failures down, 2
// successes up; TCP passed through, no retry, no redispatch. The load enters through HAProxy only, each request on
// a new connection (testbed.ConnPerRequest, as lb_test.go's). Deliberately no keep-alive and no long requests:
// Contour's manager waits until Envoy's HTTP connections reach 0 (checking every 5 s), so connections held open
// would hold its pod until the load balancer had stopped sending, as a side effect; the short connections a TCP
// load balancer brings are where it fails, and what the control must show.
//
// Each scenario: `kubectl rollout restart daemonset/envoy` under load; every old pod gone and the rollout complete,
// then HAProxy has marked every node it marked down up again, then the load stops. Per node: the old pod's drain,
// when HAProxy marked the node down and up (relative to the restart), when the old pod was gone.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// edgeLabel marks the nodes Contour's DaemonSet runs on (its nodeSelector: edgeLabel=true).
const edgeLabel = "smgr-e2e/edge"

// haproxyNodesExample is the load balancer's configuration: the e2e replaces its bind address and servers.
const haproxyNodesExample = "docs/examples/haproxy-nodes.cfg"

// contourReadyPort is Contour's `metrics` port, where its stats listener serves /ready: given a hostPort, the load
// balancer's checks reach it on each node's address.
const contourReadyPort = 8002

// contourFleetWarmUp is how long the load runs before the rollout: longer than 3 failed checks 3 s apart, so that a
// check that cannot pass would have marked a node down by then (the test fails if one is).
const contourFleetWarmUp = 11 * time.Second

// contourFleetUpWait bounds the wait, once the rollout is complete, for HAProxy to mark a node up again: 2 good checks
// 3 s apart, and then some.
const contourFleetUpWait = 30 * time.Second

// contourFleetScenario is one roll-out of Contour's DaemonSet.
type contourFleetScenario struct {
	name  string
	shape contourShape
	// inject: the arguments of `shutdown-manager inject` (empty: the default, hook mode); nil: not injected.
	inject []string
	// control: Contour's own manager, or no manager, which must lose requests.
	control bool
	// reported: the figures are reported, the loss not asserted either way (see its comment in the list).
	reported bool
	// lb: the cloud shape (contour_lb_test.go): Contour's `LoadBalancer` Service with externalTrafficPolicy Local,
	// HAProxy on each node's nodePort, checking kube-proxy's healthCheckNodePort.
	lb bool
}

var contourFleetScenarios = []contourFleetScenario{
	{name: "contour-fleet-shipped", shape: contourShape{hostPorts: true, readyHostPort: true}, control: true},
	{name: "contour-fleet-takeover", shape: contourShape{hostPorts: true, readyHostPort: true, events: true}, inject: []string{"--takeover"}},
	// A fresh injection: Contour's pod with Contour's manager removed, injected as any Envoy pod.
	{name: "contour-fleet-inject", shape: contourShape{hostPorts: true, readyHostPort: true, events: true, noManager: true}, inject: []string{}},
}

// contourFleetNode is what happened on one edge node in a scenario.
type contourFleetNode struct {
	node, pod string
	drain     string // the manager's outcome and duration, or Contour's
	quiet     string // our manager's quiet period: why it ended
	// down and up: when HAProxy marked the node down and up again, after the restart; downOK/upOK false if it
	// did not.
	down, up     time.Duration
	downOK, upOK bool
	downReason   string
	deleted      time.Duration // when the old pod's deletion began (its deletionTimestamp less its grace period: whole seconds)
	gone         time.Duration // when the old pod was gone
	events       []string
	// The cloud shape only: when the old pod's Ready condition turned False (its lastTransitionTime: whole
	// seconds; unreadyOK false if it was not seen), and the node's kube-proxy healthz answers.
	unready   time.Duration
	unreadyOK bool
	healthz   healthzNode
}

type contourFleetRow struct {
	s              contourFleetScenario
	nodes          []contourFleetNode
	sent, failed   int64
	errors         map[string]int64
	rollout        time.Duration // restart -> rollout complete
	strategy, note string
	pass           bool
}

// startContourFleet adds node 4, labels the edge nodes (2, 3, 4) and imports ContourImage into each. It runs only
// when the contour-fleet scenarios do (the subtest contour-fleet-nodes is what -run selects with them); it returns
// nil otherwise, or when Contour's binary was not built.
func startContourFleet(ctx context.Context, t *testing.T, c *Cluster, nodes []*Node) (edge []*Node, contour string) {
	t.Run("contour-fleet-nodes", func(t *testing.T) {
		contour = contourBinary(t) // skips (fails under CI=true) when it was not built
	})
	if contour == "" {
		return nil, ""
	}
	// Node 4 is registered with TestFleet's t: its teardown runs with the other nodes', before the first node's.
	edge = append(slices.Clone(nodes), c.AddNode(ctx, t, 4))
	archive := writeContourImage(t, c, contour)
	for _, n := range edge {
		began := time.Now()
		if out, err := n.ctr(ctx, "images", "import", archive); err != nil {
			t.Fatalf("node %s: importing %s: %v: %s", n.Name, ContourImage, err, out)
		}
		mustKubectl(ctx, t, c, "label", "node", n.Name, edgeLabel+"=true")
		t.Logf("node %s: %s imported in %s, labelled %s=true", n.Name, ContourImage, time.Since(began).Round(time.Millisecond), edgeLabel)
	}
	return edge, contour
}

// contourFleetDaemonSet returns Contour's Envoy DaemonSet edited for s (contourEdits), kept a DaemonSet with its
// updateStrategy, on the edge nodes; and that strategy, said in words.
func contourFleetDaemonSet(t *testing.T, s contourFleetScenario) (*appsv1.DaemonSet, string) {
	t.Helper()
	ds, source := contourDaemonSet(t)
	spec := ds.Spec.Template.Spec.DeepCopy()
	if err := contourEdits(spec, s.shape); err != nil {
		t.Fatalf("%s: %v: update test/e2e/contour_test.go", source, err)
	}
	if spec.NodeSelector != nil {
		t.Fatalf("%s: Contour's Envoy pod has a nodeSelector already (%v): update test/e2e/contour_fleet_test.go", source, spec.NodeSelector)
	}
	spec.NodeSelector = map[string]string{edgeLabel: "true"}
	u := ds.Spec.UpdateStrategy
	if u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil || u.RollingUpdate.MaxUnavailable == nil {
		t.Fatalf("%s: the DaemonSet's updateStrategy is not a rolling update with maxUnavailable: %+v", source, u)
	}
	strategy := fmt.Sprintf("%s, maxUnavailable %s", u.Type, u.RollingUpdate.MaxUnavailable)
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name, Labels: ds.Labels},
		Spec: appsv1.DaemonSetSpec{
			Selector:       ds.Spec.Selector,
			Template:       corev1.PodTemplateSpec{ObjectMeta: ds.Spec.Template.ObjectMeta, Spec: *spec},
			UpdateStrategy: u,
		},
	}, strategy
}

// statusLine sends request to addr on a new connection and returns the first line of the answer.
func statusLine(ctx context.Context, addr, request string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	if _, err := conn.Write([]byte(request)); err != nil {
		return "", fmt.Errorf("writing to %s: %w", addr, err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading from %s: %w", addr, err)
	}
	return strings.TrimSpace(line), nil
}

// checkReadinessRequests checks, on each edge node's readiness hostPort, that Contour's stats listener answers
// HAProxy's default check (`option httpchk GET /ready`: HTTP/1.0, no Host) 426, and the check of
// haproxy-nodes.cfg (HTTP/1.1 with a Host) 200: why the file sends the latter.
func checkReadinessRequests(ctx context.Context, t *testing.T, edge []*Node) {
	t.Helper()
	for _, n := range edge {
		addr := net.JoinHostPort(n.IP, fmt.Sprint(contourReadyPort))
		old, err := statusLine(ctx, addr, "GET /ready HTTP/1.0\r\n\r\n")
		if err != nil {
			t.Fatalf("node %s: HAProxy's default check: %v", n.Name, err)
		}
		ours, err := statusLine(ctx, addr, "GET /ready HTTP/1.1\r\nHost: envoy\r\nConnection: close\r\n\r\n")
		if err != nil {
			t.Fatalf("node %s: the HTTP/1.1 check: %v", n.Name, err)
		}
		t.Logf("node %s, %s: GET /ready HTTP/1.0 -> %q; HTTP/1.1 with Host -> %q", n.Name, addr, old, ours)
		if !strings.Contains(old, " 426 ") || !strings.Contains(ours, " 200 ") {
			t.Fatalf("node %s: GET /ready HTTP/1.0 answered %q (want 426: Contour's stats listener does not accept HTTP/1.0), HTTP/1.1 with Host %q (want 200)", n.Name, old, ours)
		}
	}
}

// checkNoShell fails t unless Envoy's container of pod has no shell (the distroless-like EnvoyImage).
func checkNoShell(ctx context.Context, t *testing.T, c *Cluster, ns, pod string) {
	t.Helper()
	out, err := c.kubectl(ctx, "-n", ns, "exec", pod, "-c", "envoy", "--", "/bin/sh", "-c", "true")
	if err == nil {
		t.Fatalf("Envoy's container in %s has a shell: /bin/sh ran", pod)
	}
	t.Logf("Envoy's container has no shell: exec /bin/sh: %v: %s", err, testproc.LastLines(strings.TrimSpace(out), 1))
}

// runContourFleet runs one of contourFleetScenarios (see the file's comment).
func runContourFleet(ctx context.Context, t *testing.T, c *Cluster, root, manager, contour string, s contourFleetScenario, edge []*Node) contourFleetRow {
	r := contourFleetRow{s: s, errors: map[string]int64{}}
	ns := "e2e-" + s.name
	ds, strategy := contourFleetDaemonSet(t, s)
	r.strategy = strategy
	text := contourObjects(ctx, t, root, manager, contour, t.TempDir(), ds, s.shape.events, s.inject)
	mustKubectl(ctx, t, c, "create", "namespace", ns)
	// The ServiceAccount names the registry's pull Secret (contourObjects): on a node where a pod with
	// credentials pulled our image, kubelet lets another pod use it only with credentials of its own.
	createPullSecret(ctx, t, c, ns)
	t.Cleanup(func() {
		// The pods go before the next scenario, whose hostPorts are the same. Not the namespace: the namespace
		// controller looks again only after the pods' grace period (300 s) once it has deleted them.
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, _ = c.kubectl(cctx, "delete", "namespace", ns, "--wait=false")
		if err := poll(cctx, 2*time.Minute, func() error {
			out, err := c.kubectl(cctx, "-n", ns, "get", "pods", "-o", "name")
			if err == nil && strings.TrimSpace(out) != "" {
				err = fmt.Errorf("pods left: %s", out)
			}
			return err
		}); err != nil {
			t.Errorf("the pods of %s did not go: %v", ns, err)
		}
	})
	applyText(ctx, t, c, ns, text)
	mustKubectl(ctx, t, c, "-n", ns, "rollout", "status", "daemonset/envoy", "--timeout=300s")
	byNode := podsByNode(ctx, t, c, ns)
	var names, ips, old []string
	nodeOf := map[string]string{}
	for _, n := range edge {
		if len(byNode[n.Name]) != 1 {
			t.Fatalf("want one Envoy pod on each edge node, have %v", byNode)
		}
		names, ips = append(names, n.Name), append(ips, n.IP)
		old = append(old, byNode[n.Name][0])
		nodeOf[byNode[n.Name][0]] = n.Name
	}
	if len(byNode) != len(edge) {
		t.Fatalf("Envoy pods off the edge nodes: %v", byNode)
	}
	shipped := s.inject == nil && !s.shape.noManager // Contour's manager runs
	for _, p := range podContainers(ctx, t, c, ns) {
		// Contour's manager is there as shipped, gone when taken over or removed.
		if has := slices.Contains(strings.Fields(p), "shutdown-manager"); has != shipped {
			t.Fatalf("pod containers %q: Contour's shutdown-manager container there: %v, want %v", p, has, shipped)
		}
	}
	if got := injectedPods(ctx, t, c, ns); got != (s.inject != nil) {
		t.Fatalf("Envoy pods injected: %v, want %v", got, s.inject != nil)
	}
	checkNoShell(ctx, t, c, ns, old[0])
	var lb *haproxy
	var hz *healthzWatch
	if s.lb {
		lb, hz = startContourLB(ctx, t, c, root, ns, edge)
	} else {
		checkReadinessRequests(ctx, t, edge)
		lb = launchHAProxy(ctx, t, c, "haproxy-"+s.name+".cfg", func(bind string) (string, error) {
			return haproxyConfigFrom(root, haproxyNodesExample, []replacement{{"\n  bind :80\n", "\n  bind " + bind + "\n"}}, names, ips, 80)
		})
	}
	if err := waitOK(ctx, lb.Addr); err != nil {
		t.Fatalf("through HAProxy: %v\n%s", err, lb.log())
	}
	logContainer := "envoy" // our hook's log, or Envoy's own without a manager
	if shipped {
		logContainer = "shutdown-manager" // Contour's sidecar; its exec hook's output reaches only kubelet's log
	}
	logs := map[string]*logFollower{}
	for _, p := range old {
		logs[p] = followLogs(ctx, c, ns, p, logContainer)
	}
	warm := time.Now()
	l := testbed.ConnPerRequest(ctx, lb.Addr, lbClients, lbInterval, "/")
	if !wait(ctx, contourFleetWarmUp) {
		t.Fatal("interrupted")
	}
	if res := l.Snapshot(); res.OK == 0 || res.Failed > 0 {
		t.Fatalf("the load before the rollout: %s\nhaproxy:\n%s", res, lb.log())
	}
	for _, n := range names {
		if at, why, ok := lb.down(n, warm); ok {
			t.Fatalf("HAProxy marked %s down %s into the warm-up (%s), before the rollout:\n%s", n, at, why, lb.log())
		}
	}

	began := time.Now()
	mustKubectl(ctx, t, c, "-n", ns, "rollout", "restart", "daemonset/envoy")
	// Every old pod gone: a DaemonSet rolls one node at a time here, each old pod deleted once the previous node's
	// new pod is ready, each drain up to the grace period.
	gone := map[string]time.Duration{}
	deleted, unready := map[string]time.Time{}, map[string]time.Time{}
	grace := time.Duration(*ds.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second // Contour's 300 s
	if err := poll(ctx, time.Duration(len(old))*(grace+time.Minute), func() error {
		// Per pod: its name, its Ready condition (status@lastTransitionTime), and once deleted its deletionTimestamp
		// and grace period.
		out, err := c.kubectl(ctx, "-n", ns, "get", "pods", "-l", "app=envoy", "-o",
			`go-template={{range .items}}{{.metadata.name}} ready={{range .status.conditions}}{{if eq .type "Ready"}}{{.status}}@{{.lastTransitionTime}}{{end}}{{end}} {{if .metadata.deletionTimestamp}}{{.metadata.deletionTimestamp}} {{.metadata.deletionGracePeriodSeconds}}{{end}}{{"\n"}}{{end}}`)
		if err != nil {
			return err
		}
		there := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) > 1 {
				there[f[0]] = f[1:]
			}
		}
		var left []string
		for _, p := range old {
			if f, ok := there[p]; ok {
				ready := strings.TrimPrefix(f[0], "ready=")
				f = f[1:]
				if st, ts, _ := strings.Cut(ready, "@"); st == "False" && len(f) == 2 {
					if at, err := time.Parse(time.RFC3339, ts); err == nil {
						unready[p] = at // the old pod was Ready before its deletion (rollout status)
					}
				}
				// The deletionTimestamp is when the grace period ends: the deletion began that many seconds before.
				if len(f) == 2 {
					at, err1 := time.Parse(time.RFC3339, f[0])
					secs, err2 := time.ParseDuration(f[1] + "s")
					if err1 == nil && err2 == nil {
						deleted[p] = at.Add(-secs)
					}
				}
				left = append(left, p)
			} else if _, seen := gone[p]; !seen {
				gone[p] = time.Since(began)
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("old pods left: %v", left)
		}
		return nil
	}); err != nil {
		t.Fatalf("the rollout: %v\nhaproxy:\n%s", err, lb.log())
	}
	mustKubectl(ctx, t, c, "-n", ns, "rollout", "status", "daemonset/envoy", "--timeout=300s")
	r.rollout = time.Since(began)
	// HAProxy marks each node it marked down up again (2 good checks): the load runs on until then.
	if err := poll(ctx, contourFleetUpWait, func() error {
		for _, n := range names {
			if at, _, ok := lb.down(n, began); ok {
				if _, _, up := lb.up(n, began.Add(at)); !up {
					return fmt.Errorf("HAProxy has not marked %s up again", n)
				}
			}
		}
		return nil
	}); err != nil {
		t.Errorf("%v\nhaproxy:\n%s", err, lb.log())
	}
	if !wait(ctx, 2*time.Second) {
		t.Fatal("interrupted")
	}
	l.Drain()
	res := l.Wait()
	if hz != nil {
		hz.stop()
	}
	r.sent, r.failed = res.Sent, res.Failed
	for k, v := range res.Errors {
		r.errors[k] += v
	}

	kubeletLogs := map[string]string{}
	for _, n := range edge {
		kubeletLogs[n.Name] = n.kubelet.LogPath
	}
	var failedHooks, heldPast []string
	missingEvents := 0
	for _, p := range old {
		f := logs[p]
		select {
		case <-f.done:
		case <-time.After(10 * time.Second):
		}
		fn := contourFleetNode{node: nodeOf[p], pod: p, gone: gone[p], drain: "Contour's manager (it logs no outcome)", quiet: "–"}
		if !shipped && s.inject == nil {
			fn.drain = "no manager: Envoy ends at SIGTERM"
		}
		if at, ok := deleted[p]; ok {
			fn.deleted = at.Sub(began.Truncate(time.Second))
		}
		if at, ok := unready[p]; ok {
			fn.unready, fn.unreadyOK = at.Sub(began.Truncate(time.Second)), true
		}
		if hz != nil {
			fn.healthz = hz.node(fn.node, began)
		}
		if s.inject != nil {
			var lastNew string
			fn.drain, fn.quiet, lastNew = f.fleetDrain()
			if lastNew != "–" {
				fn.quiet += " (new traffic " + lastNew + " after health checks failed)"
			}
		}
		fn.down, fn.downReason, fn.downOK = lb.down(fn.node, began)
		if fn.downOK {
			var after time.Duration
			after, _, fn.upOK = lb.up(fn.node, began.Add(fn.down))
			fn.up = fn.down + after
		}
		failed := hookFailures(ctx, t, c, ns, p)
		failedHooks = append(failedHooks, failed...)
		fn.events = podEventReasons(ctx, t, c, ns, p)
		if len(failed) > 0 {
			fn.events = append(fn.events, kubeletHookErrorsIn(kubeletLogs[fn.node], ns, p)...)
		}
		if s.inject != nil && (!slices.Contains(fn.events, "DrainStarted") || !slices.Contains(fn.events, "Drained")) {
			missingEvents++
		}
		if s.inject != nil && (!fn.downOK || fn.down > fn.gone) {
			// Our drain holds until no new connection has come for the quiet period: HAProxy sends a request
			// every few milliseconds to each node until it marks the node down, so the old pod can go only after.
			heldPast = append(heldPast, fmt.Sprintf("%s: marked down %v (at %s), pod gone at %s", fn.node, fn.downOK,
				fn.down.Round(100*time.Millisecond), fn.gone.Round(100*time.Millisecond)))
		}
		r.nodes = append(r.nodes, fn)
		if s.lb {
			t.Logf("%s: node %s: pod %s Ready=False at %s (seen: %v); kube-proxy's healthCheckNodePort: %s", s.name, fn.node, p,
				fn.unready, fn.unreadyOK, fn.healthz)
		}
		t.Logf("%s: node %s: pod %s: deletion began %s, gone %s after the restart; drain: %s; quiet: %s; HAProxy down at %v (marked: %v; %s), up at %v (marked: %v); Events: %v",
			s.name, fn.node, p, fn.deleted, fn.gone.Round(100*time.Millisecond), fn.drain, fn.quiet, fn.down.Round(100*time.Millisecond), fn.downOK,
			fn.downReason, fn.up.Round(100*time.Millisecond), fn.upOK, fn.events)
	}
	t.Logf("%s: sent=%d failed=%d errors=%v; rollout %s (%s); FailedPreStopHook: %d", s.name, r.sent, r.failed, r.errors,
		r.rollout.Round(100*time.Millisecond), r.strategy, len(failedHooks))
	var notChecked []string
	for _, fn := range r.nodes {
		if s.lb && (!fn.healthz.downOK || !fn.healthz.upOK) {
			// What the scenario is about: the node's check failing while its pod terminates, passing again after.
			notChecked = append(notChecked, fmt.Sprintf("%s: healthz %s", fn.node, fn.healthz))
		}
	}
	switch {
	case ctx.Err() != nil:
		t.Fatal("interrupted")
	case len(notChecked) > 0:
		t.Errorf("kube-proxy's healthCheckNodePort did not fail and pass again on every node during the rollout: %q", notChecked)
	case s.control && r.failed == 0:
		t.Errorf("the control (%s) lost no request of %d behind the load balancer: this test cannot tell our drain from it", fn0(r.nodes), r.sent)
	case s.control:
		r.pass = true
	case r.failed > 0 && !s.reported:
		t.Errorf("%d of %d requests failed: %v", r.failed, r.sent, r.errors)
	case s.inject != nil && len(failedHooks) > 0:
		// Our hooks only: Contour's manager, reported, fails Envoy's preStop in every run (EOF from its exited sidecar).
		t.Errorf("FailedPreStopHook: %q", failedHooks)
	case missingEvents > 0:
		t.Errorf("%d of %d old pods without DrainStarted and Drained", missingEvents, len(old))
	case len(heldPast) > 0 && !s.reported:
		t.Errorf("old pods gone before HAProxy had marked their node down (the drain did not hold past the load balancer): %q", heldPast)
	default:
		r.pass = true
	}
	return r
}

// runContourFleets runs contourFleetScenarios as subtests of t, after the other fleet scenarios (they add node 4,
// and the hostPorts of one scenario are the next one's), and returns their rows.
func runContourFleets(ctx context.Context, t *testing.T, c *Cluster, root, manager string, nodes []*Node) []contourFleetRow {
	edge, contour := startContourFleet(ctx, t, c, nodes)
	if contour == "" {
		return nil
	}
	var rows []contourFleetRow
	for _, s := range append(slices.Clone(contourFleetScenarios), contourLBScenarios...) {
		ok := t.Run(s.name, func(t *testing.T) {
			r := contourFleetRow{s: s, note: "stopped before its figures: see the test's log"}
			defer func() { rows = append(rows, r) }()
			r = runContourFleet(ctx, t, c, root, manager, contour, s, edge)
		})
		if !ok && ctx.Err() != nil {
			break
		}
	}
	return rows
}

// fn0 is what ran in the old pods of a scenario (its first node's drain cell).
func fn0(nodes []contourFleetNode) string {
	if len(nodes) == 0 {
		return "–"
	}
	return nodes[0].drain
}

// firstCells are the row's cells that only the first line of a scenario's nodes carries (name, requests, errors,
// rollout), and its pass; empty for the other lines.
func (r contourFleetRow) firstCells(name string, i int) (first [4]string, pass string) {
	if i != 0 {
		return first, ""
	}
	return [4]string{name, fmt.Sprintf("%d / %d", r.sent, r.failed), formatErrors(r.errors),
		fmt.Sprintf("%s (%s)", r.rollout.Round(100*time.Millisecond), r.strategy)}, fmt.Sprint(r.pass)
}

// lbCell is when HAProxy marked the node down and up again, and how long it stayed down.
func (n contourFleetNode) lbCell() string {
	if !n.downOK {
		return "not marked down"
	}
	cell := fmt.Sprintf("%s (%s) → ", n.down.Round(100*time.Millisecond), shortReason(n.downReason))
	if !n.upOK {
		return cell + "not up again"
	}
	return cell + fmt.Sprintf("%s (%s)", n.up.Round(100*time.Millisecond), (n.up-n.down).Round(100*time.Millisecond))
}

// writeContourFleetSection appends the contour-fleet scenarios' table to the fleet's report.
func writeContourFleetSection(b *strings.Builder, all []contourFleetRow) {
	rows := slices.DeleteFunc(slices.Clone(all), func(r contourFleetRow) bool { return r.s.lb })
	defer writeContourLBSection(b, slices.DeleteFunc(slices.Clone(all), func(r contourFleetRow) bool { return !r.s.lb }))
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n## Contour's DaemonSet behind an external load balancer\n\n")
	b.WriteString("Contour's Envoy DaemonSet (its module's examples/render/contour.yaml, test/e2e/contour_fleet_test.go) on the edge nodes " +
		"(label `" + edgeLabel + "=true`: nodes 2, 3 and 4), its hostPorts 80 and 443 kept and 8002 (its /ready) added, grace period 300 s, " +
		"admin API on /admin/admin.sock, Envoy image without a shell. HAProxy on the host (docs/examples/haproxy-nodes.cfg): each edge " +
		"node's port 80, checked by HTTP/1.1 GET /ready on its port 8002, `inter 3s fall 3 rise 2`, TCP, `retries 0`, no redispatch. " +
		fmt.Sprintf("Load through HAProxy only: %d clients, a request each %s, each on a new connection. ", lbClients, lbInterval) +
		"`kubectl rollout restart daemonset/envoy`; times are from the restart. *Down*: HAProxy marked the node down; *up*: up again; " +
		"*time down* = up − down. Asserted: as shipped, requests lost; taken over and injected, 0 failed, no FailedPreStopHook, " +
		"DrainStarted and Drained on every old pod, and every old pod gone after HAProxy had marked its node down.\n\n")
	b.WriteString("| scenario | requests (sent / failed) | errors | rollout | node | old pod: deletion began → gone | drain (manager's log) | HAProxy down → up (time down) | Events of the old pod (its start's left out) | pass |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		name := r.s.name
		if r.s.control {
			name += " (Contour's manager: must fail)"
		}
		if len(r.nodes) == 0 {
			fmt.Fprintf(b, "| %s | – | – | – | – | – | %s | – | – | %v |\n", name, r.note, r.pass)
			continue
		}
		for i, n := range r.nodes {
			first, pass := r.firstCells(name, i)
			lbCell := n.lbCell()
			drain := n.drain
			if n.quiet != "–" {
				drain += "; quiet: " + n.quiet
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s: %s → %s | %s | %s | %s | %s |\n", first[0], first[1], first[2], first[3],
				n.node, n.pod, n.deleted, n.gone.Round(100*time.Millisecond), cell(drain), cell(lbCell), cell(strings.Join(endEvents(n.events), ", ")), pass)
		}
	}
}

// endEvents leaves out the Events of a pod's start (scheduled, image, container created and started).
func endEvents(reasons []string) []string {
	return slices.DeleteFunc(slices.Clone(reasons), func(r string) bool {
		return slices.Contains([]string{"Scheduled", "MissingClusterDNS", "Pulled", "Created", "Started"}, r)
	})
}

// shortReason is the status code of HAProxy's reason for a failed Layer 7 check ("Layer7 wrong status, code: 503,
// info: ..." -> "503"), or the reason itself.
func shortReason(reason string) string {
	if _, after, ok := strings.Cut(reason, "code: "); ok {
		code, _, _ := strings.Cut(after, ",")
		return code
	}
	return reason
}

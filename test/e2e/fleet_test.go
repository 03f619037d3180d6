//go:build e2e && linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// fleetScenario is one run of TestFleet: an Envoy Deployment of three pods spread over the three nodes (topology
// spread on the hostname), behind its ClusterIP, with load entering through every node's kube-proxy.
type fleetScenario struct {
	name    string
	inject  []string // nil: not injected (the negative control)
	action  string   // "delete-pods" (one pod per node, all at once), "rollout", "drain-node" (kubectl drain of node 2)
	control bool
	// daemonSet: Envoy as a DaemonSet (one pod per node) instead of the spread Deployment.
	daemonSet bool
}

// fleetQuiet is the quiet period the injected pods hold for: its end says how long new traffic kept coming to each
// terminating pod after its health checks failed. The minimum drain duration is shorter than it (1 s), so that
// the quiet period's end is not hidden behind the floor (the default 5 s floor ended every quiet period at 5 s).
const fleetQuiet = 2 * time.Second

// fleetInject is how the fleet's Envoy pods are injected (shutdown-manager inject).
var fleetInject = []string{"--mode=hook", "--quiet-period=" + fleetQuiet.String(), "--min-drain-duration=1s"}

// fleetReplicas: two Envoy pods per node. With one per node, deleting the three at once left the Service without a
// ready endpoint until the replacements were ready: kube-proxy then rejected new connections (347 "connection
// refused" of 8,748 requests on 2026-11-25, an outage no drain can prevent), and kept sending new connections to the
// terminating pods up to 1.8 s after their health checks failed (it falls back to terminating endpoints when no
// other is ready).
const fleetReplicas = 6

var fleetScenarios = []fleetScenario{
	{name: "fleet-hook-delete-pods", inject: fleetInject, action: "delete-pods"},
	{name: "fleet-hook-rollout", inject: fleetInject, action: "rollout"},
	{name: "fleet-control-delete-pods", inject: nil, action: "delete-pods", control: true},
	{name: "fleet-hook-drain-node", inject: fleetInject, action: "drain-node"},
	// What docs/e2e-fleet.md recommends for a DaemonSet's pod, which kubectl drain skips: a NoExecute taint the
	// DaemonSet does not tolerate ends it with its grace period (the manager drains it) and keeps it off the node.
	{name: "fleet-hook-daemonset-taint", inject: fleetInject, action: "taint-node", daemonSet: true},
}

// daemonSetEdit makes deploy/'s Deployment a DaemonSet: no replicas, its rolling update as the DaemonSet's.
var daemonSetEdit = []replacement{
	{"kind: Deployment\n", "kind: DaemonSet\n"},
	{"  replicas: 3\n", ""},
	{"  strategy:\n", "  updateStrategy:\n"},
}

// maintenanceTaint is the taint of the taint-node scenario.
const maintenanceTaint = "smgr-e2e/maintenance=:NoExecute"

// spreadEdit spreads the Envoy pods over the nodes, one per node, each revision on its own (a rollout's new pods
// spread too); a cordoned node does not count (nodeTaintsPolicy Honor), so that a drained node's pod can go to
// another node. The PodDisruptionBudget lets one pod at a time be evicted.
var spreadEdit = []replacement{{"      serviceAccountName: envoy\n", `      serviceAccountName: envoy
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        nodeTaintsPolicy: Honor
        labelSelector: {matchLabels: {app: envoy}}
        matchLabelKeys: [pod-template-hash]
`}}

const fleetPDB = `apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: envoy
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      app: envoy
`

// fleetNode is what one node saw in a scenario: the load that entered through its kube-proxy, and its pods that
// ended.
type fleetNode struct {
	name         string
	sent, failed int64
	errors       map[string]int64
	pods         []string // per ended pod: "name: drain outcome in duration; quiet: reason"
	lastNew      []string // per ended pod: how long new traffic kept coming after its health checks failed
}

type fleetRow struct {
	s     fleetScenario
	nodes []fleetNode
	gone  time.Duration
	pass  bool
	note  string
}

// TestFleet runs the multi-node scenarios: make e2e-fleet (E2E_FLEET=1). make e2e does not start its three nodes.
func TestFleet(t *testing.T) {
	if os.Getenv("E2E_FLEET") != "1" {
		t.Skip("the fleet runs with make e2e-fleet (E2E_FLEET=1)")
	}
	ctx := interrupted
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	c := StartCluster(ctx, t, root)
	manager := filepath.Join(c.Dir, "shutdown-manager")
	if err := buildCLI(ctx, root, manager); err != nil {
		t.Fatal(err)
	}
	// The first node gets the manager's image imported as the others do. Every namespace that runs it holds the
	// registry's pull Secret, which its pods' ServiceAccount names: the fleet-* rows' pods pull the image from the
	// registry (--image-pull-policy=Always), and kubelet then lets a pod on that node use the image only with
	// credentials of its own (its Pulled Event: "already present on machine and can be accessed by the pod").
	if out, err := c.ctr(ctx, "images", "import", filepath.Join(c.Dir, "manager.tar")); err != nil {
		t.Fatalf("importing the manager's image: %v: %s", err, out)
	}
	nodes := []*Node{c.AddNode(ctx, t, 2), c.AddNode(ctx, t, 3)}
	names := []string{NodeName, nodes[0].Name, nodes[1].Name}
	dials := map[string]func(context.Context, string, string) (net.Conn, error){NodeName: nil, nodes[0].Name: nodes[0].Dial, nodes[1].Name: nodes[1].Dial}
	t.Logf("three nodes Ready %s after the start", time.Since(began).Round(time.Millisecond))
	up, err := upstreamManifests(root)
	if err != nil {
		t.Fatal(err)
	}
	mustKubectl(ctx, t, c, "create", "namespace", UpstreamNamespace)
	// The upstream stays on the first node: the Envoys of the other nodes reach it across nodes, and draining node 2
	// ends only Envoy pods.
	up, err = edit("the upstream", up, []replacement{{"    spec:\n      containers:\n", "    spec:\n      nodeSelector: {kubernetes.io/hostname: " + NodeName + "}\n      containers:\n"}})
	if err != nil {
		t.Fatal(err)
	}
	applyText(ctx, t, c, UpstreamNamespace, up)
	mustKubectl(ctx, t, c, "-n", UpstreamNamespace, "rollout", "status", "deployment/echo", "--timeout=180s")
	t.Logf("nodes:\n%s", mustKubectl(ctx, t, c, "get", "nodes", "-o", "wide"))

	var rows []fleetRow
	for _, s := range fleetScenarios {
		ok := t.Run(s.name, func(t *testing.T) {
			r := fleetRow{s: s, note: "stopped before its figures: see the test's log"}
			defer func() { rows = append(rows, r) }()
			r = runFleet(ctx, t, c, root, manager, s, names, dials)
		})
		if !ok && ctx.Err() != nil {
			break
		}
	}
	var contourRows []contourFleetRow
	if ctx.Err() == nil {
		// Contour's DaemonSet on the edge nodes 2, 3 and a fourth, behind HAProxy (contour_fleet_test.go).
		contourRows = runContourFleets(ctx, t, c, root, manager, nodes)
	}
	if p := os.Getenv("E2E_REPORT"); p != "" {
		if err := writeFleetReport(p, names, rows, contourRows, time.Since(began)); err != nil {
			t.Errorf("writing the report: %v", err)
		}
	}
}

// podsByNode returns node name -> the Envoy pods of ns on it that are not being deleted.
func podsByNode(ctx context.Context, t *testing.T, c *Cluster, ns string) map[string][]string {
	t.Helper()
	out := mustKubectl(ctx, t, c, "-n", ns, "get", "pods", "-l", "app=envoy",
		"-o", `go-template={{range .items}}{{if not .metadata.deletionTimestamp}}{{.metadata.name}} {{.spec.nodeName}}{{"\n"}}{{end}}{{end}}`)
	m := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			m[f[1]] = append(m[f[1]], f[0])
		}
	}
	return m
}

func runFleet(ctx context.Context, t *testing.T, c *Cluster, root, manager string, s fleetScenario, names []string,
	dials map[string]func(context.Context, string, string) (net.Conn, error)) fleetRow {
	r := fleetRow{s: s}
	ns := "e2e-" + s.name
	workload, perNode := "deployment/envoy", fleetReplicas/len(names)
	edits := append([]replacement{{"replicas: 3", fmt.Sprintf("replicas: %d", fleetReplicas)}}, spreadEdit...)
	if s.daemonSet {
		workload, perNode, edits = "daemonset/envoy", 1, daemonSetEdit
	}
	text, err := envoyManifestsWith(ctx, root, manager, s.inject, edits)
	if err != nil {
		t.Fatal(err)
	}
	mustKubectl(ctx, t, c, "create", "namespace", ns)
	createPullSecret(ctx, t, c, ns) // the injected containers' image is the registry's (the ServiceAccount names it)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = c.kubectl(cctx, "uncordon", names[1])
		_, _ = c.kubectl(cctx, "taint", "node", names[1], strings.TrimSuffix(maintenanceTaint, "=:NoExecute")+":NoExecute-")
		_, _ = c.kubectl(cctx, "delete", "namespace", ns, "--wait=false")
	})
	applyText(ctx, t, c, ns, text+"\n---\n"+fleetPDB)
	mustKubectl(ctx, t, c, "-n", ns, "rollout", "status", workload, "--timeout=300s")
	byNode := podsByNode(ctx, t, c, ns)
	for _, n := range names {
		if len(byNode[n]) != perNode {
			t.Fatalf("want %d Envoy pods on each node, have %v", perNode, byNode)
		}
	}
	ip := strings.TrimSpace(mustKubectl(ctx, t, c, "-n", ns, "get", "service", "envoy", "-o", "jsonpath={.spec.clusterIP}"))
	addr := ip + ":80"
	// Each node's kube-proxy must answer for the ClusterIP before the load starts.
	for _, n := range names {
		dial := dials[n]
		if err := poll(ctx, 2*time.Minute, func() error {
			l := testbed.KeepAliveVia(ctx, dial, addr, 1, 0, "/")
			time.AfterFunc(300*time.Millisecond, l.Drain)
			if res := l.Wait(); res.OK == 0 {
				return fmt.Errorf("no answer through %s from %s: %s", addr, n, res)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	type nodeLoad struct{ short, long *testbed.Load }
	loads := map[string]nodeLoad{}
	for _, n := range names {
		loads[n] = nodeLoad{
			short: testbed.KeepAliveVia(ctx, dials[n], addr, 3, 20*time.Millisecond, "/"),
			long:  testbed.KeepAliveVia(ctx, dials[n], addr, 5, 0, "/sleep?d="+LongRequest.String()),
		}
	}
	var victims []string
	victimNode := map[string]string{}
	for _, n := range names {
		if (s.action == "drain-node" || s.action == "taint-node") && n != names[1] {
			continue
		}
		ended := byNode[n]
		if s.action == "delete-pods" {
			ended = ended[:1] // the other pod of the node stays: the Service keeps ready endpoints
		}
		victims = append(victims, ended...)
		for _, p := range ended {
			victimNode[p] = n
		}
	}
	logs := map[string]*logFollower{}
	for _, p := range victims {
		logs[p] = followLogs(ctx, c, ns, p, "envoy")
	}
	if !wait(ctx, loadWarmUp) {
		t.Fatal("interrupted")
	}
	began := time.Now()
	switch s.action {
	case "delete-pods":
		mustKubectl(ctx, t, c, append([]string{"-n", ns, "delete", "pod", "--wait=false"}, victims...)...)
	case "rollout":
		mustKubectl(ctx, t, c, "-n", ns, "rollout", "restart", "deployment/envoy")
	case "drain-node":
		// Evictions through the PodDisruptionBudget; the Envoy pod's replacement goes to another node.
		out := mustKubectl(ctx, t, c, "drain", names[1], "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=4m")
		t.Logf("kubectl drain %s:\n%s", names[1], out)
	case "taint-node":
		// kubectl drain first, as an operator does: it cordons the node and skips the DaemonSet's pod, which stays.
		out := mustKubectl(ctx, t, c, "drain", names[1], "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=4m")
		t.Logf("kubectl drain %s:\n%s", names[1], out)
		if got := podsByNode(ctx, t, c, ns)[names[1]]; len(got) != 1 {
			t.Fatalf("after kubectl drain --ignore-daemonsets, the DaemonSet's pods on %s: %v, want the one it skipped", names[1], got)
		}
		mustKubectl(ctx, t, c, "taint", "node", names[1], maintenanceTaint)
	}
	for _, p := range victims {
		waitGone(ctx, t, c, ns, p)
	}
	r.gone = time.Since(began)
	if s.action == "taint-node" {
		// The DaemonSet must not put a pod back on the tainted node.
		if !wait(ctx, 3*time.Second) {
			t.Fatal("interrupted")
		}
		if got := podsByNode(ctx, t, c, ns)[names[1]]; len(got) != 0 {
			t.Errorf("the DaemonSet put %v back on the tainted node %s", got, names[1])
		}
	}
	if !wait(ctx, 2*time.Second) {
		t.Fatal("interrupted")
	}
	for _, n := range names {
		fn := fleetNode{name: n, errors: map[string]int64{}}
		for _, l := range []*testbed.Load{loads[n].short, loads[n].long} {
			l.Drain()
			res := l.Wait()
			fn.sent += res.Sent
			fn.failed += res.Failed
			for k, v := range res.Errors {
				fn.errors[k] += v
			}
		}
		for _, p := range victims {
			if victimNode[p] != n {
				continue
			}
			f := logs[p]
			select {
			case <-f.done:
			case <-time.After(10 * time.Second):
			}
			drains, quiet, lastNew := f.fleetDrain()
			fn.pods = append(fn.pods, fmt.Sprintf("%s: %s; quiet: %s", p, drains, quiet))
			fn.lastNew = append(fn.lastNew, lastNew)
		}
		r.nodes = append(r.nodes, fn)
	}
	var failed, sent int64
	for _, fn := range r.nodes {
		failed += fn.failed
		sent += fn.sent
		t.Logf("%s: node %s: sent=%d failed=%d errors=%v; ended pods: %v; new traffic after health checks failed: %v",
			s.name, fn.name, fn.sent, fn.failed, fn.errors, fn.pods, fn.lastNew)
	}
	t.Logf("%s: old pods gone in %s", s.name, r.gone.Round(time.Millisecond))
	switch {
	case ctx.Err() != nil:
		t.Fatal("interrupted")
	case s.control && failed == 0:
		t.Errorf("the negative control (no injection) lost no request of %d: this test cannot tell a working drain from none", sent)
	case !s.control && failed > 0:
		t.Errorf("%d of %d requests failed", failed, sent)
	default:
		r.pass = true
		r.note = ""
	}
	return r
}

// quietEnd parses the manager's reason for the end of a fixed quiet period: "no new connection or request for
// 2s, 7.1s after health checks failed" or "no new request for 2s, 7.1s after health checks failed (...)".
var quietEnd = regexp.MustCompile(`for ([0-9.]+m?s), ([0-9.]+m?s) after health checks failed`)

// adaptiveQuietEnd parses it for the adaptive quiet period (the default): "41 arrivals/s until 5.9s after
// health checks failed, then 1s of silence (...)".
var adaptiveQuietEnd = regexp.MustCompile(`arrivals/s until ([0-9.]+m?s) after health checks failed`)

// fleetDrain returns the manager's drain outcome, the quiet phase's reason, and how long new traffic kept coming
// after the health checks failed (the quiet phase's end minus the quiet period).
func (f *logFollower) fleetDrain() (drains, quiet, lastNew string) {
	f.mu.Lock()
	text := f.text.String()
	f.mu.Unlock()
	var ds []string
	quiet, lastNew = "not logged", "–"
	for _, line := range strings.Split(text, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch {
		case m["msg"] == "drain finished":
			ds = append(ds, fmt.Sprintf("%v in %v", m["outcome"], m["duration"]))
		case m["msg"] == "drain phase ended" && m["phase"] == "quiet":
			quiet = fmt.Sprint(m["reason"])
			if sm := quietEnd.FindStringSubmatch(quiet); sm != nil {
				p, err1 := time.ParseDuration(sm[1])
				a, err2 := time.ParseDuration(sm[2])
				if err1 == nil && err2 == nil {
					lastNew = max(a-p, 0).Round(time.Millisecond).String()
				}
			} else if sm := adaptiveQuietEnd.FindStringSubmatch(quiet); sm != nil {
				if a, err := time.ParseDuration(sm[1]); err == nil {
					lastNew = a.Round(time.Millisecond).String()
				}
			}
		case m["msg"] == "quiet period not applied":
			quiet = fmt.Sprint(m["reason"])
		}
	}
	if len(ds) == 0 {
		ds = []string{"no drain logged"}
	}
	return strings.Join(ds, ", "), quiet, lastNew
}

func writeFleetReport(path string, names []string, rows []fleetRow, contourRows []contourFleetRow, took time.Duration) error {
	var b strings.Builder
	title := "three nodes"
	if len(contourRows) > 0 {
		title += " (and a fourth for Contour's DaemonSet)"
	}
	fmt.Fprintf(&b, "# make e2e-fleet: %s, one control plane\n\n", title)
	fmt.Fprintf(&b, "Written by `make e2e-fleet` (test/e2e/fleet_test.go) on %s, %s in all.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), took.Round(time.Second))
	b.WriteString("Nodes: " + strings.Join(names, ", ") + ". " + names[0] + " is the host's network namespace (the control plane's node); " +
		"the others each a network namespace with its own containerd, kubelet (own cgroup root) and kube-proxy (test/e2e/fleet.go).")
	if len(contourRows) > 0 {
		b.WriteString(" For the Contour scenarios (below), a fourth node, smgr-e2e-node4, joins after the others; nodes 2, 3 and 4 are the edge nodes.")
	}
	b.WriteString("\n\n")
	b.WriteString("Each scenario: an Envoy Deployment of " + strconv.Itoa(fleetReplicas) + " pods, two per node (topology spread), a PodDisruptionBudget " +
		"(maxUnavailable 1), its ClusterIP Service; from every node, through that node's kube-proxy, 3 keep-alive clients (GET / " +
		"every 20 ms) and 5 clients of " + LongRequest.String() + " requests. Injected pods: `shutdown-manager inject " + strings.Join(fleetInject, " ") + "`. " +
		"*New traffic after HC failed*: the quiet period's end (as the manager logged it) minus the period: how long new " +
		"connections or requests kept reaching the terminating pod after its health checks failed. " +
		"fleet-hook-daemonset-taint: the same Envoy as a DaemonSet (one pod per node); `kubectl drain` of " + names[1] +
		" (which skips the DaemonSet's pod), then `kubectl taint node " + names[1] + " " + maintenanceTaint +
		"`: the pod must drain with 0 failed and not come back.\n\n")
	b.WriteString("| scenario | node | requests (sent / failed) | errors | ended pod on the node: drain; quiet period | new traffic after HC failed | pass |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		if len(r.nodes) == 0 {
			fmt.Fprintf(&b, "| %s | – | – | – | %s | – | %v |\n", r.s.name, r.note, r.pass)
			continue
		}
		for i, n := range r.nodes {
			name := ""
			pass := ""
			if i == 0 {
				name = r.s.name
				if r.s.control {
					name += " (control: must fail)"
				}
				name += fmt.Sprintf(" — old pods gone in %s", r.gone.Round(100*time.Millisecond))
				pass = fmt.Sprint(r.pass)
			}
			pods := strings.Join(n.pods, "<br>")
			if pods == "" {
				pods = "–"
			}
			fmt.Fprintf(&b, "| %s | %s | %d / %d | %s | %s | %s | %s |\n", name, n.name, n.sent, n.failed, formatErrors(n.errors),
				strings.ReplaceAll(pods, "|", "/"), strings.Join(n.lastNew, ", "), pass)
		}
	}
	writeContourFleetSection(&b, contourRows)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

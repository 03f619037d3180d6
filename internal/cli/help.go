package cli

import (
	"fmt"
	"io"
)

// example is one command line of a command's help, with what it does. TestHelpSections parses each with the
// command's own flags.
type example struct{ what, line string }

// examples are the Examples section of each command's help (by FlagSet name), in one place. A line starts
// with "shutdown-manager COMMAND" or "kubectl shutdown-manager COMMAND"; what follows a " | " is another
// program's.
var examples = map[string][]example{
	"serve": {
		{"the sidecar: API on a unix socket Envoy's exec hook reaches with drain --via", "shutdown-manager serve --listen unix:///run/shutdown-manager/api.sock"},
		{"the API on a port, a 90s drain at most, metrics on a port of their own", "shutdown-manager serve --listen :8090 --drain-timeout 90s --metrics-listen :9090"},
	},
	"drain": {
		{"drain the Envoy this hook runs beside (its admin address read from its process)", "shutdown-manager drain"},
		{"drain Envoy's admin on a unix socket, at most 60s, and log to Envoy's stdout", "shutdown-manager drain --admin-address unix:///admin/admin.sock --drain-timeout 60s --log-output envoy"},
		{"join a sidecar's drain (sidecar mode's exec hook)", "shutdown-manager drain --via unix:///run/shutdown-manager/api.sock"},
	},
	"run": {
		{"wrap Envoy's command (agent mode): SIGTERM drains, then stops Envoy", "shutdown-manager run --termination-grace-period 120s -- envoy -c /etc/envoy/envoy.yaml"},
		{"the same with the API on a port", "shutdown-manager run --listen :8090 -- envoy -c /etc/envoy/envoy.yaml"},
	},
	"resume": {
		{"make a drained Envoy live again", "shutdown-manager resume --admin-address http://127.0.0.1:9901"},
		{"through a sidecar, canceling its drain", "shutdown-manager resume --via unix:///run/shutdown-manager/api.sock --force"},
	},
	"inject": {
		{"inject a file's workloads and apply them", "shutdown-manager inject -f envoy.yaml | kubectl apply -f -"},
		{"sidecar mode, a 120s drain timeout, from stdin, as JSON", "shutdown-manager inject -f - --mode sidecar --drain-timeout 120s -o json"},
		{"take over Contour's shutdown-manager in its Envoy DaemonSet", "shutdown-manager inject --takeover -f contour-envoy.yaml"},
	},
	"uninject": {
		{"give a file back as it was before inject", "shutdown-manager uninject -f injected.yaml"},
		{"the same from the cluster", "kubectl get deployment envoy -o yaml | shutdown-manager uninject -f - | kubectl apply -f -"},
	},
	"policy": {
		{"the policy and its bindings for hook mode", "shutdown-manager policy --image registry.example.com/shutdown-manager:v0.1.0 | kubectl apply -f -"},
		{"sidecar mode", "shutdown-manager policy --mode sidecar --image registry.example.com/shutdown-manager:v0.1.0"},
	},
	"webhook": {
		{"serve the webhook with cert-manager's files", "shutdown-manager webhook --tls-cert-file /certs/tls.crt --tls-key-file /certs/tls.key"},
		{"injecting in sidecar mode", "shutdown-manager webhook --tls-cert-file /certs/tls.crt --tls-key-file /certs/tls.key --mode sidecar"},
	},
	"status": {
		{"what Envoy's admin API says, counted as a drain would", "shutdown-manager status"},
		{"as JSON, counting every downstream connection", "shutdown-manager status --admin-address 127.0.0.1:19000 --count connections -o json"},
	},
	"install": {
		{"copy the binary into a volume (hook mode's init container)", "shutdown-manager install /opt/shutdown-manager"},
		{"install the kubectl plugin on the PATH", "shutdown-manager install --kubectl-plugin ~/.local/bin"},
	},
	"version": {
		{"the version", "shutdown-manager version"},
		{"for scripts", "shutdown-manager version -o json"},
	},
	"completion": {
		{"bash, for this shell", "shutdown-manager completion bash"},
		{"zsh, installed for every shell", "shutdown-manager completion zsh"},
		{"fish", "shutdown-manager completion fish"},
	},
	"kubectl": {
		{"the drain state of a DaemonSet's pods (Contour's Envoy)", "kubectl shutdown-manager status daemonset/envoy -n projectcontour"},
	},
	"kubectl status": {
		{"the drain state of every pod of a DaemonSet", "kubectl shutdown-manager status daemonset/envoy -n projectcontour"},
		{"pods by label, with node, IP and the last Event's note", "kubectl shutdown-manager status -l app=envoy -o wide"},
		{"one pod, its Events as YAML", "kubectl shutdown-manager status pod/envoy-7d9c8-x2x4f -o yaml"},
		{"the same without the plugin link", "shutdown-manager kubectl status statefulset/edge --kubeconfig ./admin.kubeconfig"},
	},
	"check": {
		{"verify every pod of a Deployment (the plugin's check, without kubectl)", "shutdown-manager check deployment/envoy -n edge"},
		{"one pod, as YAML", "shutdown-manager check pod/envoy-7d9c8-x2x4f -n edge -o yaml --kubeconfig ./admin.kubeconfig"},
	},
	"kubectl check": {
		{"verify every pod of Contour's Envoy DaemonSet", "kubectl shutdown-manager check daemonset/envoy -n projectcontour"},
		{"pods by label, as JSON for a script", "kubectl shutdown-manager check -l app=envoy -n edge -o json"},
		{"with the sidecars' own view of Envoy's admin (needs get on pods/proxy)", "kubectl shutdown-manager check deployment/envoy --live"},
		{"behind a load balancer that may send new connections for 120s after the pod starts terminating", "kubectl shutdown-manager check deployment/envoy --deregistration-delay 120s"},
	},
}

// exitCodes are the Exit codes section of each command's help (by FlagSet name); a command not here has
// defaultExitCodes.
var exitCodes = map[string][][2]string{
	"drain": {{"0", "drained, or Envoy was gone (no Envoy process left in this container)"}, {"1", "the drain timed out or failed"}, {"2", "bad flags or arguments"},
		{"3", "misconfigured: Envoy's admin address refused every connection to the deadline while an Envoy process ran (or, with --via, the sidecar had never reached it)"}},
	"serve": {{"0", "stopped by SIGTERM or SIGINT once any drain released"}, {"1", "the API could not listen, or another failure"}, {"2", "bad flags or arguments"}},
	"run": {{"0", "Envoy exited 0 (as it does on /quitquitquit after the drain)"}, {"N", "Envoy's own exit status N (128+S when signal S ended it)"},
		{"1", "also: Envoy could not start, or another failure"}, {"2", "bad flags or arguments (Envoy not started)"}},
	"resume":  {{"0", "Envoy passes health checks again"}, {"1", "it does not, or the sidecar refused (a drain holds waiters; see --force)"}, {"2", "bad flags or arguments"}},
	"inject":  {{"0", "the manifests were written"}, {"1", "unreadable manifests, no workload with an Envoy container, or a workload that cannot be injected"}, {"2", "bad flags or arguments"}},
	"status":  {{"0", "the status was printed"}, {"1", "Envoy's admin API did not answer"}, {"2", "bad flags or arguments"}},
	"webhook": {{"0", "stopped by SIGTERM or SIGINT"}, {"1", "it could not listen or read its certificate"}, {"2", "bad flags or arguments"}},
	"kubectl status": {{"0", "the table was printed (whatever the pods' drain states)"},
		{"1", "the API server could not be reached, refused (Forbidden, NotFound), or the kubeconfig is unusable"}, {"2", "bad flags or arguments"}},
	"kubectl check": checkExitCodes,
	"check":         checkExitCodes,
}

var checkExitCodes = [][2]string{{"0", "every check of every pod is ok, warn or unknown"},
	{"1", "a check failed (the table says which), no pod matched, or the pods could not be read"}, {"2", "bad flags or arguments"}}

var defaultExitCodes = [][2]string{{"0", "done"}, {"1", "the command failed"}, {"2", "bad flags or arguments"}}

// PrintExamples writes the Examples and Exit codes sections of the command named name.
func PrintExamples(w io.Writer, name string) {
	if exs := examples[name]; len(exs) > 0 {
		fmt.Fprintln(w, "\nExamples:")
		for i, e := range exs {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "  # %s\n  %s\n", e.what, e.line)
		}
	}
	codes, ok := exitCodes[name]
	if !ok {
		codes = defaultExitCodes
	}
	fmt.Fprintln(w, "\nExit codes:")
	for _, c := range codes {
		fmt.Fprintf(w, "  %-7s %s\n", c[0], c[1])
	}
}

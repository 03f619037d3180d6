// Package kubecli is the full command line: the pod binary's commands (internal/cli) and the cluster's —
// inject, uninject, policy, webhook, shell completion and the kubectl plugin — which carry the Kubernetes API
// types. cmd/shutdown-manager runs it; the pod binary (cmd/shutdown-manager-pod) links none of it.
package kubecli

import (
	"context"
	"io"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
)

// Exit codes, as internal/cli has them.
const (
	ExitOK            = cli.ExitOK
	ExitFailure       = cli.ExitFailure
	ExitUsage         = cli.ExitUsage
	ExitMisconfigured = cli.ExitMisconfigured
)

// Commands are the full CLI's commands, in the order its help lists them: the pod binary's (cli.Pod) and
// those of cli.ClusterOnly.
func Commands() []cli.Command {
	return []cli.Command{
		cli.PodCommand("serve"),
		cli.PodCommand("drain"),
		cli.PodCommand("run"),
		cli.PodCommand("resume"),
		{Name: "inject", Summary: "add the manager to the Envoy pods of Kubernetes manifests (-f FILE|-; YAML out)", Run: runInject},
		{Name: "policy", Summary: "write a MutatingAdmissionPolicy and its two bindings (opted-in namespaces, opted-in pods) that inject pods in the API server (Kubernetes >= 1.36; YAML out)", Run: runPolicy},
		{Name: "webhook", Summary: "serve the mutating admission webhook that injects opted-in pods (HTTPS POST /mutate-pods; TLS files reloaded)", Run: runWebhook},
		{Name: "uninject", Summary: "remove what inject added from Kubernetes manifests (-f FILE|-; YAML out)", Run: runUninject},
		cli.PodCommand("status"),
		cli.Install(true),
		cli.PodCommand("version"),
		{Name: "completion", Summary: "write the shell completion script of bash, zsh or fish", Run: runCompletion},
		{Name: "check", Summary: "verify a workload's injected pods through the API server (the plugin's check: kubectl shutdown-manager check …)", Run: runCheck("check")},
		{Name: "kubectl", Summary: "the kubectl plugin (kubectl shutdown-manager status|check …): the drain state of a workload's pods, or their checks, through the API server", Run: runKubectl},
	}
}

// kubectlCommands are the kubectl plugin's commands (runKubectl, kubectl.go).
func kubectlCommands() []cli.Command {
	return []cli.Command{
		{Name: "status", Summary: "the drain state of every pod of a workload, read through the API server", Run: runKubectlStatus},
		{Name: "check", Summary: "verify a workload's pods: injected, grace period, admin reachable, Events writable, image pulled", Run: runCheck("kubectl check")},
	}
}

// Run runs the full CLI's subcommand named by args[0] (Commands) with these standard streams and returns the
// process exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return cli.RunCommands(ctx, Commands(), args, stdin, stdout, stderr)
}

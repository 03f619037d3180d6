// Command shutdown-manager is the full CLI: the pod's commands and the cluster's (inject, uninject, policy,
// webhook, completion; see internal/kubecli). Named kubectl-shutdown_manager, it is the kubectl plugin
// (cli.Args). The binary in Envoy's pods is cmd/shutdown-manager-pod.
package main

import (
	"context"
	"os"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubecli"
)

func main() {
	os.Exit(kubecli.Run(context.Background(), cli.Args(os.Args), os.Stdin, os.Stdout, os.Stderr))
}

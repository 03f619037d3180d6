// Command shutdown-manager-pod is the binary Envoy's pods run, installed as shutdown-manager (the pod image's
// /shutdown-manager, install's DIR/shutdown-manager): drain, serve, run, resume, status, install and version
// (internal/cli), and no Kubernetes API types or client; test/docs checks that it links no k8s.io/ or
// sigs.k8s.io/ package. Asked for a cluster command (inject, webhook, …), it says that the full CLI,
// cmd/shutdown-manager, has it.
package main

import (
	"context"
	"os"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
)

func main() {
	os.Exit(cli.Run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

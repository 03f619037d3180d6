// Command shutdown-manager drains Envoy before its pod terminates. See internal/cli for the subcommands;
// named kubectl-shutdown_manager, it is the kubectl plugin (cli.Args).
package main

import (
	"context"
	"os"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
)

func main() {
	os.Exit(cli.Run(context.Background(), cli.Args(os.Args), os.Stdin, os.Stdout, os.Stderr))
}

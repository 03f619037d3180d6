// Command shutdown-manager drains Envoy before its pod terminates. See internal/cli for the subcommands.
package main

import (
	"context"
	"os"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
)

func main() {
	os.Exit(cli.Run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manager"
)

// runStatus prints Envoy's state and the work in flight per group of listeners and HTTP managers, counted as a drain would.
func runStatus(ctx context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var cf countFlags // only what changes the count: the drain's timing flags mean nothing here
	cf.register(fs)
	fs.Lookup("admin-address").Usage += adminFound
	output := OutputFlag(fs)
	if err := Parse(fs, args, stdout); err != nil {
		return err
	}
	cfg, err := cf.config()
	if err != nil {
		return err
	}
	cfg.FindAdmin = !IsFlagSet(fs, "admin-address")
	if err := CheckOutput(fs, *output); err != nil {
		return err
	}
	rep, err := manager.Status(ctx, cfg)
	if err != nil {
		return err
	}
	if *output != "table" {
		return WriteStructured(stdout, *output, rep)
	}
	fmt.Fprintf(stdout, "envoy %s at %s\n\n", rep.EnvoyState, rep.Admin)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	// CONNECTIONS are the listeners', HTTP-CX their managers'; NON-HTTP is the difference, floored at 0.
	fmt.Fprintln(tw, "GROUP\tSCOPES\tCONNECTIONS\tHTTP-CX\tREQUESTS\tNON-HTTP\tCOUNTED")
	for i, g := range rep.Groups {
		counted := "yes"
		if g.Reason != "" {
			counted = map[bool]string{true: "yes: ", false: "no: "}[g.Counted] + g.Reason
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%s\n", i+1, strings.Join(append(slices.Clone(g.Listeners), g.Managers...), " "),
			g.Connections, g.HTTPConnections, g.Requests, g.NonHTTP, counted)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\nin flight (--count %s): %d  (non-HTTP connections: %d)\n", rep.Count, rep.Open, rep.NonHTTPCx)
	fmt.Fprintf(stdout, "counted by: %s\n", rep.CountBasis)
	return nil
}

package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// statusReport is what `status -o json` prints.
type statusReport struct {
	Admin      string             `json:"admin_address"`
	EnvoyState string             `json:"envoy_state"`
	Count      drain.Mode         `json:"count"`
	Open       int64              `json:"open"`
	NonHTTPCx  int64              `json:"non_http_connections"`
	Listeners  []drain.ScopeCount `json:"listeners"`
	Excluded   []string           `json:"excluded,omitempty"`
	Groups     []drain.Group      `json:"groups"`
	CountBasis string             `json:"count_basis"`
}

// runStatus prints Envoy's state and the work in flight per listener and HTTP manager, counted as a drain would.
func runStatus(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var cf countFlags // only what changes the count: the drain's timing flags mean nothing here
	cf.register(fs)
	output := fs.String("o", "table", "output: table or json")
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	mode, sel, addr, err := cf.config()
	if err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		return usagef("-o: %q is not one of table, json", *output)
	}
	client := envoyadmin.New(addr, envoyadmin.Options{Timeout: cf.adminTimeout})
	state, err := client.ServerState(ctx)
	if err != nil {
		return fmt.Errorf("reading envoy's state: %w", err)
	}
	snap, err := client.Stats(ctx)
	if err != nil {
		return fmt.Errorf("reading envoy's stats: %w", err)
	}
	// Counted as a drain counts: with the listener configuration if it can be read, else by the rule without it.
	var topo *envoyadmin.Topology
	t, topoErr := client.ListenerConfig(ctx)
	if topoErr == nil {
		topo = &t
	}
	c := drain.Count(snap, topo, mode, sel)
	if topoErr != nil {
		c.Basis = "fallback: listener configuration unavailable: " + topoErr.Error()
	}
	rep := statusReport{Admin: addr.String(), EnvoyState: string(state), Count: mode, Open: c.Open,
		NonHTTPCx: c.NonHTTPCx, Listeners: c.Scopes, Excluded: c.Excluded, Groups: c.Groups, CountBasis: c.Basis}
	if rep.Listeners == nil {
		rep.Listeners = []drain.ScopeCount{}
	}
	if rep.Groups == nil {
		rep.Groups = []drain.Group{}
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
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

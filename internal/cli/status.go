package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
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
	c := drain.Count(snap, mode, sel)
	rep := statusReport{Admin: addr.String(), EnvoyState: string(state), Count: mode, Open: c.Open,
		NonHTTPCx: c.NonHTTPCx, Listeners: c.Scopes, Excluded: c.Excluded}
	if rep.Listeners == nil {
		rep.Listeners = []drain.ScopeCount{}
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(stdout, "envoy %s at %s\n\n", rep.EnvoyState, rep.Admin)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tCONNECTIONS\tREQUESTS")
	for _, s := range rep.Listeners {
		rq := ""
		if strings.HasPrefix(s.Name, "http.") {
			rq = fmt.Sprint(s.Requests)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", s.Name, s.Connections, rq)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\nin flight (--count %s): %d  (non-HTTP connections: %d)\n", rep.Count, rep.Open, rep.NonHTTPCx)
	if len(rep.Excluded) > 0 {
		fmt.Fprintf(stdout, "not counted: %v\n", rep.Excluded)
	}
	return nil
}

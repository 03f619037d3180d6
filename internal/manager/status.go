package manager

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// StatusConfig is what counting needs: where Envoy's admin API is and what counts as work in flight.
type StatusConfig struct {
	Admin envoyadmin.Address
	// FindAdmin: Admin is only the default; Envoy's own admin address is read from its process when this
	// process can see it (as Drain does).
	FindAdmin    bool
	AdminTimeout time.Duration
	Mode         drain.Mode
	Selector     drain.Selector
}

// StatusReport is Envoy's state and its work in flight, counted as a drain would count it (`status`).
type StatusReport struct {
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

// Status reads Envoy's state and counts its work in flight: with the listener configuration if it can be
// read, else by the rule without it, as a drain counts.
func Status(ctx context.Context, cfg StatusConfig) (StatusReport, error) {
	if cfg.FindAdmin {
		cfg.Admin = adminOfRunningEnvoy(cfg.Admin, slog.New(slog.DiscardHandler)) // the report says which it is
	}
	client := envoyadmin.New(cfg.Admin, envoyadmin.Options{Timeout: cfg.AdminTimeout})
	state, err := client.ServerState(ctx)
	if err != nil {
		return StatusReport{}, fmt.Errorf("reading envoy's state: %w", err)
	}
	snap, err := client.Stats(ctx)
	if err != nil {
		return StatusReport{}, fmt.Errorf("reading envoy's stats: %w", err)
	}
	var topo *envoyadmin.Topology
	t, topoErr := client.ListenerConfig(ctx)
	if topoErr == nil {
		topo = &t
	}
	c := drain.Count(snap, topo, cfg.Mode, cfg.Selector)
	if topoErr != nil {
		c.Basis = "fallback: listener configuration unavailable: " + topoErr.Error()
	}
	rep := StatusReport{Admin: cfg.Admin.String(), EnvoyState: string(state), Count: cfg.Mode, Open: c.Open,
		NonHTTPCx: c.NonHTTPCx, Listeners: c.Scopes, Excluded: c.Excluded, Groups: c.Groups, CountBasis: c.Basis}
	if rep.Listeners == nil {
		rep.Listeners = []drain.ScopeCount{}
	}
	if rep.Groups == nil {
		rep.Groups = []drain.Group{}
	}
	return rep, nil
}

package cli

import (
	"context"
	"log/slog"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// stack is what a long-running front end (serve, run) builds around the engine: the admin client, the
// metrics registry and the engine, running until stop is called.
type stack struct {
	admin  *envoyadmin.Client
	reg    *prometheus.Registry
	engine *drain.Engine
	stop   func(cause error) // cancels the engine (a running drain ends "canceled by <cause>") and waits for it
}

func newStack(df *drainFlags, cfg drain.Config, addr envoyadmin.Address, log *slog.Logger) (*stack, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	metrics := drain.NewMetrics(reg)
	admin := df.client(addr, metrics)
	engine, err := drain.New(cfg, admin, log, metrics)
	if err != nil {
		return nil, usageError{err}
	}
	// The engine does not stop with the caller's context: a signal must not cancel a drain in progress.
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = engine.Run(ctx)
	}()
	return &stack{admin: admin, reg: reg, engine: engine, stop: func(cause error) { cancel(cause); <-done }}, nil
}

// buildInfo is shutdown_manager_build_info{version, goversion} 1: which build is running, for dashboards.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "shutdown_manager_build_info",
		Help:        "Always 1; the labels say which build of shutdown-manager is running.",
		ConstLabels: prometheus.Labels{"version": Version, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

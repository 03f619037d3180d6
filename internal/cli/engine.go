package cli

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
)

// stack is what a long-running front end (serve, run) builds around the engine: the admin client, the
// metrics registry, the engine and its Events, running until stop is called.
type stack struct {
	admin  *envoyadmin.Client
	reg    *prometheus.Registry
	engine *drain.Engine
	// stop cancels the engine (a running drain ends "canceled by <cause>"), waits for it, then for the last
	// drain's Event (at most events.CloseWait). It may be called more than once.
	stop func(cause error)
}

// newStack starts the engine; component names the command in the Events ("serve", "run").
func newStack(df *drainFlags, cfg drain.Config, addr envoyadmin.Address, log *slog.Logger, component string) (*stack, error) {
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
	stopEvents := startEvents(df.kubeconfig, component, engine, cfg.Timeout, log)
	return &stack{admin: admin, reg: reg, engine: engine, stop: func(cause error) {
		cancel(cause)
		<-done
		stopEvents()
	}}, nil
}

// startEvents records the engine's drains as Kubernetes Events on the manager's Pod (internal/events), off
// the drain's path. Without API access it logs one warning and records nothing. stop returns once the
// drain running, if any, has released and its Event was sent or events.CloseWait has passed: call it after
// the engine was stopped, or after its drain released. It may be called more than once.
func startEvents(kubeconfig, component string, engine *drain.Engine, timeout time.Duration, log *slog.Logger) (stop func()) {
	client := events.New(events.Config{
		Kubeconfig: kubeconfig,
		Pod:        os.Getenv(events.EnvPodName),
		Namespace:  os.Getenv(events.EnvPodNamespace),
		Component:  component,
		UserAgent:  "shutdown-manager/" + Version,
	}, log)
	if !client.Enabled() {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		events.Watch(ctx, engine, client, timeout)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
			client.Close(events.CloseWait)
		})
	}
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

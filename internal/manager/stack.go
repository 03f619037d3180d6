package manager

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/server"
)

// The seams the stack wires: the admin client is the engine's Admin, the engine is what the API and the Events
// follow.
var (
	_ drain.Admin   = (*envoyadmin.Client)(nil)
	_ server.Engine = (*drain.Engine)(nil)
	_ events.Engine = (*drain.Engine)(nil)
)

// EngineConfig is what every front end of the drain engine needs: the drain's policy, where Envoy's admin
// API is, and where the drain's Events go.
type EngineConfig struct {
	Drain        drain.Config
	Admin        envoyadmin.Address
	AdminTimeout time.Duration // each admin API request
	Kubeconfig   string        // Events through this kubeconfig; "": the in-cluster config, when in a pod
	Version      string        // this build, for logs, metrics and the Events' user agent
}

// client is the admin API client, its requests observed by m.
func (c EngineConfig) client(m *drain.Metrics) *envoyadmin.Client {
	return envoyadmin.New(c.Admin, envoyadmin.Options{Timeout: c.AdminTimeout, Observe: m.AdminRequest})
}

// stack is what a long-running front end (Serve, Run) builds around the engine: the admin client, the
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
func newStack(cfg EngineConfig, log *slog.Logger, component string) (*stack, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), server.BuildInfo(cfg.Version))
	metrics := drain.NewMetrics(reg)
	admin := cfg.client(metrics)
	engine, err := drain.New(cfg.Drain, admin, log, metrics)
	if err != nil {
		return nil, err
	}
	// The engine does not stop with the caller's context: a signal must not cancel a drain in progress.
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = engine.Run(ctx)
	}()
	stopEvents := startEvents(cfg, component, engine, log)
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
func startEvents(cfg EngineConfig, component string, engine *drain.Engine, log *slog.Logger) (stop func()) {
	client := events.New(events.Config{
		Kubeconfig: cfg.Kubeconfig,
		Pod:        os.Getenv(events.EnvPodName),
		Namespace:  os.Getenv(events.EnvPodNamespace),
		UID:        os.Getenv(events.EnvPodUID),
		Component:  component,
		UserAgent:  "shutdown-manager/" + cfg.Version,
	}, log)
	if !client.Enabled() {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		events.Watch(ctx, engine, client, cfg.Drain.Timeout)
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

package cli

import (
	"context"
	"log/slog"
	"net"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/server"
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

// startAPI serves the HTTP API on la until the returned function is called; that function lets pending
// requests (a /shutdown whose drain has released) finish for up to 5s.
func startAPI(la listenAddress, s *stack, log *slog.Logger) (addr string, errs <-chan error, stop func(), err error) {
	ln, err := la.listen()
	if err != nil {
		return "", nil, nil, err
	}
	srv := server.NewHTTPServer(server.New(s.engine, s.reg, log))
	ch := make(chan error, 1)
	go func() { ch <- srv.Serve(ln) }()
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			log.Warn("closing the API", "err", err)
		}
	}
	return listenText(ln), ch, stop, nil
}

// listenText is the address a listener really bound (the port chosen for ":0"), as --listen takes it.
func listenText(ln net.Listener) string {
	if ln.Addr().Network() == "unix" {
		return "unix://" + ln.Addr().String()
	}
	return ln.Addr().String()
}

// Package server is the HTTP API in front of the drain engine: /healthz, /shutdown, /status, /metrics.
package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
)

// Engine is what the API needs of the drain engine (drain.Engine implements it).
type Engine interface {
	Trigger(ctx context.Context) (*drain.Drain, error)
	Status() drain.Status
}

// New returns the API's handler on a private mux.
//
//	GET  /healthz           200 "ok" while the process serves (liveness; never fails because of a drain)
//	GET|POST /shutdown      starts the drain or joins it, blocks until it releases: 200 when drained (or
//	                        Envoy already gone), 503 on timeout or error; the body is one line with the reason
//	GET  /status            the drain's Status as JSON
//	GET  /metrics           Prometheus metrics from gatherer
func New(engine Engine, gatherer prometheus.Gatherer, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	shutdown := shutdownHandler(engine, log)
	mux.Handle("GET /shutdown", shutdown)
	mux.Handle("POST /shutdown", shutdown)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(engine.Status())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	return mux
}

func shutdownHandler(engine Engine, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := engine.Trigger(r.Context())
		if err != nil {
			http.Error(w, "shutdown manager stopping: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		select {
		case <-d.Done():
		case <-r.Context().Done():
			// The caller gave up (kubelet's grace period ended); the drain goes on for the others.
			log.Info("shutdown caller left before release", "remote", r.RemoteAddr)
			return
		}
		res := d.Result()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		code := http.StatusOK
		if !res.OK() {
			code = http.StatusServiceUnavailable
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, "%s: %s\n", res.Outcome, res.Reason)
	})
}

// NewHTTPServer wraps h with the timeouts a control port needs. There is no write timeout: /shutdown
// blocks for as long as the drain (bounded by --drain-timeout).
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
}

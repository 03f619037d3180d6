// Package server is the HTTP API in front of the drain engine: /healthz, /shutdown, /resume, /status,
// /metrics.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// Engine is what the API needs of the drain engine (drain.Engine implements it).
type Engine interface {
	Trigger(ctx context.Context, by drain.Caller) (*drain.Drain, error)
	Resume(ctx context.Context, req drain.ResumeRequest) (drain.ResumeResult, error)
	Status() drain.Status
	EnvoyState(ctx context.Context) (envoyadmin.ServerState, error)
}

// OutcomeHeader is set on every /shutdown answer that is a drain's result (drained, timeout, …). A client
// tells by it a drain that failed (503 with the header) from a 503 that is no drain's answer (the manager
// stopping, a proxy in between): `drain --via` drains by itself on the latter.
const OutcomeHeader = "Shutdown-Manager-Outcome"

// DefaultMaxWaiters is the default cap on /shutdown callers waiting at once. Kubelet sends one request per
// preStop hook, so a pod needs a handful; each waiter costs about 21 kB of memory (measured with
// bench/waitercost: 128 waiters 16 MB RSS, 5,000 waiters 115 MB), so 128 of them stay within 4 MB.
const DefaultMaxWaiters = 128

// Options configure the API.
type Options struct {
	Log *slog.Logger
	// Gatherer serves GET /metrics on this handler; nil leaves /metrics out (metrics on their own listener).
	Gatherer prometheus.Gatherer
	// Registerer receives the API's own metrics (waiters, refused calls); nil: not registered.
	Registerer prometheus.Registerer
	// Token, when not empty, is required on /shutdown and /resume as "Authorization: Bearer <token>".
	Token string
	// MaxWaiters caps the /shutdown callers waiting at once; the next ones get 429 at once (<= 0: DefaultMaxWaiters).
	MaxWaiters int
}

// New returns the API's handler on a private mux.
//
//	GET  /healthz            200 "ok" while the process serves (liveness; never fails because of a drain)
//	GET|POST /shutdown       starts the drain or joins it, blocks until it releases: 200 when drained (or
//	                         Envoy already gone), 503 on timeout or error; the body is one line with the reason.
//	                         401 without the token (when one is set), 429 at once when MaxWaiters callers
//	                         already wait (a caller of a finished drain is not a waiter: it gets the result),
//	                         405 for any other method (HEAD included: it must not drain).
//	POST /resume[?force=1]   makes Envoy LIVE again: 200; 409 while a drain runs (unless force, which cancels
//	                         it); 401 without the token; 502 when Envoy's admin fails
//	GET  /status             the drain's Status as JSON
//	GET  /metrics            Prometheus metrics, when opts.Gatherer is set
func New(engine Engine, opts Options) http.Handler {
	if opts.MaxWaiters <= 0 {
		opts.MaxWaiters = DefaultMaxWaiters
	}
	a := &api{engine: engine, opts: opts, metrics: newMetrics(opts.Registerer)}
	if opts.Token != "" {
		sum := sha256.Sum256([]byte(opts.Token))
		a.tokenSum = sum[:]
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	// Registered for every method: Go's mux lets HEAD match a GET pattern, and a HEAD (a link checker, a
	// curl -I) must not drain the pod.
	mux.HandleFunc("/shutdown", a.shutdown)
	mux.HandleFunc("/resume", a.resume)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st := engine.Status()
		if st.Phase == drain.PhaseIdle {
			// No drain has run in this process: say what Envoy itself is (DRAINING after a restart mid-drain).
			if es, err := engine.EnvoyState(r.Context()); err != nil {
				st.LastError = "reading envoy's state: " + err.Error()
			} else {
				st.EnvoyState = string(es)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	})
	if opts.Gatherer != nil {
		mux.Handle("GET /metrics", MetricsHandler(opts.Gatherer))
	}
	return mux
}

// MetricsHandler serves GET /metrics from gatherer, for a listener of its own (--metrics-listen).
func MetricsHandler(gatherer prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{})
}

// NewMetricsMux is the handler of a metrics-only listener: GET /metrics and GET /healthz.
func NewMetricsMux(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", MetricsHandler(gatherer))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}

type api struct {
	engine   Engine
	opts     Options
	tokenSum []byte
	waiters  atomic.Int64
	metrics  *metrics
}

// authorized checks the bearer token in constant time (over hashes, so the length does not leak either).
func (a *api) authorized(r *http.Request) bool {
	if a.tokenSum == nil {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
	return subtle.ConstantTimeCompare(sum[:], a.tokenSum) == 1
}

// refuse answers a call that does not reach the engine, logs it with who asked and counts it.
func (a *api) refuse(w http.ResponseWriter, by drain.Caller, path string, code int, reason, text string) {
	a.metrics.refused.WithLabelValues(path, reason).Inc()
	a.opts.Log.Warn("request refused", append(by.Attrs(), "path", path, "reason", reason)...)
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="shutdown-manager"`)
	}
	// A refused client gives its connection slot (--max-connections) back at once, not after the idle timeout.
	w.Header().Set("Connection", "close")
	http.Error(w, text, code)
}

// admit checks a call of one of the endpoints that act (path): its method is one of methods, and it carries
// the bearer token when one is set. It refuses the call otherwise (405 or 401, logged and counted) and
// reports whether to go on, with the caller.
func (a *api) admit(w http.ResponseWriter, r *http.Request, path string, methods ...string) (drain.Caller, bool) {
	by := drain.NewHTTPCaller(r.RemoteAddr, r.Method, r.UserAgent())
	if !slices.Contains(methods, r.Method) {
		w.Header().Set("Allow", strings.Join(methods, ", "))
		a.refuse(w, by, path, http.StatusMethodNotAllowed, "method", "method not allowed: "+path+" takes "+strings.Join(methods, " or "))
		return by, false
	}
	if !a.authorized(r) {
		a.refuse(w, by, path, http.StatusUnauthorized, "unauthorized", "unauthorized: missing or wrong bearer token")
		return by, false
	}
	return by, true
}

func (a *api) shutdown(w http.ResponseWriter, r *http.Request) {
	by, ok := a.admit(w, r, "/shutdown", http.MethodGet, http.MethodPost)
	if !ok {
		return
	}
	// The cap counts waiters. While no drain has finished, it is taken before the trigger: a caller over it
	// neither waits nor starts anything. A caller of a finished drain is not a waiter: it gets that drain's
	// result at once (after the one shared read of Envoy's state), and takes a place only if Envoy was LIVE
	// again and its trigger started a new drain to wait for.
	counted := false
	if a.engine.Status().Outcome == "" {
		if !a.takeWaiter(w, by) {
			return
		}
		counted = true
		defer a.dropWaiter()
	}

	d, err := a.engine.Trigger(r.Context(), by)
	if err != nil {
		if r.Context().Err() != nil {
			return // the caller left
		}
		http.Error(w, "shutdown manager stopping: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if !counted && !isDone(d) {
		if !a.takeWaiter(w, by) {
			return
		}
		defer a.dropWaiter()
	}
	select {
	case <-d.Done():
	case <-r.Context().Done():
		// The caller gave up (kubelet's grace period ended); the drain goes on for the others.
		a.opts.Log.Info("shutdown caller left before release", by.Attrs()...)
		return
	}
	res := d.Result()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set(OutcomeHeader, string(res.Outcome))
	code := http.StatusOK
	if !res.OK() {
		code = http.StatusServiceUnavailable
	}
	w.WriteHeader(code)
	fmt.Fprintf(w, "%s: %s\n", res.Outcome, res.Reason)
}

// takeWaiter takes a place under --max-waiters, or answers 429 and reports false.
func (a *api) takeWaiter(w http.ResponseWriter, by drain.Caller) bool {
	if n := a.waiters.Add(1); n > int64(a.opts.MaxWaiters) {
		a.waiters.Add(-1)
		a.refuse(w, by, "/shutdown", http.StatusTooManyRequests, "busy",
			fmt.Sprintf("busy: %d callers already wait for the drain (--max-waiters); it goes on without this one", a.opts.MaxWaiters))
		return false
	}
	a.metrics.waiters.Inc()
	return true
}

func (a *api) dropWaiter() { a.waiters.Add(-1); a.metrics.waiters.Dec() }

func isDone(d *drain.Drain) bool {
	select {
	case <-d.Done():
		return true
	default:
		return false
	}
}

func (a *api) resume(w http.ResponseWriter, r *http.Request) {
	by, ok := a.admit(w, r, "/resume", http.MethodPost)
	if !ok {
		return
	}
	force := r.URL.Query().Get("force")
	if force != "" && force != "1" && force != "true" && force != "0" && force != "false" {
		http.Error(w, "force takes 1 or 0", http.StatusBadRequest)
		return
	}
	a.opts.Log.Info("resume requested", append(by.Attrs(), "force", force == "1" || force == "true")...)
	// Bounded: a forced resume waits for the canceled drain to release (it does at once) and two admin requests.
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	res, err := a.engine.Resume(ctx, drain.ResumeRequest{By: by, Force: force == "1" || force == "true"})
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch {
	case errors.Is(err, drain.ErrDrainRunning):
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, "refused: %v (POST /resume?force=1)\n", err)
	case err != nil:
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprintf(w, "error: %v\n", err)
	default:
		state := string(res.EnvoyState)
		if state == "" {
			state = "unknown"
		}
		note := ""
		if res.Canceled {
			note = " (the running drain was canceled)"
		}
		fmt.Fprintf(w, "resumed: envoy health checks pass again, envoy state %s%s\n", state, note)
	}
}

// metrics are the API's own metrics.
type metrics struct {
	waiters prometheus.Gauge
	refused *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shutdown_manager_shutdown_waiters",
			Help: "/shutdown callers waiting for the drain to release.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shutdown_manager_api_refused_total",
			Help: "API calls refused before reaching the drain engine, by path and reason (method, unauthorized, busy).",
		}, []string{"path", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.waiters, m.refused)
	}
	return m
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

// BuildInfo is shutdown_manager_build_info{version, goversion} 1: which build is running, for dashboards.
func BuildInfo(version string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "shutdown_manager_build_info",
		Help:        "Always 1; the labels say which build of shutdown-manager is running.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

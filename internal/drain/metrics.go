package drain

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the engine's Prometheus metrics, registered on the Registerer given to NewMetrics.
type Metrics struct {
	phase         *prometheus.GaugeVec
	inFlight      *inFlightGauge
	duration      prometheus.Histogram
	drains        *prometheus.CounterVec
	adminRequests *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg (nil: not registered, for tests and one-shot use).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shutdown_manager_drain_phase",
			Help: "1 for the phase the drain engine is in, 0 for the others.",
		}, []string{"phase"}),
		inFlight: newInFlightGauge(),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "shutdown_manager_drain_duration_seconds",
			Help:    "Time from a drain's trigger to its release.",
			Buckets: []float64{0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600},
		}),
		drains: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shutdown_manager_drains_total",
			Help: "Finished drains by outcome (drained, timeout, envoy_gone, error, canceled).",
		}, []string{"outcome"}),
		adminRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shutdown_manager_admin_requests_total",
			Help: "Requests to Envoy's admin API by endpoint and result (ok, http_<status>, unreachable, timeout, error).",
		}, []string{"endpoint", "result"}),
	}
	for _, o := range Outcomes {
		m.drains.WithLabelValues(string(o))
	}
	if reg != nil {
		reg.MustRegister(m.phase, m.inFlight, m.duration, m.drains, m.adminRequests)
	}
	return m
}

// AdminRequest counts one admin API request; it fits envoyadmin.Options.Observe.
func (m *Metrics) AdminRequest(endpoint, result string) {
	m.adminRequests.WithLabelValues(endpoint, result).Inc()
}

func (m *Metrics) setPhase(p Phase) {
	for _, q := range Phases {
		v := 0.0
		if q == p {
			v = 1
		}
		m.phase.WithLabelValues(string(q)).Set(v)
	}
}

// setOpen records the last count; an unknown count leaves the last known one (or none) in place.
func (m *Metrics) setOpen(n OpenCount) {
	if n.Known() {
		m.inFlight.value.Store(int64(n))
	}
}

func (m *Metrics) finished(r Result) {
	m.drains.WithLabelValues(string(r.Outcome)).Inc()
	m.duration.Observe(r.Duration.Seconds())
}

// inFlightGauge exports the work in flight at the last poll. It is absent from /metrics until a poll has
// read it (a 0 before any poll would claim "nothing in flight" when nothing is known). It is exported under
// its name and, for one release, under the deprecated name it had: it never counted only connections.
type inFlightGauge struct {
	value     atomic.Int64 // -1: unknown
	desc, old *prometheus.Desc
}

func newInFlightGauge() *inFlightGauge {
	g := &inFlightGauge{
		desc: prometheus.NewDesc("shutdown_manager_in_flight",
			"Work in flight at the last poll, as --count counts it (by default HTTP requests plus connections no HTTP manager owns). Absent until the first poll.", nil, nil),
		old: prometheus.NewDesc("shutdown_manager_open_connections",
			"Deprecated: use shutdown_manager_in_flight (same value). Removed in the next release.", nil, nil),
	}
	g.value.Store(-1)
	return g
}

func (g *inFlightGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc; ch <- g.old }

func (g *inFlightGauge) Collect(ch chan<- prometheus.Metric) {
	v := g.value.Load()
	if v < 0 {
		return
	}
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(v))
	ch <- prometheus.MustNewConstMetric(g.old, prometheus.GaugeValue, float64(v))
}

package drain

import (
	"strings"
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
	phaseEnds     *prometheus.CounterVec
	newTrafficCx  prometheus.Counter
	newTrafficRq  prometheus.Counter
	inFlightKind  *prometheus.GaugeVec
	cut           *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg (nil: not registered, for tests and one-shot use).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shutdown_manager_drain_phase",
			Help: "1 for the phase the drain engine is in, 0 for the others (" + joined(Phases) + ").",
		}, []string{"phase"}),
		inFlight: newInFlightGauge(),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "shutdown_manager_drain_duration_seconds",
			Help:    "Time from a drain's trigger to its release.",
			Buckets: []float64{0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600},
		}),
		drains: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shutdown_manager_drains_total",
			Help: "Finished drains by outcome (" + joined(Outcomes) + ").",
		}, []string{"outcome"}),
		adminRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shutdown_manager_admin_requests_total",
			Help: "Requests to Envoy's admin API by endpoint and result (ok, http_<status>, unreachable, timeout, error).",
		}, []string{"endpoint", "result"}),
		phaseEnds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shutdown_manager_drain_phase_ends_total",
			Help: "Drain phases ended, by phase and cause (" + joined(Causes) + "); /status and the log say the reason in words.",
		}, []string{"phase", "cause"}),
		newTrafficCx: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shutdown_manager_drain_new_connections_total",
			Help: "New downstream connections seen on the listeners the quiet period watches, after health checks failed.",
		}),
		newTrafficRq: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shutdown_manager_drain_new_requests_total",
			Help: "New requests seen by the HTTP managers the quiet period watches, after health checks failed.",
		}),
		inFlightKind: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shutdown_manager_in_flight_by_kind",
			Help: "Work in flight at the last poll by kind: upgraded_connections (WebSockets), requests (and streams), non_http_connections.",
		}, []string{"kind"}),
		cut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shutdown_manager_drain_cut_by_client_total",
			Help: "Work in flight the client side cut during drains (after health checks failed), on the counted HTTP managers: requests (reset or closed under while in flight) and connections (closed by the peer with a request in flight). A client giving up and a load balancer killing sessions look alike.",
		}, []string{"kind"}),
	}
	m.cut.WithLabelValues("requests")
	m.cut.WithLabelValues("connections")
	for _, o := range Outcomes {
		m.drains.WithLabelValues(string(o))
	}
	if reg != nil {
		reg.MustRegister(m.phase, m.inFlight, m.duration, m.drains, m.adminRequests, m.phaseEnds, m.newTrafficCx, m.newTrafficRq, m.inFlightKind, m.cut)
	}
	return m
}

// joined lists the values of an enumeration for a metric's help: the help says every label value there is, from
// the enumeration itself, so that a value added to the code is in the help and in the metrics reference.
func joined[T ~string](values []T) string {
	s := make([]string, len(values))
	for i, v := range values {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
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

func (m *Metrics) phaseEnded(pe PhaseEnd) {
	m.phaseEnds.WithLabelValues(string(pe.Phase), string(pe.Cause)).Inc()
}

func (m *Metrics) newTraffic(cx, rq int64) {
	m.newTrafficCx.Add(float64(cx))
	m.newTrafficRq.Add(float64(rq))
}

func (m *Metrics) cutByClient(c Cut) {
	m.cut.WithLabelValues("requests").Add(float64(c.Requests))
	m.cut.WithLabelValues("connections").Add(float64(c.Connections))
}

func (m *Metrics) setKinds(k *Kinds) {
	if k == nil {
		return
	}
	m.inFlightKind.WithLabelValues("upgraded_connections").Set(float64(k.Upgraded))
	m.inFlightKind.WithLabelValues("requests").Set(float64(k.Requests))
	m.inFlightKind.WithLabelValues("non_http_connections").Set(float64(k.NonHTTP))
}

func (m *Metrics) finished(r Result) {
	m.drains.WithLabelValues(string(r.Outcome)).Inc()
	m.duration.Observe(r.Duration.Seconds())
}

// inFlightGauge exports the work in flight at the last poll. It is absent from /metrics until a poll has
// read it (a 0 before any poll would claim "nothing in flight" when nothing is known). It is exported under
// its name and, in v0.1.0 only, under the deprecated name it had (it never counted only connections):
// DeprecatedInFlightRemovedIn is the release without it (test/docs fails once the CHANGELOG has that release and
// the alias is still here).
type inFlightGauge struct {
	value     atomic.Int64 // -1: unknown
	desc, old *prometheus.Desc
}

// DeprecatedInFlightRemovedIn is the release that no longer exports shutdown_manager_open_connections.
const DeprecatedInFlightRemovedIn = "v0.2.0"

func newInFlightGauge() *inFlightGauge {
	g := &inFlightGauge{
		desc: prometheus.NewDesc("shutdown_manager_in_flight",
			"Work in flight at the last poll, as --count counts it (by default HTTP requests plus connections no HTTP manager owns). Absent until the first poll.", nil, nil),
		old: prometheus.NewDesc("shutdown_manager_open_connections",
			"Deprecated: use shutdown_manager_in_flight (same value). Removed in "+DeprecatedInFlightRemovedIn+".", nil, nil),
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

package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the webhook's Prometheus metrics.
type metrics struct {
	requests *prometheus.CounterVec
	duration prometheus.Histogram
}

// newMetrics creates the metrics and registers them on reg (nil: not registered). Every outcome is created at
// zero, so that a rate over "error" or "warning" exists before the first one happens.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shutdown_manager_webhook_requests_total",
			Help: "Admission requests by outcome (injected, unchanged, skipped, warning, error).",
		}, []string{"outcome"}),
		// The target is a p99 under 10 ms (the README's benchmark); the API server's own timeout is the
		// configuration's timeoutSeconds, at most 30 s.
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "shutdown_manager_webhook_request_duration_seconds",
			Help:    "Time from an admission request's arrival to its answer, body read included.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
		}),
	}
	for _, o := range Outcomes {
		m.requests.WithLabelValues(string(o))
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration)
	}
	return m
}

func (m *metrics) observe(o Outcome, d time.Duration) {
	m.requests.WithLabelValues(string(o)).Inc()
	m.duration.Observe(d.Seconds())
}

// CertExpiryMetric is the name of the gauge CertExpiry makes.
const CertExpiryMetric = "shutdown_manager_webhook_certificate_expiry_timestamp_seconds"

// CertExpiry is a gauge of the served certificate's expiry (Unix seconds; 0 while none is loaded), read at each
// scrape: a rotation shows at the next one. An alert on it sees a certificate that is not being renewed
// (cert-manager failing, a Secret never rotated) before the API server's calls fail, which, with failurePolicy
// Ignore, admit pods uninjected.
func CertExpiry(c *CertFiles) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: CertExpiryMetric,
		Help: "Expiry of the webhook's serving certificate, in Unix seconds; 0 while none is loaded.",
	}, func() float64 {
		t := c.NotAfter()
		if t.IsZero() {
			return 0
		}
		return float64(t.Unix())
	})
}

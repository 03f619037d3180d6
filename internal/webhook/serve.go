package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/server"
)

// ServeConfig is the admission webhook's: what to inject, where it listens, its certificate.
type ServeConfig struct {
	Inject         inject.Config
	Listen         string // TCP [IP]:PORT
	HealthListen   string
	CertFile       string
	KeyFile        string
	Kubeconfig     string // for Events on owners; "" = in-cluster
	ShutdownPeriod time.Duration
	Version        string
	// AuditInterval is the time between audit passes over the pods that asked for injection (Auditor); 0: none.
	AuditInterval time.Duration
	// AuditConfiguration is the webhook's MutatingWebhookConfiguration, whose selectors the audit lists.
	AuditConfiguration string
}

// ErrServing is a failure of Serve already told in the log (a port it could not listen on, a server that
// stopped): the command exits 1 and adds nothing.
var ErrServing = errors.New("webhook: failure reported")

// ShutdownPeriod bounds the graceful stop: the API server's calls last at most the configuration's
// timeoutSeconds (the chart's default is a few seconds), and kubelet's grace period is 30 s by default.
const ShutdownPeriod = 10 * time.Second

// webhookGCPercent is the webhook's GOGC unless the environment sets one (see Serve).
const webhookGCPercent = 400

// Serve serves the webhook and its health port until SIGTERM, SIGINT or ctx, then stops gracefully:
// requests in progress are answered (within shutdownPeriod).
func Serve(ctx context.Context, cfg ServeConfig, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if os.Getenv("GOGC") == "" {
		// The live heap is a few MB and each admission allocates ~50 kB: with the default GOGC=100 the collector
		// runs several times a second at 500 admissions/s. At 400 the handler's CPU per admission drops by about
		// a third (BenchmarkServeHTTP: 190 -> 130 us), for a few MB more memory (bench/webhookload).
		debug.SetGCPercent(webhookGCPercent)
	}

	certs := NewCertFiles(cfg.CertFile, cfg.KeyFile, log)
	if _, err := certs.Check(); err != nil {
		// Not fatal: a Secret mounted by cert-manager may appear after the pod starts. /readyz says not ready.
		log.Warn("no serving certificate yet; not ready until one loads", "err", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		server.BuildInfo(cfg.Version), CertExpiry(certs))
	icfg := cfg.Inject
	rec := events.New(events.Config{Kubeconfig: cfg.Kubeconfig, Component: "webhook", Others: true,
		Pod: os.Getenv(events.EnvPodName), Namespace: os.Getenv(events.EnvPodNamespace), UserAgent: "shutdown-manager/" + cfg.Version}, log)
	defer rec.Close(events.CloseWait)
	h := New(Options{
		Decide:     func(r Review) Decision { return Decide(r, icfg) },
		Events:     ownerEvents{rec: rec, log: LogEvents{Log: log}},
		Log:        log,
		Registerer: reg,
	})

	wln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		log.Error("cannot listen", "listen", cfg.Listen, "err", err)
		return ErrServing
	}
	hln, err := net.Listen("tcp", cfg.HealthListen)
	if err != nil {
		wln.Close()
		log.Error("cannot listen", "health_listen", cfg.HealthListen, "err", err)
		return ErrServing
	}
	wsrv := server.NewHTTPServer(h.Mux())
	wsrv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate}
	wsrv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug) // TLS handshake noise from probes
	hsrv := server.NewHTTPServer(HealthMux(certs.Err, reg))

	certCtx, stopCerts := context.WithCancel(ctx)
	defer stopCerts()
	go certs.Run(certCtx, DefaultCertInterval)

	auditCtx, stopAudit := context.WithCancel(ctx)
	auditDone := startAudit(auditCtx, cfg, reg, log)
	defer func() { stopAudit(); <-auditDone }()

	errs := make(chan error, 2)
	go func() { errs <- wsrv.ServeTLS(wln, "", "") }()
	go func() { errs <- hsrv.Serve(hln) }()
	log.Info("webhook serving", "listen", wln.Addr().String(), "health_listen", hln.Addr().String(), "path", Path,
		"ready", certs.Ready(), "not_after", certs.NotAfter(), "version", cfg.Version)

	var failed error
	select {
	case <-ctx.Done():
		log.Info("stopping", "reason", context.Cause(ctx).Error())
	case err := <-errs:
		failed = err
		log.Error("serving failed", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownPeriod)
	defer cancel()
	for _, srv := range []*http.Server{wsrv, hsrv} {
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("stopping the server", "err", err)
		}
	}
	if failed != nil {
		return ErrServing
	}
	log.Info("exiting")
	return nil
}

// startAudit runs the Auditor until ctx is done, when cfg asks for it and the API server can be reached (the
// in-cluster config or --kubeconfig); the channel is closed when it has returned (at once without an audit).
func startAudit(ctx context.Context, cfg ServeConfig, reg prometheus.Registerer, log *slog.Logger) <-chan struct{} {
	done := make(chan struct{})
	if cfg.AuditInterval <= 0 {
		close(done)
		return done
	}
	api, err := events.NewReader(cfg.Kubeconfig, "", "shutdown-manager/"+cfg.Version)
	if err != nil {
		level := log.Warn
		if cfg.Kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
			level = log.Info // not in a cluster and no kubeconfig: a test, a benchmark, a human at a shell
		}
		level("audit of uninjected pods disabled", "err", err)
		close(done)
		return done
	}
	a := NewAuditor(api, AuditConfig{Configuration: cfg.AuditConfiguration, Inject: cfg.Inject, Instance: AuditInstance()}, log, reg)
	log.Info("auditing uninjected pods", "configuration", cfg.AuditConfiguration, "interval", cfg.AuditInterval.String())
	go func() {
		defer close(done)
		a.Run(ctx, cfg.AuditInterval)
	}()
	return done
}

var _ OwnerEvents = ownerEvents{}

// ownerEvents records the webhook's Events on pods' owners through the Events client (queued, never
// blocking the admission), and logs each one as well: the log is the record when the API is out of reach.
type ownerEvents struct {
	rec *events.Client
	log LogEvents
}

func (o ownerEvents) NotInjected(ctx context.Context, owner Owner, message string) {
	o.log.NotInjected(ctx, owner, message)
	o.rec.Record(events.Event{
		Type:   events.TypeWarning,
		Reason: ReasonNotInjected,
		Note:   message,
		Action: "Inject",
		Regarding: &events.ObjectReference{APIVersion: owner.APIVersion, Kind: owner.Kind, Namespace: owner.Namespace,
			Name: owner.Name, UID: string(owner.UID)},
	})
}

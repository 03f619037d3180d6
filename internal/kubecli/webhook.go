package kubecli

import (
	"context"
	"errors"
	"flag"
	"io"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manager"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/webhook"
)

// runWebhook serves the mutating admission webhook (webhook.Serve) with inject's flags as its settings.
func runWebhook(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	var inf injectFlags
	var lf cli.LogFlags
	inf.register(fs)
	lf.Register(fs)
	listen := fs.String("listen", ":8443", "where the webhook listens (HTTPS, POST "+webhook.Path+"): [IP]:PORT (an IP literal; no IP: all interfaces)")
	healthListen := fs.String("health-listen", ":8081", "where GET /healthz, /readyz and /metrics are served (plain HTTP): [IP]:PORT")
	certFile := fs.String("tls-cert-file", "", "the serving certificate (PEM, chain after the leaf), read again when it changes (required)")
	keyFile := fs.String("tls-key-file", "", "the serving certificate's private key (PEM), read again when it changes (required)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig for recording Events on the owners of pods that opted in but could not be injected (default: the in-cluster config; without one, those Events are only logged)")
	auditInterval := fs.Duration("audit-interval", webhook.DefaultAuditInterval, "how often to look for pods that asked for injection and run without it (admitted while the webhook could not be called), recording a Warning Event "+webhook.ReasonMissing+" on each and the gauge "+webhook.UninjectedMetric+" (lists pods and namespaces: the same access as --kubeconfig); 0 turns it off")
	auditConfiguration := fs.String("audit-configuration", "shutdown-manager", "the webhook's MutatingWebhookConfiguration, whose selectors say which pods asked for injection (the chart sets it)")
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	cfg := webhook.ServeConfig{CertFile: *certFile, KeyFile: *keyFile, Kubeconfig: *kubeconfig,
		ShutdownPeriod: webhook.ShutdownPeriod, Version: cli.Version,
		AuditInterval: *auditInterval, AuditConfiguration: *auditConfiguration}
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return cli.Usagef("give the serving certificate with --tls-cert-file and --tls-key-file")
	}
	if cfg.AuditInterval < 0 {
		return cli.Usagef("--audit-interval: want a duration >= 0, got %s", cfg.AuditInterval)
	}
	if cfg.AuditInterval > 0 && cfg.AuditConfiguration == "" {
		return cli.Usagef("--audit-configuration: name the MutatingWebhookConfiguration, or turn the audit off with --audit-interval=0")
	}
	for _, l := range []struct {
		flag, value string
		dst         *string
	}{{"--listen", *listen, &cfg.Listen}, {"--health-listen", *healthListen, &cfg.HealthListen}} {
		la, err := manager.ParseListen(l.value)
		if err != nil || la.Network() != "tcp" {
			return cli.Usagef("%s: want [IP]:PORT, got %q", l.flag, l.value)
		}
		*l.dst = la.Addr()
	}
	icfg, err := inf.config(fs)
	if err != nil {
		return err
	}
	cfg.Inject = icfg
	log, closeLog, err := lf.Logger(stdout, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	if err := webhook.Serve(ctx, cfg, log); errors.Is(err, webhook.ErrServing) {
		return manager.ErrReported // told in the log
	} else if err != nil {
		return err
	}
	return nil
}

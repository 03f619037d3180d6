package manager

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// resumeTimeout bounds a resume: a forced one waits for the canceled drain to release (at once) and for
// two admin requests.
const resumeTimeout = 30 * time.Second

// ResumeConfig says where a resume goes: through a serve sidecar (Via), or straight to Envoy's admin API.
type ResumeConfig struct {
	Via   *envoyadmin.Address // the sidecar's API; nil: Envoy's admin API at Admin
	Token Token               // with Via: sent as a bearer token
	Force bool                // with Via: cancel a running drain instead of being refused

	Admin envoyadmin.Address
	// FindAdmin: Admin is only the default; Envoy's own admin address is read from its process when this
	// process can see it (as Drain and Status do), so that a resume in Envoy's container needs no flag.
	FindAdmin    bool
	AdminTimeout time.Duration
	Version      string
}

// Resume makes a drained Envoy LIVE again: through a sidecar (POST /resume, which refuses while a drain
// holds waiters unless forced, and is logged there), or directly (POST /healthcheck/ok). It prints one
// line to stdout; nil when Envoy's health checks pass again.
func Resume(ctx context.Context, cfg ResumeConfig, log *slog.Logger, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, resumeTimeout)
	defer cancel()
	if cfg.Via != nil {
		cfg.Token.WarnMode(log)
		c := newViaClient(*cfg.Via, cfg.Token.Secret, cfg.Version)
		path := "/resume"
		if cfg.Force {
			path += "?force=1"
		}
		code, line, err := c.call(ctx, http.MethodPost, path)
		if err != nil {
			log.Error("resume failed", "via", c.addr.String(), "err", err)
			return ErrReported
		}
		fmt.Fprintln(stdout, line)
		if code != http.StatusOK {
			log.Error("resume refused", "via", c.addr.String(), "status", code, "answer", line)
			return ErrReported
		}
		return nil
	}

	if cfg.FindAdmin {
		cfg.Admin = adminOfRunningEnvoy(cfg.Admin, log)
	}
	c := envoyadmin.New(cfg.Admin, envoyadmin.Options{Timeout: cfg.AdminTimeout})
	if err := c.HealthcheckOK(ctx); err != nil {
		log.Error("resume failed", "admin_address", cfg.Admin.String(), "err", err)
		return ErrReported
	}
	state := "unknown"
	if st, err := c.ServerState(ctx); err == nil {
		state = string(st)
	}
	log.Info("resumed: envoy health checks pass again", "admin_address", cfg.Admin.String(), "envoy_state", state)
	fmt.Fprintf(stdout, "resumed: envoy health checks pass again, envoy state %s\n", state)
	return nil
}

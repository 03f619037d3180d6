package cli

import (
	"context"
	"flag"
	"io"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drainflag"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manager"
)

// runResume makes a drained Envoy LIVE again (manager.Resume): through a serve API (--via: POST /resume,
// which refuses while a drain holds waiters unless --force, and is logged there), or directly on Envoy's
// admin API (POST /healthcheck/ok). It prints one line; exit 0 when Envoy's health checks pass again.
func runResume(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	var lf LogFlags
	lf.Register(fs)
	admin := fs.String("admin-address", drainflag.DefaultAdmin, "without --via: Envoy's admin API, http://IP:PORT, IP:PORT (meaning http) or unix:///path/admin.sock")
	fs.Lookup("admin-address").Usage += adminFound
	adminTimeout := fs.Duration("admin-timeout", time.Second, "without --via: timeout of each admin API request")
	via := fs.String("via", "", "resume through a serve API at this address (unix:///path/api.sock or http://IP:PORT): it refuses while its drain holds waiters, and logs who asked")
	tokenFile := fs.String("token-file", "", "with --via: send the secret in this file as \"Authorization: Bearer <secret>\"")
	force := fs.Bool("force", false, "with --via: cancel a running drain (its callers get 503 \"canceled by resume\") instead of refusing")
	if err := Parse(fs, args, stdout); err != nil {
		return err
	}
	if *via == "" && (*force || *tokenFile != "") {
		return Usagef("--force and --token-file need --via (without it, resume talks to Envoy, where no drain runs to cancel)")
	}
	if *adminTimeout <= 0 {
		return Usagef("--admin-timeout must be positive")
	}
	cfg := manager.ResumeConfig{Force: *force, AdminTimeout: *adminTimeout, Version: Version}
	if *via != "" {
		if *tokenFile != "" {
			tf, err := manager.ReadToken(*tokenFile)
			if err != nil {
				return Usagef("--token-file: %v", err)
			}
			cfg.Token = tf
		}
		addr, err := envoyadmin.ParseAddress(*via)
		if err != nil {
			return Usagef("--via: %v", err)
		}
		cfg.Via = &addr
	} else {
		addr, err := envoyadmin.ParseAddress(*admin)
		if err != nil {
			return Usagef("--admin-address: %v", err)
		}
		cfg.Admin, cfg.FindAdmin = addr, !IsFlagSet(fs, "admin-address")
	}
	log, closeLog, err := lf.Logger(stdout, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	return manager.Resume(ctx, cfg, log, stdout)
}

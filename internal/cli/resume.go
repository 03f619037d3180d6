package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// resumeTimeout bounds a resume: a forced one waits for the canceled drain to release (at once) and for
// two admin requests.
const resumeTimeout = 30 * time.Second

// runResume makes a drained Envoy LIVE again: through a serve API (--via: POST /resume, which refuses
// while a drain holds waiters unless --force, and is logged there), or directly on Envoy's admin API
// (POST /healthcheck/ok). It prints one line; exit 0 when Envoy's health checks pass again.
func runResume(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	var lf logFlags
	lf.register(fs)
	admin := fs.String("admin-address", "http://127.0.0.1:9901", "without --via: Envoy's admin API, http://IP:PORT, IP:PORT (meaning http) or unix:///path/admin.sock")
	adminTimeout := fs.Duration("admin-timeout", time.Second, "without --via: timeout of each admin API request")
	via := fs.String("via", "", "resume through a serve API at this address (unix:///path/api.sock or http://IP:PORT): it refuses while its drain holds waiters, and logs who asked")
	tokenFile := fs.String("token-file", "", "with --via: send the secret in this file as \"Authorization: Bearer <secret>\"")
	force := fs.Bool("force", false, "with --via: cancel a running drain (its callers get 503 \"canceled by resume\") instead of refusing")
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if *via == "" && (*force || *tokenFile != "") {
		return usagef("--force and --token-file need --via (without it, resume talks to Envoy, where no drain runs to cancel)")
	}
	if *adminTimeout <= 0 {
		return usagef("--admin-timeout must be positive")
	}
	log, closeLog, err := lf.logger(stdout, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	ctx, cancel := context.WithTimeout(ctx, resumeTimeout)
	defer cancel()

	if *via != "" {
		token := ""
		if *tokenFile != "" {
			tf, err := readToken(*tokenFile)
			if err != nil {
				return usagef("--token-file: %v", err)
			}
			tf.warnMode(log)
			token = tf.token
		}
		c, err := newViaClient(*via, token)
		if err != nil {
			return usagef("--via: %v", err)
		}
		path := "/resume"
		if *force {
			path += "?force=1"
		}
		code, line, err := c.call(ctx, http.MethodPost, path)
		if err != nil {
			log.Error("resume failed", "via", c.addr.String(), "err", err)
			return errReported
		}
		fmt.Fprintln(stdout, line)
		if code != http.StatusOK {
			log.Error("resume refused", "via", c.addr.String(), "status", code, "answer", line)
			return errReported
		}
		return nil
	}

	addr, err := envoyadmin.ParseAddress(*admin)
	if err != nil {
		return usagef("--admin-address: %v", err)
	}
	c := envoyadmin.New(addr, envoyadmin.Options{Timeout: *adminTimeout})
	if err := c.HealthcheckOK(ctx); err != nil {
		log.Error("resume failed", "admin_address", addr.String(), "err", err)
		return errReported
	}
	state := "unknown"
	if st, err := c.ServerState(ctx); err == nil {
		state = string(st)
	}
	log.Info("resumed: envoy health checks pass again", "admin_address", addr.String(), "envoy_state", state)
	fmt.Fprintf(stdout, "resumed: envoy health checks pass again, envoy state %s\n", state)
	return nil
}

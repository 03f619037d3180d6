package cli

import (
	"context"
	"flag"
	"io"
	"strings"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manager"
)

// runServe is the sidecar: an HTTP API whose /shutdown drains Envoy; SIGTERM exits once any drain has
// released (manager.Serve).
func runServe(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var df drainFlags
	var lf LogFlags
	var af apiFlags
	df.register(fs)
	lf.Register(fs)
	af.register(fs)
	listen := fs.String("listen", ":8090", "where the API listens: [IP]:PORT (an IP literal; no IP: all interfaces) or unix:///path/api.sock")
	triggerWait := fs.Duration("trigger-wait", 3*time.Second, "after SIGTERM with no drain running, wait this long for a /shutdown that may be on its way, then exit")
	if err := Parse(fs, args, stdout); err != nil {
		return err
	}
	ecfg, err := df.config()
	if err != nil {
		return err
	}
	la, err := manager.ParseListen(*listen)
	if err != nil {
		return Usagef("--listen: %v", err)
	}
	if *triggerWait < 0 {
		return Usagef("--trigger-wait must not be negative")
	}
	acfg, err := af.config(la)
	if err != nil {
		return err
	}
	if acfg.Metrics != nil && *acfg.Metrics == la && !strings.HasSuffix(la.Addr(), ":0") { // port 0: two ports chosen
		return Usagef("--metrics-listen must differ from --listen")
	}
	log, closeLog, err := lf.Logger(stdout, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	return manager.Serve(ctx, manager.ServeConfig{Engine: ecfg, API: acfg, TriggerWait: *triggerWait}, log)
}

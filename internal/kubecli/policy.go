package kubecli

import (
	"context"
	"flag"
	"io"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/policy"
)

// runPolicy is `policy [settings]`: writes the MutatingAdmissionPolicy and its two bindings (Kubernetes >= 1.36)
// that make the API server inject pods as `inject` would with the same settings, as YAML for kubectl apply.
func runPolicy(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("policy", flag.ContinueOnError)
	var f injectFlags
	f.register(fs)
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	cfg, err := f.config(fs)
	if err != nil {
		return err
	}
	p, b, err := policy.Generate(cfg)
	if err != nil {
		return err
	}
	out, err := policy.YAML(p, b[0], b[1])
	if err != nil {
		return err
	}
	warnUnpullable(stderr, "policy", cfg.Image)
	_, err = stdout.Write(out)
	return err
}

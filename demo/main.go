// Command demo shows what the shutdown manager changes: a real Envoy under load (HTTP/1.1 keep-alive,
// HTTP/2, long requests) is terminated three times: with a plain SIGTERM; the way kubelet does it with the
// manager as a sidecar (preStop GET /shutdown, then SIGTERM); and with the manager as the agent that runs
// Envoy (SIGTERM to the manager). The results are printed side by side. Run it with `make demo`; it needs only loopback and ends by itself.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

type config struct {
	manager     string        // the shutdown-manager binary
	warmup      time.Duration // load before termination begins
	propagation time.Duration // how long clients keep sending new requests after termination begins (endpoint removal)
	longFor     time.Duration // duration of each long request
	minDrain    time.Duration // --min-drain-duration for the manager
}

func main() {
	var c config
	flag.StringVar(&c.manager, "manager", "bin/shutdown-manager", "the shutdown-manager binary")
	flag.DurationVar(&c.warmup, "warmup", 3*time.Second, "load before termination begins")
	flag.DurationVar(&c.propagation, "propagation", time.Second, "how long clients keep sending new requests after termination begins")
	flag.DurationVar(&c.longFor, "long", 3*time.Second, "duration of each long request")
	flag.DurationVar(&c.minDrain, "min-drain-duration", 2*time.Second, "the manager's --min-drain-duration (above --propagation)")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// outcome is one termination's figures.
type outcome struct {
	name               string
	sent, failed       int64
	longOK, longFailed int64
	timeToExit         time.Duration // from the start of termination to Envoy's exit
	managerSaid        string
}

func run(c config) error {
	bins, err := testbed.FindBinaries()
	if err != nil {
		return fmt.Errorf("finding envoy (run `make envoy`): %w", err)
	}
	bin := bins[0]
	if _, err := os.Stat(c.manager); err != nil {
		return fmt.Errorf("the manager binary %s (run `make build`): %w", c.manager, err)
	}
	fmt.Printf("Envoy %s, load: 8 HTTP/1.1 keep-alive clients, 4 HTTP/2 streams, 6 clients of %s requests.\n", bin.Version, c.longFor)
	fmt.Printf("Termination begins after %s of load; clients keep sending new requests for %s more (endpoint removal).\n\n", c.warmup, c.propagation)

	var results []outcome
	for _, policy := range []struct {
		name      string
		terminate func(e *testbed.Envoy, dir string) (string, error)
	}{
		{"plain SIGTERM", func(e *testbed.Envoy, _ string) (string, error) { return "", e.Signal(syscall.SIGTERM) }},
		{"shutdown-manager serve", func(e *testbed.Envoy, dir string) (string, error) { return viaManager(c, e, dir) }},
		{"shutdown-manager run", func(e *testbed.Envoy, _ string) (string, error) { return "", e.Signal(syscall.SIGTERM) }},
	} {
		fmt.Printf("== %s\n", policy.name)
		opts := testbed.Options{}
		if policy.name == "shutdown-manager run" {
			// The agent: Envoy runs as the manager's child; kubelet's SIGTERM goes to the manager.
			opts = testbed.Options{AdminUnix: true, Wrapper: []string{c.manager, "run", "--min-drain-duration", c.minDrain.String(), "--quiet-period", "0s",
				"--drain-timeout", "30s", "--log-format", "text", "--log-level", "warn", "--"}}
		}
		r, err := scenario(c, bin, policy.name, opts, policy.terminate)
		if err != nil {
			return fmt.Errorf("%s: %w", policy.name, err)
		}
		results = append(results, r)
	}

	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\trequests sent\tfailed\tlong requests completed\tlong requests failed\ttime to exit\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t\n", r.name, r.sent, r.failed, r.longOK, r.longFailed, r.timeToExit.Round(10*time.Millisecond))
	}
	tw.Flush()
	for _, r := range results {
		if r.managerSaid != "" {
			fmt.Printf("\nshutdown-manager answered the preStop hook: %s\n", r.managerSaid)
		}
	}
	return nil
}

// scenario starts an Envoy, loads it, terminates it with terminate and reports what the clients saw.
func scenario(c config, bin testbed.Binary, name string, opts testbed.Options, terminate func(*testbed.Envoy, string) (string, error)) (outcome, error) {
	r := outcome{name: name}
	dir, err := os.MkdirTemp("", "sm-demo")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	up, err := testbed.StartUpstream()
	if err != nil {
		return r, err
	}
	defer up.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts.Dir = dir
	e, err := testbed.Start(ctx, bin, up, opts)
	if err != nil {
		return r, err
	}
	defer e.Stop()

	loads := []struct {
		name string
		*testbed.Load
	}{
		{"keepalive", testbed.KeepAlive(ctx, e.HTTPAddr, 8, 20*time.Millisecond, "/")},
		{"http2", testbed.HTTP2(ctx, e.HTTPAddr, 4, "/sleep?d=50ms")},
		{"long", testbed.KeepAlive(ctx, e.HTTPAddr, 6, 0, "/sleep?d="+c.longFor.String())},
	}
	time.Sleep(c.warmup)

	start := time.Now()
	fmt.Printf("   %s: termination begins\n", time.Now().Format("15:04:05.000"))
	// Endpoint removal: after the propagation delay the clients send nothing new; what is in flight goes on.
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-time.After(c.propagation):
		case <-ctx.Done():
		}
		for _, l := range loads {
			go l.Drain()
		}
	}()
	exited := make(chan time.Duration, 1)
	go func() { <-e.Exited(); exited <- time.Since(start) }()
	said, err := terminate(e, dir)
	if err != nil {
		return r, err
	}
	r.managerSaid = said
	select {
	case r.timeToExit = <-exited:
	case <-ctx.Done():
		return r, fmt.Errorf("envoy did not exit")
	}
	fmt.Printf("   %s: envoy exited after %s\n", time.Now().Format("15:04:05.000"), r.timeToExit.Round(10*time.Millisecond))
	<-stopped
	for _, l := range loads {
		res := l.Wait()
		r.sent += res.Sent
		r.failed += res.Failed
		if l.name == "long" {
			r.longOK, r.longFailed = res.OK, res.Failed
		}
		fmt.Printf("   %-9s %s\n", l.name, res)
	}
	return r, nil
}

// viaManager does what kubelet does with the sidecar pod spec: it runs Envoy's preStop hook (GET /shutdown,
// which blocks until the manager releases) and then sends Envoy SIGTERM.
func viaManager(c config, e *testbed.Envoy, dir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mgr, err := testbed.StartServe(ctx, c.manager, dir, e.AdminURL, "--min-drain-duration", c.minDrain.String(), "--quiet-period", "0s", "--drain-timeout", "30s")
	if err != nil {
		return "", err
	}
	defer mgr.Stop()
	code, body, err := mgr.Shutdown(ctx)
	if err != nil {
		return "", fmt.Errorf("preStop GET /shutdown: %w", err)
	}
	fmt.Printf("   %s: preStop hook returned %d, kubelet sends SIGTERM\n", time.Now().Format("15:04:05.000"), code)
	return body, e.Signal(syscall.SIGTERM)
}

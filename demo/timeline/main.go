// Command timeline records one termination of a real Envoy in hook mode, the way kubelet runs it, and draws it.
//
//	go run ./demo/timeline record -manager bin/shutdown-manager -out docs/timeline
//	go run ./demo/timeline plot -in docs/timeline -out docs/timeline.svg
//
// record starts the newest pinned Envoy with load (HTTP/1.1 keep-alive clients, HTTP/2 streams, clients of long
// requests, an idle keep-alive pool) and, at t=0 ("pod deleted"), does what Kubernetes does at once and in
// parallel: the endpoints are removed (the clients keep sending new requests for -propagation, then stop, as
// kube-proxy and load balancers catch up) while kubelet runs Envoy's preStop hook, the real
// `shutdown-manager drain` with the settings inject gives a 45 s grace period. When the hook returns it sends
// Envoy SIGTERM (kubelet's next step) and waits for Envoy's exit. Every 100 ms it samples Envoy's own gauges
// (downstream connections and requests in flight on the HTTP listener) and the clients' counts; the drain's
// JSON log gives the phases. It writes series.csv, events.csv and run.txt (what ran, where, when).
//
// plot turns those files into an SVG (no dependency: plain text), the README's picture; the test checks that
// the committed SVG is what plot makes of the committed data.
package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: timeline record|plot [FLAGS]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "record":
		fs := flag.NewFlagSet("record", flag.ExitOnError)
		var c recordConfig
		fs.StringVar(&c.manager, "manager", "bin/shutdown-manager", "the shutdown-manager binary")
		fs.StringVar(&c.out, "out", "docs/timeline", "directory for series.csv, events.csv and run.txt")
		fs.DurationVar(&c.propagation, "propagation", time.Second, "how long clients keep sending new requests after the pod's deletion")
		fs.DurationVar(&c.long, "long", 6*time.Second, "duration of each long request")
		fs.DurationVar(&c.grace, "grace", 45*time.Second, "terminationGracePeriodSeconds (inject gives the drain 5 s less)")
		fs.Parse(os.Args[2:])
		err = record(c)
	case "plot":
		fs := flag.NewFlagSet("plot", flag.ExitOnError)
		in := fs.String("in", "docs/timeline", "directory with series.csv and events.csv")
		out := fs.String("out", "docs/timeline.svg", "the SVG to write")
		fs.Parse(os.Args[2:])
		var svg string
		svg, err = plotDir(*in)
		if err == nil {
			err = os.WriteFile(*out, []byte(svg), 0o644)
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "timeline:", err)
		os.Exit(1)
	}
}

type recordConfig struct {
	manager, out      string
	propagation, long time.Duration
	grace             time.Duration
}

type sample struct {
	t                    time.Duration
	cx, rq, sent, failed int64
	poolOpen             int
}

type event struct {
	t    time.Duration
	name string
}

func record(c recordConfig) error {
	bins, err := testbed.FindBinaries()
	if err != nil {
		return fmt.Errorf("finding envoy (run `make envoy`): %w", err)
	}
	bin := bins[0]
	manager, err := filepath.Abs(c.manager)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "sm-timeline")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	up, err := testbed.StartUpstream()
	if err != nil {
		return err
	}
	defer up.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := testbed.Start(ctx, bin, up, testbed.Options{Dir: dir})
	if err != nil {
		return err
	}
	defer e.Stop()

	loads := []*testbed.Load{
		testbed.KeepAlive(ctx, e.HTTPAddr, 8, 20*time.Millisecond, "/"),
		testbed.HTTP2(ctx, e.HTTPAddr, 4, "/sleep?d=50ms"),
		testbed.KeepAlive(ctx, e.HTTPAddr, 6, 0, "/sleep?d="+c.long.String()),
	}
	pool, err := testbed.IdlePool(ctx, e.HTTPAddr, 20)
	if err != nil {
		return err
	}

	var (
		mu      sync.Mutex
		samples []sample
		events  []event
		start   time.Time
	)
	mark := func(name string, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, event{at.Sub(start), name})
	}
	start = time.Now().Add(3 * time.Second) // t=0: the pod's deletion, after 3 s of load
	exited := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // sample Envoy's gauges and the clients every 100 ms until after Envoy's exit
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			s := sample{t: time.Since(start)}
			if st, err := e.Stats(ctx, `^http\.ingress_http\.downstream_(cx|rq)_active$`); err == nil {
				s.cx, s.rq = st["http.ingress_http.downstream_cx_active"], st["http.ingress_http.downstream_rq_active"]
			} else {
				s.cx, s.rq = -1, -1 // Envoy gone
			}
			for _, l := range loads {
				r := l.Snapshot()
				s.sent += r.Sent
				s.failed += r.Failed
			}
			s.poolOpen = pool.Counts().Open
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
			select {
			case <-exited:
				if time.Since(start) > 0 {
					return
				}
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	if err := sleep(ctx, time.Until(start)); err != nil {
		return err
	}

	mark("pod deleted", time.Now())
	go func() { // endpoints removed: after the propagation delay no client sends anything new
		if sleep(ctx, c.propagation) != nil {
			return
		}
		mark("endpoints removed everywhere", time.Now())
		for _, l := range loads {
			go l.Drain()
		}
	}()
	drainTimeout := c.grace - 5*time.Second
	hook := exec.CommandContext(ctx, manager, "drain", "--admin-address", e.AdminURL, "--log-format", "json",
		"--drain-timeout", drainTimeout.String())
	stderr, err := hook.StderrPipe()
	if err != nil {
		return err
	}
	mark("preStop hook starts: shutdown-manager drain", time.Now())
	if err := hook.Start(); err != nil {
		return err
	}
	var logLines []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		logLines = append(logLines, line)
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m["time"]))
		if err != nil {
			continue
		}
		switch m["msg"] {
		case "envoy health checks failing":
			mark("health checks fail", at)
		case "drain phase ended":
			mark(fmt.Sprintf("%v ended (%v)", m["phase"], m["cause"]), at)
		case "drain finished":
			mark(fmt.Sprintf("released: %v", m["outcome"]), at)
		}
	}
	if err := hook.Wait(); err != nil {
		return fmt.Errorf("the preStop hook failed: %w\n%s", err, strings.Join(logLines, "\n"))
	}
	mark("hook returned, SIGTERM to Envoy", time.Now())
	if err := e.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	<-e.Exited()
	mark("Envoy exited", time.Now())
	mark("grace period ends: kubelet's SIGKILL (the deadline, not reached)", start.Add(c.grace))
	if err := sleep(ctx, 500*time.Millisecond); err != nil { // a few samples after the exit
		return err
	}
	close(exited)
	<-sampled
	var sent, failed int64
	for _, l := range loads {
		r := l.Wait()
		sent += r.Sent
		failed += r.Failed
	}

	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("t_s,cx_active,rq_active,sent,failed,pool_open\n")
	for _, s := range samples {
		fmt.Fprintf(&b, "%.3f,%d,%d,%d,%d,%d\n", s.t.Seconds(), s.cx, s.rq, s.sent, s.failed, s.poolOpen)
	}
	if err := os.WriteFile(filepath.Join(c.out, "series.csv"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	b.Reset()
	w := csv.NewWriter(&b)
	w.Write([]string{"t_s", "event"})
	for _, ev := range events {
		w.Write([]string{fmt.Sprintf("%.3f", ev.t.Seconds()), ev.name})
	}
	if w.Flush(); w.Error() != nil {
		return w.Error()
	}
	if err := os.WriteFile(filepath.Join(c.out, "events.csv"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	host, _ := os.Hostname()
	run := fmt.Sprintf("recorded %s on %s (%s/%s, %d CPUs) by: go run ./demo/timeline record -manager %s -propagation %s -long %s -grace %s\n"+
		"Envoy %s (%s); hook: shutdown-manager drain --drain-timeout %s (defaults otherwise: --min-drain-duration 5s, --quiet-period auto)\n"+
		"load: 8 HTTP/1.1 keep-alive clients, 4 HTTP/2 streams, 6 clients of %s requests, 20 idle keep-alive connections\n"+
		"requests sent %d, failed %d; idle connections closed by Envoy's exit %d of 20\n",
		time.Now().UTC().Format(time.RFC3339), host, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), c.manager, c.propagation, c.long, c.grace,
		bin.Version, filepath.Base(bin.Path), drainTimeout, c.long, sent, failed, 20-pool.Counts().Open)
	return os.WriteFile(filepath.Join(c.out, "run.txt"), []byte(run), 0o644)
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// newRig starts an upstream and an Envoy for policy p (under the manager for `run`). close stops both and
// removes the directory.
func newRig(ctx context.Context, c *config, p policy, tune tuning, opts testbed.Options) (*rig, func(), error) {
	// Short: the admin socket path must fit a unix socket address.
	dir, err := os.MkdirTemp("", "smb")
	if err != nil {
		return nil, nil, err
	}
	up, err := testbed.StartUpstream()
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	r := &rig{c: c, up: up, dir: dir}
	opts.Dir = dir
	if p.envoyOpts != nil {
		p.envoyOpts(&opts)
	}
	if p.agent {
		opts.AdminUnix = true
		opts.Wrapper = wrapperFor(r, p, tune)
	}
	r.opts = opts
	e, err := testbed.Start(ctx, c.envoyBin, up, opts)
	if err != nil {
		up.Close()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	r.e = e
	return r, func() {
		e.Stop()
		up.Close()
		os.RemoveAll(dir)
	}, nil
}

// termination is one termination's timeline.
type termination struct {
	start   time.Time // termination begins (preStop hook / SIGTERM to the agent)
	release time.Time // the policy let Envoy go (zero: unknown, or capped)
	exit    time.Time // Envoy (for `run`: the manager, after Envoy) exited (zero: killed by the bench)
	capped  bool
	outcome string
	hook    string
	sidecar func() sidecarStory
}

func secs(from, to time.Time) float64 {
	if from.IsZero() || to.IsZero() {
		return -1
	}
	return to.Sub(from).Seconds()
}

// terminate runs release (prepared by p) and then does what kubelet does once the hook returns: SIGTERM to
// Envoy. It waits (bounded) for the exit. The bench's cap bounds the policy.
func terminate(ctx context.Context, c *config, r *rig, p policy, release func(context.Context) releaseResult) termination {
	t := termination{start: time.Now()}
	capCtx, cancel := context.WithTimeout(ctx, c.capAfter)
	rr := release(capCtx)
	cancel()
	t.release, t.capped, t.outcome, t.hook, t.sidecar = rr.at, rr.capped, rr.outcome, rr.hook, rr.sidecar
	if t.capped {
		t.outcome = "no release (capped)"
	}
	if !p.agent {
		r.e.Signal(syscall.SIGTERM) // kubelet, after the hook (or the grace period)
	} else if t.capped {
		r.e.Signal(syscall.SIGTERM) // a second SIGTERM; then Stop below
	}
	select {
	case <-r.e.Exited():
		if !r.e.Killed() && !t.capped {
			t.exit = time.Now()
		}
	case <-time.After(30 * time.Second):
		t.outcome += "; killed by the bench (no exit 30 s after SIGTERM)"
		r.e.Stop()
	case <-ctx.Done():
		r.e.Stop()
	}
	return t
}

// seriesWriter collects the open-connection samples of the load scenario.
type seriesWriter struct {
	mu   sync.Mutex
	rows [][]string
}

func newSeriesWriter() *seriesWriter {
	return &seriesWriter{rows: [][]string{{"variant", "policy", "run", "t", "cx_http", "cx_tcp", "rq_active", "failed"}}}
}

func (s *seriesWriter) add(variant, policy string, run int, t float64, cxHTTP, cxTCP, rq, failed int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = append(s.rows, []string{variant, policy, strconv.Itoa(run), strconv.FormatFloat(t, 'f', 3, 64),
		strconv.FormatInt(cxHTTP, 10), strconv.FormatInt(cxTCP, 10), strconv.FormatInt(rq, 10), strconv.FormatInt(failed, 10)})
}

func (s *seriesWriter) write(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	s.mu.Lock()
	w.WriteAll(s.rows)
	s.mu.Unlock()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// sampleFilter selects the gauges the load scenario samples.
const sampleFilter = `^(listener\.ingress_(http|tcp)\.downstream_cx_active|http\.ingress_http\.downstream_rq_active)$`

// sampler reads Envoy's open connections every c.sampleEvery until stop is closed or Envoy exits; times are
// relative to *t0 once t0 is set (before, relative to the sampler's start minus warmup).
type sampler struct {
	done chan struct{}
}

func startSampler(ctx context.Context, c *config, r *rig, variant, policy string, run int, series *seriesWriter,
	origin time.Time, failed func() int64, stop <-chan struct{}) *sampler {
	s := &sampler{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(c.sampleEvery)
		defer tick.Stop()
		for range 100000 { // bounded: at 100 ms, hours
			select {
			case <-stop:
				return
			case <-r.e.Exited():
				series.add(variant, policy, run, time.Since(origin).Seconds(), 0, 0, 0, failed())
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := r.e.Stats(sctx, sampleFilter)
			cancel()
			t := time.Since(origin).Seconds()
			if err != nil {
				series.add(variant, policy, run, t, -1, -1, -1, failed())
				continue
			}
			series.add(variant, policy, run, t, st["listener.ingress_http.downstream_cx_active"],
				st["listener.ingress_tcp.downstream_cx_active"], st["http.ingress_http.downstream_rq_active"], failed())
		}
	}()
	return s
}

// awaitStat polls Envoy's stats every 5 ms (bounded by d) until pred holds for the stats matching filter.
func awaitStat(ctx context.Context, e *testbed.Envoy, filter string, d time.Duration, pred func(map[string]int64) bool) error {
	deadline := time.Now().Add(d)
	for {
		st, err := e.Stats(ctx, filter)
		if err == nil && pred(st) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("stats %s: condition not met within %s (last %v, err %v)", filter, d, st, err)
		}
		time.Sleep(5 * time.Millisecond) // Envoy offers no event for a gauge
	}
}

package main

// The peers' policies, re-created from their documented behaviour (see /work/shared/ANCHORS.md and the
// project's brief): what they poll, how often, what they count and when they let Envoy go. They are
// models of the policies, not the peers' code.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// Timing of the peers, as documented.
const (
	contourInterval    = 5 * time.Second  // contour envoy shutdown --check-interval
	contourFilePoll    = 1 * time.Second  // contour's /shutdown checks the ok file this often (see prepareContour)
	egInterval         = 1 * time.Second  // Envoy Gateway polls this often
	egMinDrain         = 10 * time.Second // --min-drain-duration
	egDrainTimeout     = 60 * time.Second // --drain-timeout
	egFilePoll         = 1 * time.Second  // /shutdown/ready checks the ready file this often
	contourFailRetries = 5                // POST /healthcheck/fail: first try and 4 retries
	contourFailBackoff = 200 * time.Millisecond
)

// contourExcluded are the HTTP managers Contour does not count.
var contourExcluded = map[string]bool{"admin": true, "envoy-admin": true, "stats": true, "health": true, "stats-health": true}

// egExcluded matches the listener stats Envoy Gateway does not count.
var egExcluded = regexp.MustCompile(`admin|19001|19003|worker`)

// contourQuery is Contour's stats query (cmd/contour/shutdownmanager.go): Prometheus text, filtered on the
// raw stat names.
var contourQuery = "/stats/prometheus?" + url.Values{"filter": {`^http\..*\.downstream_cx_active$`}}.Encode()

// egQuery is Envoy Gateway's stats query.
var egQuery = "/stats?" + url.Values{"filter": {`^listener\..*\.downstream_cx_active$`}, "format": {"json"}}.Encode()

// sleepCtx sleeps d (a policy's own timing) unless ctx is done first; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// fileWaiter models a peer's /shutdown handler, which checks a file every interval (first at once) and
// answers once it exists. It returns when the release happens or ctx is done.
// The model does not model what kubelet sees of Envoy's hook: the real sidecars die or time out before
// answering it (see the real-binary runs), which a model in this process cannot reproduce.
func fileWaiter(ctx context.Context, file *atomic.Bool, interval time.Duration, outcome func() string) releaseResult {
	for {
		if file.Load() {
			o := outcome()
			claims := "success (ready file written)"
			if o == "timeout" {
				claims = "success (exit 0, ready file written at the drain timeout)"
			}
			return releaseResult{at: time.Now(), outcome: o, hook: "not modelled",
				sidecar: func() sidecarStory { return sidecarStory{Hook: "returned (model)", Claims: claims} }}
		}
		if !sleepCtx(ctx, interval) {
			return releaseResult{capped: true, hook: atCap,
				sidecar: func() sidecarStory {
					return sidecarStory{Hook: atCap + " (model)", Claims: "none within the bench's cap"}
				}}
		}
	}
}

// adminDo is one admin request with no size cap and a 30 s bound: Envoy.AdminGet caps answers at 64 MB,
// and the unfiltered /stats/prometheus MARIN3R polls is about 150 MB at 10,000 clusters.
func adminDo(ctx context.Context, r *rig, method, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.e.AdminEndpoint(path), nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.e.AdminClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return b, err
}

// prepareContour: `contour envoy shutdown` (the shutdown-manager container's exec preStop hook) and the
// shutdown-manager's /shutdown (Envoy's httpGet preStop hook) run side by side when termination begins.
// The release is when the hook writes its ok file and returns, not the handler's next 1 s look at the
// file: in kubelet's order the sidecar gets SIGTERM as soon as its hook returns and, with no handler for
// it, dies, which ends Envoy's hook (without an answer; the model does not claim that part).
func prepareContour(_ context.Context, r *rig, _ tuning) (func(context.Context) releaseResult, func(), error) {
	return func(ctx context.Context) releaseResult {
		var ok atomic.Bool
		written := make(chan struct{})
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { // contour envoy shutdown
			for i := range contourFailRetries {
				if _, err := adminDo(ctx, r, http.MethodPost, "/healthcheck/fail"); err == nil || i == contourFailRetries-1 {
					break // it goes on even when all attempts failed
				}
				if !sleepCtx(ctx, contourFailBackoff) {
					return
				}
			}
			for ctx.Err() == nil { // no deadline of its own: the bench's cap ends it
				body, err := adminDo(ctx, r, http.MethodGet, contourQuery)
				if err == nil {
					if open, _ := contourConnections(body); open <= 0 {
						ok.Store(true) // the ok file
						close(written)
						return
					}
				}
				if !sleepCtx(ctx, contourInterval) {
					return
				}
			}
		}()
		select {
		case <-written:
		case <-ctx.Done():
		}
		return fileWaiter(ctx, &ok, contourFilePoll, func() string { return "drained" })
	}, nil, nil
}

// contourConnections is Contour's count over a Prometheus answer: envoy_http_downstream_cx_active summed
// over the HTTP managers but its own admin/stats/health ones; n is the number of samples parsed.
func contourConnections(body []byte) (open float64, n int) {
	n = parseProm(body, func(name, labels []byte, v float64) {
		if string(name) == "envoy_http_downstream_cx_active" && !contourExcluded[promLabel(labels, "envoy_http_conn_manager_prefix")] {
			open += v
		}
	})
	return open, n
}

// prepareEnvoyGateway: `envoy-gateway envoy shutdown` and the /shutdown/ready handler side by side.
func prepareEnvoyGateway(_ context.Context, r *rig, _ tuning) (func(context.Context) releaseResult, func(), error) {
	return func(ctx context.Context) releaseResult {
		var ready atomic.Bool
		var timedOut atomic.Bool
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			start := time.Now()
			adminDo(ctx, r, http.MethodPost, "/healthcheck/fail") // no retries
			for ctx.Err() == nil {
				elapsed := time.Since(start)
				if elapsed > egDrainTimeout {
					timedOut.Store(true)
					break
				}
				if n, err := egConnections(ctx, r); err == nil && n <= 0 && elapsed > egMinDrain {
					break
				}
				if !sleepCtx(ctx, egInterval) {
					return
				}
			}
			ready.Store(true) // written whether drained or timed out
		}()
		return fileWaiter(ctx, &ready, egFilePoll, func() string {
			if timedOut.Load() {
				return "timeout"
			}
			return "drained"
		})
	}, nil, nil
}

// egConnections is Envoy Gateway's count: listener downstream_cx_active except admin and per-worker.
func egConnections(ctx context.Context, r *rig) (int64, error) {
	body, err := adminDo(ctx, r, http.MethodGet, egQuery)
	if err != nil {
		return 0, err
	}
	return sumJSONStats(body, func(name string) bool { return !egExcluded.MatchString(name) })
}

// sumJSONStats sums the integer stats of an admin /stats?format=json answer whose names keep accepts.
func sumJSONStats(body []byte, keep func(string) bool) (int64, error) {
	stats, err := testbed.ParseStatsJSON(body)
	if err != nil {
		return 0, err
	}
	var sum int64
	for name, v := range stats {
		if keep(name) {
			sum += v
		}
	}
	return sum, nil
}

// parseProm calls fn for every sample line of a Prometheus text exposition: name, the label block
// (without braces) and the value. Comments and malformed lines are skipped.
func parseProm(body []byte, fn func(name, labels []byte, v float64)) int {
	n := 0
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		var name, labels, rest []byte
		if i := bytes.IndexByte(line, '{'); i >= 0 {
			j := bytes.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, labels, rest = line[:i], line[i+1:j], line[j+1:]
		} else {
			i := bytes.IndexByte(line, ' ')
			if i < 0 {
				continue
			}
			name, rest = line[:i], line[i:]
		}
		rest = bytes.TrimSpace(rest)
		if i := bytes.IndexByte(rest, ' '); i >= 0 {
			rest = rest[:i] // a timestamp
		}
		v, err := strconv.ParseFloat(string(rest), 64)
		if err != nil {
			continue
		}
		n++
		fn(name, labels, v)
	}
	return n
}

// promLabel returns the value of label key in a label block like `a="x",b="y"`.
func promLabel(labels []byte, key string) string {
	for len(labels) > 0 {
		eq := bytes.IndexByte(labels, '=')
		if eq < 0 || eq+1 >= len(labels) || labels[eq+1] != '"' {
			return ""
		}
		k := string(bytes.TrimSpace(labels[:eq]))
		rest := labels[eq+2:]
		end := bytes.IndexByte(rest, '"') // label values here hold no escaped quotes
		if end < 0 {
			return ""
		}
		if k == key {
			return string(rest[:end])
		}
		labels = bytes.TrimLeft(rest[end+1:], ",")
	}
	return ""
}

package drain

import (
	"context"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// Reads of Envoy's listener configuration during one drain. The first poll reads it. After that, a read
// happens only when the stats show a listener scope or an HTTP manager scope the last read did not know (a
// listener added since, or an LDS update that gave a listener another HTTP manager, whose connections would
// otherwise count as connections no manager owns), at most once per topologyRereadGap: a read costs Envoy's main thread about as much as a poll on a large
// configuration (~100 ms with 10,000 clusters), so it is never made on every poll. A failed read is retried
// after topologyRetryFirst, doubling up to topologyRetryLast; until one succeeds the count uses the rule
// without the configuration (Basis "fallback: …"), or keeps the last configuration read.
const (
	topologyRereadGap  = time.Second
	topologyRetryFirst = time.Second
	topologyRetryLast  = 30 * time.Second
)

// topologyReader is one drain's view of Envoy's listener configuration. It is used by the drain's
// goroutine only.
type topologyReader struct {
	admin Admin
	log   *slog.Logger

	topo    *envoyadmin.Topology // the last configuration read; nil until one read succeeds
	known   map[string]bool      // listener and HTTP manager scopes (canonical) of topo, or seen in the stats when it was read
	read    bool                 // a read was attempted
	next    time.Time            // no read before this
	backoff time.Duration        // after a failed read
	reason  string               // why topo is nil: the last read's error
	warned  bool
}

func newTopologyReader(admin Admin, log *slog.Logger) *topologyReader {
	return &topologyReader{admin: admin, log: log}
}

// count counts snap as Count does, with the listener configuration, read first if it is due.
func (r *topologyReader) count(ctx context.Context, snap envoyadmin.Snapshot, mode Mode, sel Selector) Counts {
	if r.due(snap, time.Now()) {
		r.refresh(ctx, snap)
	}
	c := Count(snap, r.topo, mode, sel)
	if r.topo == nil {
		c.Basis = "fallback: " + r.reason
	}
	return c
}

// due reports whether a read should be made now: the first one, a retry after a failure, or a listener
// or HTTP manager scope in the stats that the configuration did not know when it was read.
func (r *topologyReader) due(snap envoyadmin.Snapshot, now time.Time) bool {
	switch {
	case !r.read:
		return true
	case now.Before(r.next):
		return false
	case r.topo == nil:
		return true
	}
	for name := range snap.Listeners {
		if s := envoyadmin.CanonicalScope(name); !r.known[s] && !builtin(s) {
			return true
		}
	}
	for name := range snap.HTTP {
		if s := envoyadmin.CanonicalScope(name); !r.known[s] && !builtin(s) {
			return true
		}
	}
	return false
}

func (r *topologyReader) refresh(ctx context.Context, snap envoyadmin.Snapshot) {
	first := !r.read
	r.read = true
	topo, err := r.admin.ListenerConfig(ctx)
	now := time.Now()
	if err != nil {
		r.backoff = min(max(2*r.backoff, topologyRetryFirst), topologyRetryLast)
		r.next = now.Add(r.backoff)
		if r.topo == nil {
			r.reason = "listener configuration unavailable: " + err.Error()
		}
		if !r.warned {
			r.warned = true
			r.log.Warn("reading envoy's listener configuration failed; counting without it where needed",
				"err", err, "retry_in", r.backoff.String(), "have_earlier_config", r.topo != nil)
		} else {
			r.log.Debug("reading envoy's listener configuration failed", "err", err, "retry_in", r.backoff.String())
		}
		return
	}
	if r.backoff > 0 && r.topo == nil {
		r.log.Info("envoy's listener configuration read after failures", "listeners", len(topo.Listeners))
	}
	r.topo, r.backoff, r.next, r.reason = &topo, 0, now.Add(topologyRereadGap), ""
	r.known = make(map[string]bool, len(topo.Listeners)+len(snap.Listeners)+len(snap.HTTP))
	for _, l := range topo.Listeners {
		r.known[l.Scope] = true
		for _, h := range l.HTTP {
			r.known[h] = true
		}
	}
	// Listeners and HTTP managers the stats show but the configuration still does not (removed, still
	// closing their connections; a manager of a listener without a stat scope) count as Count says; they do
	// not make every later poll read again.
	var unknown []string
	for _, names := range []iter.Seq[string]{maps.Keys(snap.Listeners), maps.Keys(snap.HTTP)} {
		for name := range names {
			if s := envoyadmin.CanonicalScope(name); !r.known[s] && !builtin(s) {
				r.known[s] = true
				unknown = append(unknown, s)
			}
		}
	}
	slices.Sort(unknown)
	level := slog.LevelDebug
	if !first && len(unknown) > 0 {
		level = slog.LevelInfo
	}
	if topo.AdminRoutesUnread != "" {
		// Listeners that route only to the admin API (Contour's stats-health) then count as traffic for
		// the quiet period: their health checks may hold it to the deadline.
		r.log.Warn("envoy's static clusters unread: listeners that route only to the admin API count as traffic",
			"err", topo.AdminRoutesUnread)
	}
	r.log.Log(ctx, level, "envoy's listener configuration read", "listeners", len(topo.Listeners), "unknown_in_stats", unknown)
}

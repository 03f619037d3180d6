package drain

import (
	"context"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// envoyStateReader reads Envoy's own state for GET /status: at most one /server_info request at a time,
// its answer reused for stateCacheTTL, so any number of /status callers cost Envoy's admin at most one
// request a second.
type envoyStateReader struct {
	turn  chan struct{} // a token: whoever holds it may read or refresh the cache
	state envoyadmin.ServerState
	err   error
	at    time.Time
}

func newEnvoyStateReader() *envoyStateReader {
	r := &envoyStateReader{turn: make(chan struct{}, 1)}
	r.turn <- struct{}{}
	return r
}

// EnvoyState reads Envoy's state as /server_info reports it (LIVE, DRAINING, …). GET /status shows it while
// this process has run no drain: a manager restarted in the middle of a drain then shows Envoy DRAINING,
// not a bare "idle" that reads as "nothing happened".
func (e *Engine) EnvoyState(ctx context.Context) (envoyadmin.ServerState, error) {
	r := e.envoyState
	select {
	case <-r.turn:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { r.turn <- struct{}{} }()
	if r.at.IsZero() || time.Since(r.at) >= stateCacheTTL {
		r.state, r.err = e.admin.ServerState(ctx)
		r.at = time.Now()
	}
	return r.state, r.err
}

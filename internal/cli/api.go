package cli

import (
	"flag"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manager"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/server"
)

// apiFlags are the flags of the HTTP API that serve and run --listen share (besides --listen itself).
type apiFlags struct {
	metricsListen string
	tokenFile     string
	maxWaiters    int
	maxConns      int
}

func (f *apiFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "serve /metrics on this address of its own instead of the API's ([IP]:PORT or unix:///path), so a NetworkPolicy can close the control port and keep scraping (default: /metrics on the API's address)")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding a shared secret: /shutdown and /resume then require the header \"Authorization: Bearer <secret>\" (401 without it); surrounding whitespace is ignored")
	fs.IntVar(&f.maxWaiters, "max-waiters", server.DefaultMaxWaiters, "most /shutdown callers waiting at once; the next ones get 429 at once (each costs about 21 kB)")
	fs.IntVar(&f.maxConns, "max-connections", server.DefaultMaxConnections, "most connections the API (and the metrics listener) keeps open at once; more clients wait in the kernel's accept queue (each open connection costs about 21 kB); must be larger than --max-waiters")
}

// config validates the API's flags; listen is --listen, already parsed.
func (f *apiFlags) config(listen manager.ListenAddress) (manager.APIConfig, error) {
	c := manager.APIConfig{Listen: listen}
	if f.metricsListen != "" {
		la, err := manager.ParseListen(f.metricsListen)
		if err != nil {
			return c, Usagef("--metrics-listen: %v", err)
		}
		c.Metrics = &la
	}
	if f.maxWaiters <= 0 {
		return c, Usagef("--max-waiters must be positive")
	}
	if f.maxWaiters > 1<<20 {
		return c, Usagef("--max-waiters must be at most 1048576")
	}
	c.MaxWaiters = f.maxWaiters
	if f.maxConns <= f.maxWaiters {
		return c, Usagef("--max-connections (%d) must be larger than --max-waiters (%d): probes and /status need connections too", f.maxConns, f.maxWaiters)
	}
	c.MaxConns = f.maxConns
	if f.tokenFile != "" {
		tf, err := manager.ReadToken(f.tokenFile)
		if err != nil {
			return c, Usagef("--token-file: %v", err)
		}
		c.Token = tf
	}
	return c, nil
}

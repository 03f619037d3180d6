// Package testbed runs real Envoy proxies against a local upstream and drives
// them with real clients over real sockets. It backs the integration tests,
// `make demo` and the benchmarks of the shutdown manager.
//
// Everything listens on, and connects to, 127.0.0.1 (or a unix socket) only.
// Every process the package starts runs in its own process group and is
// killed by [Envoy.Stop] or when the context given to [Start] is done; every
// network operation and loop is bounded by a context or a timeout.
//
// The core API does not depend on package testing; only tb.go adds a thin
// layer of helpers for tests that take a [testing.TB].
//
// A typical use:
//
//	bins, err := testbed.FindBinaries()
//	up, err := testbed.StartUpstream()
//	defer up.Close()
//	e, err := testbed.Start(ctx, bins[0], up, testbed.Options{Dir: dir})
//	defer e.Stop()
//	load := testbed.KeepAlive(ctx, e.HTTPAddr, 8, 10*time.Millisecond)
//	// ... drain Envoy ...
//	res := load.Wait()
package testbed

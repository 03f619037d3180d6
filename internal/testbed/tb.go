package testbed

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// This file is the testing.TB convenience layer; the rest of the package does
// not depend on package testing.

// BinariesTB returns FindBinaries. If there is none it fails tb when the
// environment variable CI is "true" and skips it otherwise, with the reason.
func BinariesTB(tb testing.TB) []Binary {
	tb.Helper()
	bins, err := FindBinaries()
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("CI=true and no Envoy binary (run `make envoy` or set %s): %v", EnvVarBinary, err)
		}
		tb.Skipf("no Envoy binary (run `make envoy` or set %s): %v", EnvVarBinary, err)
	}
	return bins
}

// StartUpstreamTB starts an Upstream that is closed when tb's test ends.
func StartUpstreamTB(tb testing.TB) *Upstream {
	tb.Helper()
	up, err := StartUpstream()
	if err != nil {
		tb.Fatalf("StartUpstream: %v", err)
	}
	tb.Cleanup(up.Close)
	return up
}

// StartTB starts Envoy and registers with tb a cleanup that stops it (Stop) and, when tb has failed, logs the
// end of Envoy's log and where it is. Envoy runs until that cleanup, not only until tb.Context() ends (which is
// before any cleanup): a cleanup registered later still finds Envoy as the test left it, to use it or to check
// what the test left running. An empty opts.Dir is replaced by a new temporary directory (a short one when
// tb.TempDir's path is too long for the admin socket).
func StartTB(tb testing.TB, bin Binary, up *Upstream, opts Options) *Envoy {
	tb.Helper()
	if opts.Dir == "" {
		opts.Dir = tb.TempDir()
		if opts.AdminUnix && len(filepath.Join(opts.Dir, "admin.sock")) > maxUnixPath {
			dir, err := os.MkdirTemp("", "envoy")
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { os.RemoveAll(dir) })
			opts.Dir = dir
		}
	}
	e, err := Start(context.Background(), bin, up, opts)
	if err != nil {
		tb.Fatalf("Start: %v", err)
	}
	e.proc.StopAtCleanup(tb, 0)
	return e
}

package testproc

import (
	"testing"
	"time"
)

// This file is the testing.TB layer; the rest of the package does not depend on package testing.

// logEndLines is how much of a log a failed test quotes; the whole log stays on disk.
const logEndLines = 40

// StopAtCleanup registers with tb a cleanup that stops p (Stop with grace) and, when tb has failed, logs where
// p's log is and its end.
func (p *Proc) StopAtCleanup(tb testing.TB, grace time.Duration) {
	tb.Cleanup(func() {
		p.Stop(grace)
		if tb.Failed() {
			tb.Logf("%s: %s", p.Name, p.LogEnd(logEndLines))
		}
	})
}

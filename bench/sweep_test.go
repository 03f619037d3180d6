package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// TestLimitOf: the physical limit is the later of the last new connection and the end of the last request;
// a failed request counts until it would have ended, and the bench's own cancels do not count.
func TestLimitOf(t *testing.T) {
	o := time.Unix(1000, 0)
	at := func(s float64) time.Time { return o.Add(time.Duration(s * float64(time.Second))) }
	ok := func(start, end float64, length time.Duration) sweepReq {
		return sweepReq{start: at(start), end: at(end), length: length}
	}
	failed := func(start, end float64, length time.Duration) sweepReq {
		return sweepReq{start: at(start), end: at(end), length: length, class: testbed.ClassRefused}
	}
	tests := []struct {
		name                   string
		reqs                   []sweepReq
		lastNew, lastEnd, want float64
	}{
		{"none", nil, 0, 0, 0},
		{"warm-up only", []sweepReq{ok(-2, -1.9, 0)}, 0, 0, 0},
		{"arrivals set it", []sweepReq{ok(0, 6.01, 6*time.Second), ok(10, 10.002, 0)}, 10, 10.002, 10.002},
		{"a long request sets it", []sweepReq{ok(0, 6.01, 6*time.Second), ok(2, 2.001, 0)}, 2, 6.01, 6.01},
		{"a request cut short ends when it would have", []sweepReq{failed(0, 1, 6*time.Second), ok(0.5, 0.501, 0)}, 0.5, 6, 6},
		{"a refused arrival is still a new connection", []sweepReq{ok(0, 1, time.Second), failed(9.9, 9.9, 0)}, 9.9, 9.9, 9.9},
		{"canceled by the bench: left out", []sweepReq{ok(0, 1, time.Second),
			{start: at(20), end: at(21), length: time.Second, class: "canceled"}}, 0, 1, 1},
	}
	for _, tc := range tests {
		lastNew, lastEnd, got := limitOf(o, tc.reqs)
		if !near(lastNew, tc.lastNew) || !near(lastEnd, tc.lastEnd) || !near(got, tc.want) {
			t.Errorf("%s: got last new %v, last end %v, limit %v; want %v, %v, %v", tc.name, lastNew, lastEnd, got,
				tc.lastNew, tc.lastEnd, tc.want)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

// TestSweepClass: failures are named as testbed's generators name them; the bench's own cancel is not one.
func TestSweepClass(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	tests := []struct {
		ctx  context.Context
		err  error
		want string
	}{
		{bg, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, testbed.ClassRefused},
		{bg, &net.OpError{Op: "read", Err: syscall.ECONNRESET}, testbed.ClassReset},
		{bg, fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), testbed.ClassEOF},
		{bg, context.DeadlineExceeded, testbed.ClassTimeout},
		{bg, errors.New("something else"), testbed.ClassOther},
		{canceled, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, "canceled"},
	}
	for _, tc := range tests {
		if got := sweepClass(tc.ctx, tc.err); got != tc.want {
			t.Errorf("sweepClass(%v): got %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestSweepRequestOnRealEnvoy: one request per connection through a real Envoy, then, Envoy gone, a
// refused one (no retry hides it).
func TestSweepRequestOnRealEnvoy(t *testing.T) {
	bins := testbed.BinariesTB(t)
	e := testbed.StartTB(t, bins[0], testbed.StartUpstreamTB(t), testbed.Options{})
	ctx := t.Context()
	for _, d := range []time.Duration{0, 200 * time.Millisecond} {
		r := sweepRequest(ctx, e.HTTPAddr, time.Now(), d)
		if r.class != "" || r.end.Sub(r.start) < d {
			t.Errorf("length %s: class %q after %s, want OK after at least %s (Envoy log %s)", d, r.class, r.end.Sub(r.start), d, e.LogPath)
		}
	}
	e.Stop()
	if r := sweepRequest(ctx, e.HTTPAddr, time.Now(), 0); r.class != testbed.ClassRefused {
		t.Errorf("after Envoy exited: class %q, want %q", r.class, testbed.ClassRefused)
	}
}

// TestSweepSchedule: Poisson arrivals come in order inside the window at about the rate, the same for a seed;
// a bursty source's bursts begin with termination.
func TestSweepSchedule(t *testing.T) {
	from, to := -3*time.Second, 20*time.Second
	src := sweepSource{name: "50/s", perS: 50}
	got := src.schedule(sweepSeed("50/s", to, 1), from, to)
	// 1150 expected; a Poisson count's standard deviation is its square root, about 34.
	if n := len(got); n < 1000 || n > 1300 {
		t.Errorf("50/s for 23 s: %d arrivals, want about 1150", n)
	}
	for i, at := range got {
		if at < from || at >= to || (i > 0 && at < got[i-1]) {
			t.Fatalf("arrival %d at %s: out of order or outside [%s, %s)", i, at, from, to)
		}
	}
	if again := src.schedule(sweepSeed("50/s", to, 1), from, to); !slices.Equal(got, again) {
		t.Error("the same seed drew another schedule")
	}
	if other := src.schedule(sweepSeed("50/s", to, 2), from, to); slices.Equal(got, other) {
		t.Error("another run drew the same schedule")
	}
	bursty := sweepSource{name: "bursty", perS: 20.0 / 3, burst: 3, burstInt: 3 * time.Second, burstPace: 20 * time.Millisecond}
	ms := func(ds ...int) []time.Duration {
		var out []time.Duration
		for _, d := range ds {
			out = append(out, time.Duration(d)*time.Millisecond)
		}
		return out
	}
	if got, want := bursty.schedule(0, -3*time.Second, 5*time.Second), ms(-3000, -2980, -2960, 0, 20, 40, 3000, 3020, 3040); !slices.Equal(got, want) {
		t.Errorf("bursty: got %v, want %v", got, want)
	}
	if got, want := bursty.schedule(0, 0, 3030*time.Millisecond), ms(0, 20, 40, 3000, 3020); !slices.Equal(got, want) {
		t.Errorf("bursty, cut at P: got %v, want %v", got, want)
	}
}

// TestLongestGap: the longest silence between new connections from the start, the warm-up and the bench's
// cancels left out.
func TestLongestGap(t *testing.T) {
	o := time.Unix(1000, 0)
	at := func(s float64) sweepReq { return sweepReq{start: o.Add(time.Duration(s * float64(time.Second)))} }
	canceled := at(9)
	canceled.class = "canceled"
	tests := []struct {
		reqs []sweepReq
		want float64
	}{
		{nil, 0},
		{[]sweepReq{at(-5), at(0.5)}, 0.5},
		{[]sweepReq{at(3), at(0.1), at(1), canceled}, 2},
	}
	for _, tc := range tests {
		if got := longestGap(o, tc.reqs); !near(got, tc.want) {
			t.Errorf("longestGap(%v): got %v, want %v", tc.reqs, got, tc.want)
		}
	}
}

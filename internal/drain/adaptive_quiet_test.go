package drain

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// adaptiveConfig is a drain with the command line's defaults: no delay, the 5 s floor, the adaptive quiet
// period, a 60 s deadline, nothing in flight to wait for.
func adaptiveConfig() Config {
	c := testConfig()
	c.Delay, c.MinDuration, c.AdaptiveQuiet, c.Timeout = 0, DefaultMinDuration, true, DefaultTimeout
	return c
}

// schedule is the times, from the trigger, at which a source sends a new connection and a request.
type schedule []time.Duration

// every is a source sending every gap from first until before stop.
func every(first, gap, stop time.Duration) schedule {
	var s schedule
	for at := first; at < stop; at += gap {
		s = append(s, at)
	}
	return s
}

func (s schedule) then(more schedule) schedule { return append(append(schedule(nil), s...), more...) }

func (s schedule) last() time.Duration { return s[len(s)-1] }

// send plays s on fake, from now (the trigger), until the test ends. Offsets that are not multiples of
// 5 ms never fall on a poll (polls begin at multiples of 25 ms past the floor, of 250 ms during it), so
// which of the two comes first is not up to the scheduler.
func send(t *testing.T, fake *fakeAdmin, s schedule) {
	ended := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(ended); <-done })
	start := time.Now()
	go func() {
		defer close(done)
		for _, at := range s {
			select {
			case <-time.After(time.Until(start.Add(at))):
				fake.set(newConnAndRequest)
			case <-ended:
				return
			}
		}
	}()
}

// drainWith runs one drain of cfg against a source playing s and returns its result, its duration and the
// quiet phase's end.
func drainWith(t *testing.T, cfg Config, s schedule) (Result, time.Duration, PhaseEnd) {
	t.Helper()
	fake := newFake(0)
	e := startEngine(t, cfg, fake, nil)
	start := time.Now()
	send(t, fake, s)
	d, err := e.Trigger(context.Background(), testCaller)
	if err != nil {
		t.Fatal(err)
	}
	r := released(t, d)
	took := time.Since(start)
	var quiet PhaseEnd
	for _, p := range r.Phases {
		if p.Phase == PhaseQuiet {
			quiet = p
		}
	}
	t.Logf("released at %s (%s): %s; quiet phase: %s", took, r.Outcome, r.Reason, quiet.Reason)
	return r, took, quiet
}

// heldThrough checks that the drain was not released while s still sent: after its last arrival.
func heldThrough(t *testing.T, took time.Duration, s schedule) {
	t.Helper()
	if took <= s.last() {
		t.Errorf("released at %s, before the source's last arrival at %s: released between two arrivals", took, s.last())
	}
}

// With no traffic, the adaptive rule needs its lower bound: the floor decides, as it did with a fixed 3 s.
func TestAdaptiveQuietNoTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, took, quiet := drainWith(t, adaptiveConfig(), nil)
		if r.Outcome != OutcomeDrained || took != DefaultMinDuration {
			t.Errorf("released at %s (%s), want drained at the floor", took, r.Outcome)
		}
		if want := "no new connection or request for 5s after health checks failed (adaptive quiet period: 500ms needed, the lower bound, no new traffic seen)"; quiet.Reason != want {
			t.Errorf("quiet phase ended: %q, want %q", quiet.Reason, want)
		}
	})
}

// A dense source (50/s) that stops past the floor is released about the lower bound after its last
// arrival, sooner than a fixed 3 s; one that stops inside the floor (kube-proxy's, about 1 s after
// termination begins) at the floor.
func TestAdaptiveQuietDense(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop time.Duration
	}{{"stops-at-8s", 8 * time.Second}, {"stops-at-1s", time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := every(3*time.Millisecond, 20*time.Millisecond, tc.stop)
				r, took, quiet := drainWith(t, adaptiveConfig(), s)
				if r.Outcome != OutcomeDrained {
					t.Fatalf("outcome %s, want drained", r.Outcome)
				}
				heldThrough(t, took, s)
				want := max(DefaultMinDuration, s.last()+AdaptiveQuietMin)
				// Released at the first poll past the silence needed: at most one quiet-phase poll later.
				if took < want || took > want+2*minPollGap {
					t.Errorf("released at %s, want %s (the later of the floor and the last arrival plus the lower bound), plus at most the poll that sees it", took, want)
				}
				if tc.stop > DefaultMinDuration {
					if !strings.HasPrefix(quiet.Reason, "50 arrivals/s until 8s after health checks failed, then 500ms of silence") || !strings.Contains(quiet.Reason, "500ms needed, the lower bound") {
						t.Errorf("quiet phase ended: %q, want the rate, the silence and the lower bound", quiet.Reason)
					}
				}
			})
		})
	}
}

// Sparse sources are never released between two arrivals: 0.5/s and 0.2/s (the sparsest the rule holds
// between two arrivals without fail, a gap of half the upper bound), each sending past the floor.
func TestAdaptiveQuietSparse(t *testing.T) {
	for _, tc := range []struct {
		name string
		gap  time.Duration
	}{{"0.5/s", 2 * time.Second}, {"0.2/s", 5 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := every(1003*time.Millisecond, tc.gap, 30*time.Second)
				r, took, quiet := drainWith(t, adaptiveConfig(), s)
				if r.Outcome != OutcomeDrained {
					t.Fatalf("outcome %s, want drained", r.Outcome)
				}
				heldThrough(t, took, s)
				// Once stopped, it waits at least twice its gap and at most the upper bound (plus a poll).
				if silence := took - s.last(); silence < 2*tc.gap || silence > AdaptiveQuietMax+minPollGap {
					t.Errorf("released %s after the last arrival, want from twice the gap (%s) to the upper bound (%s)", silence, 2*tc.gap, AdaptiveQuietMax)
				}
				if rate := strings.TrimSuffix(tc.name, "/s"); !strings.HasPrefix(quiet.Reason, rate+" arrivals/s until ") {
					t.Errorf("quiet phase ended: %q, want it to start with the rate seen, %s arrivals/s", quiet.Reason, rate)
				}
			})
		})
	}
}

// A bursty source (10 arrivals 20 ms apart every 4 s) is held through its silences between bursts: the
// longest silence seen to end sets the silence needed.
func TestAdaptiveQuietBursty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s schedule
		for burst := 3 * time.Millisecond; burst < 20*time.Second; burst += 4 * time.Second {
			s = s.then(every(burst, 20*time.Millisecond, burst+200*time.Millisecond))
		}
		r, took, quiet := drainWith(t, adaptiveConfig(), s)
		if r.Outcome != OutcomeDrained {
			t.Fatalf("outcome %s, want drained", r.Outcome)
		}
		heldThrough(t, took, s)
		// The polls see the silence between bursts, 3.82 s, as 4 s (the floor's polls are 250 ms apart).
		if silence := took - s.last(); silence < 2*3820*time.Millisecond {
			t.Errorf("released %s after the last arrival, want at least twice the silence between bursts (3.82s)", silence)
		}
		if !strings.Contains(quiet.Reason, "8s needed, 2 × the longest silence that ended, 4s") {
			t.Errorf("quiet phase ended: %q, want the longest silence to decide", quiet.Reason)
		}
	})
}

// A dense source that pauses shorter than the lower bound is not released in its pause; once it resumes,
// its pause raises the silence needed after it stops again (twice the longest silence seen to end).
func TestAdaptiveQuietStopThenResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := every(3*time.Millisecond, 20*time.Millisecond, 6*time.Second).then(every(6403*time.Millisecond, 20*time.Millisecond, 10*time.Second))
		r, took, quiet := drainWith(t, adaptiveConfig(), s)
		if r.Outcome != OutcomeDrained {
			t.Fatalf("outcome %s, want drained", r.Outcome)
		}
		heldThrough(t, took, s)
		// The pause, 5.983 s to 6.403 s (0.42 s), is seen by the polls as 0.425 s: 0.85 s needed.
		if silence := took - s.last(); silence < 840*time.Millisecond || silence > 900*time.Millisecond {
			t.Errorf("released %s after the last arrival, want twice the pause (0.42s) and a poll", silence)
		}
		if !strings.Contains(quiet.Reason, "2 × the longest silence that ended, 425ms") {
			t.Errorf("quiet phase ended: %q, want the pause to decide", quiet.Reason)
		}
	})
}

// A source sending 3/s shows a silence of 1.5 s now and then (arrivals at random: e^-4.5 of its gaps, about
// once a minute); one first seen past the floor is not taken for the source having stopped: the rate seen
// needs about 2.5 s. Once it has ended, the silence counts as the longest seen: twice it after the last.
func TestAdaptiveQuietModerateGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := every(3*time.Millisecond, 333*time.Millisecond, 8*time.Second).then(every(9503*time.Millisecond, 333*time.Millisecond, 12*time.Second))
		r, took, quiet := drainWith(t, adaptiveConfig(), s)
		if r.Outcome != OutcomeDrained {
			t.Fatalf("outcome %s, want drained", r.Outcome)
		}
		heldThrough(t, took, s)
		if !strings.Contains(quiet.Reason, "2 × the longest silence that ended, 1.5") {
			t.Errorf("quiet phase ended: %q, want the silence of 1.5s to decide once it has ended", quiet.Reason)
		}
	})
}

// A deadline shorter than the silence needed decides, and says so: a sparse source that stops at 10 s
// needs 10 s of silence, past the 15 s deadline; one that never stops holds the drain to it.
func TestAdaptiveQuietDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop time.Duration
	}{{"stops-at-10s", 10 * time.Second}, {"never-stops", time.Minute}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := adaptiveConfig()
				cfg.Timeout = 15 * time.Second
				s := every(1003*time.Millisecond, 5*time.Second, tc.stop)
				r, took, _ := drainWith(t, cfg, s)
				if r.Outcome != OutcomeTimeout || took != cfg.Timeout {
					t.Fatalf("released at %s (%s), want a timeout at the 15s deadline", took, r.Outcome)
				}
				for _, want := range []string{"deadline 15s reached before the silence since the last new traffic was conclusive (last new request ",
					" arrivals/s until ", "adaptive quiet period: 10s of silence needed, the upper bound"} {
					if !strings.Contains(r.Reason, want) {
						t.Errorf("reason %q, want it to say %q", r.Reason, want)
					}
				}
			})
		})
	}
}

// /status shows the adaptive rule's view: the silence needed, the rate and the longest silence seen to end.
func TestAdaptiveQuietStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		e := startEngine(t, adaptiveConfig(), fake, nil)
		send(t, fake, every(1003*time.Millisecond, 2*time.Second, 30*time.Second))
		d, err := e.Trigger(context.Background(), testCaller)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(12 * time.Second)
		synctest.Wait()
		q := e.Status().Quiet
		if q == nil || !q.Adaptive || q.Rate == nil || *q.Rate < 0.4 || *q.Rate > 0.6 || q.LongestSilence == nil ||
			time.Duration(*q.LongestSilence) < 2*time.Second || time.Duration(q.Period) < 4*time.Second || time.Duration(q.Period) > AdaptiveQuietMax {
			t.Errorf("status quiet = %+v, want adaptive, about 0.5 arrivals/s, the longest silence about 2s and 4-10s needed", q)
		}
		<-d.Done()
	})
}

// The rule's figure for the traffic seen, term by term.
func TestAdaptiveQuietNeeded(t *testing.T) {
	failed := time.Unix(0, 0)
	for _, tc := range []struct {
		name     string
		arrivals int64
		last     time.Duration // after failed
		longest  time.Duration
		want     time.Duration
		why      string
	}{
		{name: "none", want: AdaptiveQuietMin, why: "the lower bound, no new traffic seen"},
		{name: "three", arrivals: 3, last: 4 * time.Second, want: AdaptiveQuietMax, why: "the upper bound: 3 arrivals, too few"},
		{name: "dense", arrivals: 400, last: 8 * time.Second, longest: 100 * time.Millisecond, want: AdaptiveQuietMin, why: "the lower bound"},
		// (11 - 3) / 8 s = 1/s: ln(600)/1 = 6.397 s
		{name: "by-rate", arrivals: 11, last: 8 * time.Second, longest: time.Second, want: 6396929655 * time.Nanosecond, why: "in 30 s with a chance of 5% at most"},
		// (27 - 3) / 8 s = 3/s: ln(1800)/3 = 2.498 s
		{name: "3/s", arrivals: 27, last: 8 * time.Second, longest: 400 * time.Millisecond, want: 2498513981 * time.Nanosecond, why: "in 30 s with a chance of 5% at most"},
		{name: "by-gap", arrivals: 100, last: 8 * time.Second, longest: 2 * time.Second, want: 4 * time.Second, why: "2 × the longest silence that ended, 2s"},
		{name: "capped", arrivals: 100, last: 30 * time.Second, longest: 6 * time.Second, want: AdaptiveQuietMax, why: "the upper bound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQuietWatch(0, true, failed)
			q.arrivals, q.last, q.longest = tc.arrivals, failed.Add(tc.last), tc.longest
			got, why := q.needed()
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("needed = %s (%s), want %s (%s)", got, why, tc.want, tc.why)
			}
		})
	}
}

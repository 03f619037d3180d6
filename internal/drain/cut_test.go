package drain

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCutWatch(t *testing.T) {
	tests := []struct {
		name  string
		polls []map[string]CutCounters
		want  Cut
	}{
		{"no poll", nil, Cut{}},
		{"the first poll is the baseline", []map[string]CutCounters{{"http.a": {5, 1, 3}}}, Cut{}},
		{"increase after the baseline", []map[string]CutCounters{{"http.a": {5, 0, 3}}, {"http.a": {7, 0, 4}}, {"http.a": {8, 0, 4}}}, Cut{3, 1}},
		{"resets envoy sent are not the client's", []map[string]CutCounters{{"http.a": {5, 2, 0}}, {"http.a": {9, 4, 0}}}, Cut{2, 0}},
		{"a poll between envoy's two counts holds the total",
			[]map[string]CutCounters{{"http.a": {0, 0, 0}}, {"http.a": {1, 0, 0}}, {"http.a": {1, 1, 0}}, {"http.a": {2, 1, 0}}, {"http.a": {3, 2, 0}}}, Cut{1, 0}},
		{"managers add up", []map[string]CutCounters{{"http.a": {1, 0, 1}, "http.b": {0, 0, 0}}, {"http.a": {2, 0, 2}, "http.b": {4, 0, 0}}}, Cut{5, 1}},
		{"a manager new to the watch starts from its values",
			[]map[string]CutCounters{{"http.a": {}}, {"http.a": {}, "http.b": {9, 0, 9}}, {"http.a": {}, "http.b": {10, 0, 9}}}, Cut{1, 0}},
		{"a counter that fell starts again from its value",
			[]map[string]CutCounters{{"http.a": {5, 0, 5}}, {"http.a": {1, 0, 1}}, {"http.a": {3, 0, 1}}}, Cut{2, 0}},
		{"a manager gone and back starts again", []map[string]CutCounters{{"http.a": {1, 0, 1}}, nil, {"http.a": {4, 0, 4}}}, Cut{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w cutWatch
			var sum Cut
			for _, p := range tt.polls {
				a := w.observe(p)
				sum.Requests, sum.Connections = sum.Requests+a.Requests, sum.Connections+a.Connections
			}
			if w.total != tt.want || sum != tt.want {
				t.Errorf("total = %+v, increases add up to %+v, want %+v", w.total, sum, tt.want)
			}
		})
	}
}

func TestCutText(t *testing.T) {
	tests := []struct {
		cut  Cut
		want string
	}{
		{Cut{}, ""},
		{Cut{Requests: 1}, "the client side cut 1 request in flight during the drain"},
		{Cut{Requests: 3, Connections: 3}, "the client side cut 3 requests in flight (closing 3 connections under them) during the drain"},
		{Cut{Requests: 2, Connections: 1}, "the client side cut 2 requests in flight (closing 1 connection under them) during the drain"},
	}
	for _, tt := range tests {
		if got := tt.cut.Text(); got != tt.want {
			t.Errorf("%+v.Text() = %q, want %q", tt.cut, got, tt.want)
		}
	}
}

// Requests cut after health checks failed are reported in the result, its reason, /status and the metric;
// those cut before (in the baseline) and a readiness manager's are not.
func TestDrainReportsCutByClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(2)
		fake.readiness = true
		fake.rxReset, fake.cxCut = 10, 4 // before the drain: not reported
		reg := prometheus.NewRegistry()
		cfg := testConfig()
		cfg.Delay, cfg.MinDuration = time.Second, 2*time.Second
		e := startEngine(t, cfg, fake, reg)
		d, err := e.Trigger(context.Background(), testCaller)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // past the delay: health checks fail, the first poll is the baseline
		if st := e.Status(); st.CutByClient == nil || *st.CutByClient != (Cut{}) {
			t.Fatalf("cut_by_client after the baseline = %+v, want zero", st.CutByClient)
		}
		fake.set(func(f *fakeAdmin) { f.rxReset += 2; f.cxCut++; f.inflight -= 2; f.probeResets += 5 }) // one H1 connection, one H2 stream
		synctest.Wait()
		r := released(t, d)
		want := Cut{Requests: 2, Connections: 1}
		if r.Outcome != OutcomeDrained || r.Cut != want {
			t.Fatalf("result = %+v, want drained with cut %+v", r, want)
		}
		if !strings.HasSuffix(r.Reason, "0 in flight after 3s; the client side cut 2 requests in flight (closing 1 connection under them) during the drain") {
			t.Errorf("reason = %q", r.Reason)
		}
		if st := e.Status(); st.CutByClient == nil || *st.CutByClient != want {
			t.Errorf("status cut_by_client = %+v, want %+v", st.CutByClient, want)
		}
		for kind, want := range map[string]float64{"requests": 2, "connections": 1} {
			if got := testutil.ToFloat64(e.metrics.cut.WithLabelValues(kind)); got != want {
				t.Errorf("cut_by_client_total{kind=%s} = %v, want %v", kind, got, want)
			}
		}
	})
}

// Without a cut the reason says nothing of one and the metric stays 0.
func TestDrainNoCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(0)
		fake.rxReset, fake.cxCut = 10, 4
		e := startEngine(t, testConfig(), fake, prometheus.NewRegistry())
		d, err := e.Trigger(context.Background(), testCaller)
		if err != nil {
			t.Fatal(err)
		}
		r := released(t, d)
		if r.Cut != (Cut{}) || strings.Contains(r.Reason, "cut") {
			t.Errorf("result = %+v, want no cut", r)
		}
		if got := testutil.ToFloat64(e.metrics.cut.WithLabelValues("requests")); got != 0 {
			t.Errorf("cut_by_client_total{kind=requests} = %v, want 0", got)
		}
	})
}

package envoyadmin

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"
)

// The fixtures were captured from real Envoy releases (GET /stats?filter=…&format=json&type=Gauges) with
// an HTTP listener (3 connections), an HTTP listener with stat_prefix inbound_http, a TCP proxy listener
// and one open admin request.
func TestParseStatsFixtures(t *testing.T) {
	for _, v := range []string{"1.36.2", "1.40.0"} {
		t.Run(v, func(t *testing.T) {
			f, err := os.Open("testdata/stats-" + v + ".json")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := ParseStats(f)
			if err != nil {
				t.Fatal(err)
			}
			port := map[string]string{"1.36.2": "102", "1.40.0": "103"}[v]
			want := Snapshot{
				Listeners: map[string]int64{
					"listener.127.0.0.1_" + port + "00": 2,
					"listener.127.0.0.1_" + port + "01": 1,
					"listener.admin":                    1,
					"listener.inbound_http":             1,
				},
				HTTP: map[string]HTTPGauges{
					"http.admin":           {Connections: 1, Requests: 1},
					"http.ingress_http":    {Connections: 2, Requests: 1},
					"http.ingress_http_in": {Connections: 1, Requests: 0},
				},
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ParseStats =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestParseStats(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Snapshot
		wantErr bool
	}{
		{"empty", `{"stats":[]}`, Snapshot{Listeners: map[string]int64{}, HTTP: map[string]HTTPGauges{}}, false},
		{"histograms element and other stats ignored",
			`{"stats":[{"name":"cluster.a.upstream_cx_active","value":3},{"name":"listener.x.downstream_cx_active","value":2},{"histograms":{"supported_quantiles":[]}}]}`,
			Snapshot{Listeners: map[string]int64{"listener.x": 2}, HTTP: map[string]HTTPGauges{}}, false},
		{"text readouts ignored", `{"stats":[{"name":"server.version","value":"1.40.0"}]}`,
			Snapshot{Listeners: map[string]int64{}, HTTP: map[string]HTTPGauges{}}, false},
		{"stat prefix with dots", `{"stats":[{"name":"http.a.b.downstream_rq_active","value":4}]}`,
			Snapshot{Listeners: map[string]int64{}, HTTP: map[string]HTTPGauges{"http.a.b": {Requests: 4}}}, false},
		{"per-worker copies ignored", `{"stats":[{"name":"listener.x.worker_12.downstream_cx_active","value":4},{"name":"listener.admin.main_thread.downstream_cx_active","value":1}]}`,
			Snapshot{Listeners: map[string]int64{}, HTTP: map[string]HTTPGauges{}}, false},
		{"the health_check filter's counter", `{"stats":[{"name":"http.app.downstream_rq_total","value":7},{"name":"http.app.health_check.request_total","value":5},{"name":"http.app.health_check.ok","value":5}]}`,
			Snapshot{Listeners: map[string]int64{}, HTTP: map[string]HTTPGauges{"http.app": {RequestsTotal: 7, HealthChecksTotal: 5}}}, false},
		{"counters of work the client cut", `{"stats":[{"name":"http.app.downstream_rq_rx_reset","value":6},{"name":"http.app.downstream_cx_destroy_remote_active_rq","value":4},{"name":"http.app.downstream_rq_tx_reset","value":2},{"name":"http.app.downstream_cx_destroy_active_rq","value":9}]}`,
			Snapshot{Listeners: map[string]int64{}, HTTP: map[string]HTTPGauges{"http.app": {RequestsRxReset: 6, RequestsTxReset: 2, ConnectionsCutActive: 4}}}, false},
		{"not JSON", `<html>`, Snapshot{}, true},
		{"no stats array", `{}`, Snapshot{}, true},
		{"negative gauge", `{"stats":[{"name":"listener.x.downstream_cx_active","value":-1}]}`, Snapshot{}, true},
		{"string gauge", `{"stats":[{"name":"listener.x.downstream_cx_active","value":"1"}]}`, Snapshot{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStats(strings.NewReader(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseStats error = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseStats = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseServerState(t *testing.T) {
	for _, v := range []string{"1.36.2", "1.40.0"} {
		f, err := os.Open("testdata/server_info-" + v + ".json")
		if err != nil {
			t.Fatal(err)
		}
		st, err := ParseServerState(f)
		f.Close()
		if err != nil || st != StateLive {
			t.Errorf("%s: ParseServerState = %q, %v; want LIVE", v, st, err)
		}
	}
	for _, in := range []string{`{}`, `{"state":""}`, `{"state":3}`, `nope`} {
		if _, err := ParseServerState(strings.NewReader(in)); err == nil {
			t.Errorf("ParseServerState(%s): no error", in)
		}
	}
}

func FuzzParseStats(f *testing.F) {
	for _, v := range []string{"1.36.2", "1.40.0"} {
		b, err := os.ReadFile("testdata/stats-" + v + ".json")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	if b, err := os.ReadFile("testdata/stats-checked-1.40.0.json"); err == nil {
		f.Add(string(b))
	} else {
		f.Fatal(err)
	}
	f.Add(`{"stats":[{"name":"http..downstream_rq_active","value":1}]}`)
	f.Add(`{"stats":[{"name":"http.a.health_check.request_total","value":3},{"name":"http.health_check.request_total","value":1}]}`)
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseStats(strings.NewReader(in))
		if err != nil {
			return
		}
		for name, v := range s.Listeners {
			if !strings.HasPrefix(name, "listener.") || v < 0 || perWorker.MatchString(name) {
				t.Fatalf("listener %q = %d", name, v)
			}
		}
		for name, g := range s.HTTP {
			if !strings.HasPrefix(name, "http.") || g.Connections < 0 || g.Requests < 0 || g.RequestsTotal < 0 || g.HealthChecksTotal < 0 {
				t.Fatalf("http %q = %+v", name, g)
			}
		}
	})
}

func FuzzParseServerState(f *testing.F) {
	f.Add(`{"state":"LIVE"}`)
	f.Add(`{"state":"DRAINING","version":"x"}`)
	f.Fuzz(func(t *testing.T, in string) {
		st, err := ParseServerState(strings.NewReader(in))
		if err == nil && st == "" {
			t.Fatal("empty state without error")
		}
	})
}

// The command_line_options of /server_info, as Envoy 1.36.2 and 1.40.0 answer them (captured: both give
// config_path and config_yaml as given on the command line).
func TestParseServerBootstrap(t *testing.T) {
	tests := []struct {
		body, path, inline string
		err                bool
	}{
		{`{"state":"LIVE","command_line_options":{"config_path":"/tmp/ev-min.yaml","config_yaml":"","base_id":"0","restart_epoch":0}}`, "/tmp/ev-min.yaml", "", false},
		{`{"command_line_options":{"config_path":"","config_yaml":"admin: {}"}}`, "", "admin: {}", false},
		{`{"state":"LIVE"}`, "", "", true},
		{`not json`, "", "", true},
	}
	for _, tt := range tests {
		path, inline, err := ParseServerBootstrap(strings.NewReader(tt.body))
		if path != tt.path || inline != tt.inline || (err != nil) != tt.err {
			t.Errorf("ParseServerBootstrap(%s) = %q, %q, %v; want %q, %q, error %v", tt.body, path, inline, err, tt.path, tt.inline, tt.err)
		}
	}
}

func FuzzParseServerBootstrap(f *testing.F) {
	f.Add([]byte(`{"command_line_options":{"config_path":"/a","config_yaml":"b"}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		path, inline, err := ParseServerBootstrap(bytes.NewReader(b))
		if err != nil && (path != "" || inline != "") {
			t.Fatalf("an error with values %q, %q", path, inline)
		}
	})
}

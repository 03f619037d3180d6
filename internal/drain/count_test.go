package drain

import (
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

func TestCount(t *testing.T) {
	// An Envoy with an HTTP listener (3 connections: 1 busy, 2 idle keep-alive), a TCP proxy listener
	// (2 connections), a metrics listener, an internal listener, and the admin's own.
	snap := envoyadmin.Snapshot{
		Listeners: map[string]int64{
			"listener.0.0.0.0_8080":        3,
			"listener.0.0.0.0_9000":        2,
			"listener.0.0.0.0_19001":       1,
			"listener.admin":               1,
			"listener.envoy_internal_loop": 4,
		},
		HTTP: map[string]envoyadmin.HTTPGauges{
			"http.ingress_http": {Connections: 3, Requests: 1},
			"http.metrics":      {Connections: 1, Requests: 1},
			"http.admin":        {Connections: 1, Requests: 1},
		},
	}
	re := regexp.MustCompile
	tests := []struct {
		name string
		mode Mode
		sel  Selector
		want int64
	}{
		{"inflight counts requests and non-HTTP connections, not idle keep-alive", ModeInflight, Selector{}, 1 + 1 + 2},
		{"connections counts every listener connection", ModeConnections, Selector{}, 3 + 2 + 1},
		{"requests counts HTTP requests only", ModeRequests, Selector{}, 2},
		{"exclude the metrics listener and its manager", ModeInflight, Selector{Exclude: []*regexp.Regexp{re(`19001`), re(`^http\.metrics$`)}}, 1 + 2},
		{"include only the TCP listener", ModeConnections, Selector{Include: []*regexp.Regexp{re(`_9000$`)}}, 2},
		{"include only HTTP managers: no listener, so no non-HTTP connections", ModeInflight, Selector{Include: []*regexp.Regexp{re(`^http\.`)}}, 2},
		{"excluding an HTTP manager but not its listener never goes negative", ModeInflight, Selector{Exclude: []*regexp.Regexp{re(`^listener\.`)}}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Count(snap, tt.mode, tt.sel).Open; got != tt.want {
				t.Errorf("Count(%s).Open = %d, want %d", tt.mode, got, tt.want)
			}
		})
	}
	c := Count(snap, ModeInflight, Selector{})
	wantExcluded := []string{"http.admin", "listener.admin", "listener.envoy_internal_loop"}
	if !reflect.DeepEqual(c.Excluded, wantExcluded) {
		t.Errorf("Excluded = %v, want %v (envoy's own scopes never count)", c.Excluded, wantExcluded)
	}
	if len(c.Scopes) != 5 || c.Scopes[0].Name != "http.ingress_http" {
		t.Errorf("Scopes = %+v, want 5 sorted by name", c.Scopes)
	}
}

func TestPollGap(t *testing.T) {
	tests := []struct {
		lastPoll, interval, want time.Duration
	}{
		{300 * time.Microsecond, 250 * time.Millisecond, minPollGap}, // a small config: as often as allowed
		{5 * time.Millisecond, 250 * time.Millisecond, 50 * time.Millisecond},
		{86 * time.Millisecond, 250 * time.Millisecond, 250 * time.Millisecond}, // 10,000 clusters: the interval bounds it
		{0, 10 * time.Millisecond, 10 * time.Millisecond},                       // an interval below the floor wins
	}
	for _, tt := range tests {
		if got := pollGap(tt.lastPoll, tt.interval); got != tt.want {
			t.Errorf("pollGap(%s, %s) = %s, want %s", tt.lastPoll, tt.interval, got, tt.want)
		}
	}
}

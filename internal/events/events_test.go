package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// admin is an Envoy admin API in memory, for driving a real drain.Engine to each outcome; the real Envoy
// runs in test/integration's TestEvents*.
type admin struct {
	mu       sync.Mutex
	inflight int64
	fail     error // returned by HealthcheckFail when set
	live     bool  // after HealthcheckOK, until HealthcheckFail
	cut      int64 // requests the client side cuts after the first poll (each closing its connection)
	polls    int
}

func (a *admin) HealthcheckFail(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail == nil {
		a.live = false
	}
	return a.fail
}
func (a *admin) DrainListeners(context.Context, bool) error { return nil }
func (a *admin) HealthcheckOK(context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.live = true
	return nil
}
func (a *admin) ServerState(context.Context) (envoyadmin.ServerState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.live {
		return envoyadmin.StateLive, nil
	}
	return envoyadmin.StateDraining, nil
}
func (a *admin) Stats(context.Context) (envoyadmin.Snapshot, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.polls++
	var cut int64
	if a.polls > 1 {
		cut = a.cut
	}
	return envoyadmin.Snapshot{
		Listeners: map[string]int64{"listener.0.0.0.0_8080": a.inflight + 3, "listener.0.0.0.0_9000": 0},
		HTTP: map[string]envoyadmin.HTTPGauges{"http.ingress": {Connections: a.inflight + 3, Requests: a.inflight,
			RequestsRxReset: 7 + cut, ConnectionsCutActive: 5 + cut}},
	}, nil
}
func (a *admin) ListenerConfig(context.Context) (envoyadmin.Topology, error) {
	return envoyadmin.Topology{Listeners: []envoyadmin.Listener{
		{Scope: "listener.0.0.0.0_8080", HTTP: []string{"http.ingress"}},
		{Scope: "listener.0.0.0.0_9000"},
	}}, nil
}

// fakeRecorder keeps the Events in the order they were recorded.
type fakeRecorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *fakeRecorder) Record(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *fakeRecorder) got() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestWatch: for each outcome, a real engine's drain gives DrainStarted, then the result's Event, with the
// note that says what happened.
func TestWatch(t *testing.T) {
	tests := []struct {
		name     string
		inflight int64
		fail     error
		cut      int64
		cancel   bool // stop the engine during the drain
		adaptive bool // the adaptive quiet period
		witness  drain.Verdict
		want     []string
		wantType string
		wantNote []string // substrings of the notes of the Events after DrainStarted
	}{
		{name: "drained", want: []string{ReasonDrainStarted, ReasonDrained}, wantType: "Normal",
			wantNote: []string{"drained in 5s, 0 in flight left"}},
		{name: "drained, adaptive quiet period", adaptive: true, want: []string{ReasonDrainStarted, ReasonDrained}, wantType: "Normal",
			wantNote: []string{"drained in 5s, 0 in flight left; no new connection or request for 5s after health checks failed (adaptive quiet period: 500ms needed, the lower bound"}},
		{name: "drained, requests cut", cut: 3, want: []string{ReasonDrainStarted, ReasonDrained}, wantType: "Normal",
			wantNote: []string{"drained in 5s, 0 in flight left; the client side cut 3 requests in flight (closing 3 connections under them) during the drain"}},
		{name: "timed out, requests cut", inflight: 2, cut: 1, want: []string{ReasonDrainStarted, ReasonDrainTimedOut}, wantType: "Warning",
			wantNote: []string{"deadline 20s reached with 2 in flight", "the client side cut 1 request in flight (closing 1 connection under them) during the drain"}},
		{name: "timed out", inflight: 2, want: []string{ReasonDrainStarted, ReasonDrainTimedOut}, wantType: "Warning",
			wantNote: []string{"deadline 20s reached with 2 in flight", "still in flight: listener.0.0.0.0_8080 + http.ingress: 2 requests"}},
		{name: "envoy gone", fail: fmt.Errorf("POST /healthcheck/fail: %w: connection refused", envoyadmin.ErrUnreachable),
			witness: drain.VerdictGone,
			want:    []string{ReasonDrainStarted, ReasonEnvoyGone}, wantType: "Warning", wantNote: []string{"envoy is not running", "no envoy process"}},
		{name: "misconfigured", fail: fmt.Errorf("POST /healthcheck/fail: %w: connection refused", envoyadmin.ErrUnreachable),
			witness: drain.VerdictMisconfigured,
			want:    []string{ReasonDrainStarted, ReasonAdminMisconfigured, ReasonAdminMisconfigured}, wantType: "Warning",
			wantNote: []string{"configuration error", "but envoy pid 12 is running"}},
		{name: "failed", fail: errors.New("POST /healthcheck/fail: status 500"),
			want: []string{ReasonDrainStarted, ReasonDrainFailed}, wantType: "Warning", wantNote: []string{"could not fail envoy's health checks", "status 500"}},
		{name: "canceled", inflight: 1, cancel: true, want: []string{ReasonDrainStarted, ReasonDrainCanceled}, wantType: "Warning",
			wantNote: []string{"canceled by SIGTERM", "1 in flight"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := drain.Config{MinDuration: 5 * time.Second, Timeout: 20 * time.Second, Interval: 250 * time.Millisecond,
					Mode: drain.ModeInflight, ListenerDrain: drain.ListenerDrainNone, AdaptiveQuiet: tt.adaptive}
				switch tt.witness {
				case drain.VerdictGone:
					cfg.Witness = drain.WitnessFunc(func(context.Context) drain.Evidence {
						return drain.Evidence{Verdict: drain.VerdictGone, Text: "no envoy process is running here"}
					})
				case drain.VerdictMisconfigured:
					cfg.Witness = drain.WitnessFunc(func(context.Context) drain.Evidence {
						return drain.Evidence{Verdict: drain.VerdictMisconfigured, Text: "envoy pid 12 is running"}
					})
				}
				e, err := drain.New(cfg, &admin{inflight: tt.inflight, fail: tt.fail, cut: tt.cut}, discard(), nil)
				if err != nil {
					t.Fatal(err)
				}
				ectx, stopEngine := context.WithCancelCause(context.Background())
				engineDone := make(chan struct{})
				go func() { defer close(engineDone); _ = e.Run(ectx) }()
				rec := &fakeRecorder{}
				wctx, stopWatch := context.WithCancel(context.Background())
				watchDone := make(chan struct{})
				go func() { defer close(watchDone); Watch(wctx, e, rec, cfg.Timeout) }()

				d, err := e.Trigger(context.Background(), drain.Caller{Method: "signal SIGTERM"})
				if err != nil {
					t.Fatal(err)
				}
				if tt.cancel {
					time.Sleep(7 * time.Second) // fake time: the drain is waiting for its request
					stopEngine(errors.New("SIGTERM"))
				}
				<-d.Done()
				stopEngine(nil)
				<-engineDone
				stopWatch()
				<-watchDone

				got := rec.got()
				var reasons []string
				for _, ev := range got {
					reasons = append(reasons, ev.Reason)
				}
				if strings.Join(reasons, ",") != strings.Join(tt.want, ",") {
					t.Fatalf("reasons = %v, want %v", reasons, tt.want)
				}
				if n := got[0].Note; got[0].Type != "Normal" || n != "drain started by signal SIGTERM; releases within 20s at the latest" {
					t.Errorf("DrainStarted = %s %q", got[0].Type, n)
				}
				for _, ev := range got[1:] {
					if ev.Type != tt.wantType {
						t.Errorf("%s type = %s, want %s", ev.Reason, ev.Type, tt.wantType)
					}
					for _, s := range tt.wantNote {
						if !strings.Contains(ev.Note, s) {
							t.Errorf("%s note %q does not say %q", ev.Reason, ev.Note, s)
						}
					}
				}
			})
		})
	}
}

// TestWatchEveryDrain: a second drain (after a resume) gets its own pair of Events, after the first's.
func TestWatchEveryDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := drain.Config{MinDuration: time.Second, Timeout: 10 * time.Second, Interval: 250 * time.Millisecond,
			Mode: drain.ModeInflight, ListenerDrain: drain.ListenerDrainNone}
		e, err := drain.New(cfg, &admin{}, discard(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ectx, stopEngine := context.WithCancel(context.Background())
		engineDone := make(chan struct{})
		go func() { defer close(engineDone); _ = e.Run(ectx) }()
		rec := &fakeRecorder{}
		wctx, stopWatch := context.WithCancel(context.Background())
		watchDone := make(chan struct{})
		go func() { defer close(watchDone); Watch(wctx, e, rec, cfg.Timeout) }()
		for i := range 2 {
			d, err := e.Trigger(context.Background(), drain.Caller{Method: "POST", Remote: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			<-d.Done()
			synctest.Wait() // Watch has recorded the result
			if i == 0 {
				if _, err := e.Resume(context.Background(), drain.ResumeRequest{By: drain.Caller{Method: "test"}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		stopEngine()
		<-engineDone
		stopWatch()
		<-watchDone
		var reasons []string
		for _, ev := range rec.got() {
			reasons = append(reasons, ev.Reason)
		}
		want := []string{ReasonDrainStarted, ReasonDrained, ReasonDrainStarted, ReasonDrained}
		if strings.Join(reasons, ",") != strings.Join(want, ",") {
			t.Errorf("reasons = %v, want %v", reasons, want)
		}
		if n := rec.got()[0].Note; !strings.Contains(n, "by POST from unix") {
			t.Errorf("DrainStarted note %q does not say who", n)
		}
	})
}

func TestInFlight(t *testing.T) {
	tests := []struct {
		name string
		st   drain.Status
		want string
	}{
		{"groups: only counted ones with work", drain.Status{CountBasis: drain.BasisListenerConfig, Groups: []drain.Group{
			{Listeners: []string{"listener.0.0.0.0_80", "listener.0.0.0.0_443"}, Managers: []string{"http.ingress"}, Requests: 3, NonHTTP: 1, Counted: true},
			{Listeners: []string{"listener.tcp"}, NonHTTP: 1, Counted: true},
			{Listeners: []string{"listener.idle"}, Managers: []string{"http.idle"}, Connections: 50, HTTPConnections: 50, Counted: true},
			{Listeners: []string{"listener.excluded"}, Requests: 9, Counted: false},
		}}, "listener.0.0.0.0_80 + listener.0.0.0.0_443 + http.ingress: 3 requests, 1 non-HTTP connection; listener.tcp: 1 non-HTTP connection"},
		{"fallback: scopes", drain.Status{CountBasis: "fallback: config_dump: status 500", Listeners: []drain.ScopeCount{
			{Name: "http.ingress", Connections: 2, Requests: 1}, {Name: "listener.0.0.0.0_80", Connections: 2}, {Name: "listener.zero"},
		}}, "http.ingress: 2 connections, 1 request; listener.0.0.0.0_80: 2 connections"},
		{"upgraded connections by kind, apart from requests", drain.Status{CountBasis: drain.BasisListenerConfig, Groups: []drain.Group{
			{Listeners: []string{"listener.0.0.0.0_8080"}, Managers: []string{"http.ingress"}, Requests: 3, Upgraded: 2, Counted: true},
			{Listeners: []string{"listener.ws"}, Managers: []string{"http.ws"}, Requests: 1, Upgraded: 1, Counted: true},
		}}, "listener.0.0.0.0_8080 + http.ingress: 2 WebSocket/upgraded connections, 1 request; listener.ws + http.ws: 1 WebSocket/upgraded connection"},
		{"nothing read", drain.Status{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := inFlight(tt.st); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestNoteLimit(t *testing.T) {
	long := strings.Repeat("é", MaxNote) // 2 bytes each
	got := Note(long)
	if len(got) > MaxNote || !strings.HasSuffix(got, " …") || !strings.HasPrefix(got, "éé") {
		t.Errorf("note of %d bytes: got %d bytes ending %q", len(long), len(got), got[len(got)-6:])
	}
	if got := Note("short"); got != "short" {
		t.Errorf("short note changed: %q", got)
	}
}

// logBuffer is a JSON log whose WARN lines the tests count.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) warnings() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var w []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, `"level":"WARN"`) {
			w = append(w, l)
		}
	}
	return w
}

func (b *logBuffer) text() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newLog() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

var testPod = Config{Pod: "envoy-0", Namespace: "edge", UID: "0b6f1c1e-5d2a-4f0e-9a51-3c7d2e8b9f10", Component: "drain"}

// TestClientSendsInOrder: Events reach the API in the order they were recorded, as events.k8s.io/v1
// Events about the Pod, and Close returns once they are sent.
func TestClientSendsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var sent []*apiEvent
		c := newClient(testPod, discard(), func(ctx context.Context, ev *apiEvent) error {
			mu.Lock()
			defer mu.Unlock()
			sent = append(sent, ev)
			return nil
		})
		c.Record(Event{Type: "Normal", Reason: ReasonDrainStarted, Note: "a"})
		c.Record(Event{Type: "Normal", Reason: ReasonDrained, Note: "b"})
		start := time.Now()
		c.Close(CloseWait)
		if took := time.Since(start); took != 0 {
			t.Errorf("Close took %s with nothing in the way", took)
		}
		if len(sent) != 2 || sent[0].Reason != ReasonDrainStarted || sent[1].Reason != ReasonDrained {
			t.Fatalf("sent %v", sent)
		}
		ev := sent[0]
		if ev.Regarding.Kind != "Pod" || ev.Regarding.Name != "envoy-0" || ev.Regarding.Namespace != "edge" || ev.Regarding.UID != testPod.UID || ev.Namespace != "edge" ||
			ev.ReportingController != Controller || ev.ReportingInstance != "drain@envoy-0" || ev.Action != "Drain" ||
			ev.EventTime.IsZero() || !strings.HasPrefix(ev.Name, "envoy-0.") || ev.Note != "a" {
			t.Errorf("event: %+v", ev)
		}
		c.Record(Event{Reason: ReasonDrained}) // after Close: dropped, never blocks
	})
}

// TestClientNeverBlocks: with the API hung, Record returns at once and a full queue drops; Close waits
// CloseWait, not the request's timeout, then says, as its one warning, what was not recorded.
func TestClientNeverBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, buf := newLog()
		c := newClient(testPod, log, func(ctx context.Context, ev *apiEvent) error {
			<-ctx.Done()
			return ctx.Err()
		})
		start := time.Now()
		for range QueueSize + 5 {
			c.Record(Event{Type: "Normal", Reason: ReasonDrainStarted})
		}
		if took := time.Since(start); took != 0 {
			t.Fatalf("Record blocked for %s", took)
		}
		c.Close(CloseWait)
		if took := time.Since(start); took != CloseWait {
			t.Errorf("Close returned after %s, want CloseWait (%s), not the request timeout (%s)", took, CloseWait, RequestTimeout)
		}
		w := buf.warnings()
		if len(w) != 1 || !strings.Contains(w[0], "kubernetes events not recorded") || !strings.Contains(w[0], fmt.Sprintf(`"dropped":%d`, QueueSize+5)) {
			t.Errorf("warnings: %q", w)
		}
	})
}

// TestClientOneWarning: an API that refuses every Event (RBAC) costs the log one warning, not one per Event.
func TestClientOneWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, buf := newLog()
		c := newClient(testPod, log, func(ctx context.Context, ev *apiEvent) error {
			return errors.New(`events.events.k8s.io is forbidden: User "system:serviceaccount:edge:default" cannot create resource "events"`)
		})
		for range 3 {
			c.Record(Event{Type: "Normal", Reason: ReasonDrainStarted})
			synctest.Wait()
		}
		c.Close(CloseWait)
		w := buf.warnings()
		if len(w) != 1 || !strings.Contains(w[0], "cannot record kubernetes events") || !strings.Contains(w[0], "forbidden") {
			t.Errorf("warnings: %q", w)
		}
	})
}

// TestNewWithoutAccess: without the pod's name or an API server config, New logs one line saying why, and
// the Client records nothing. Outside a pod (nothing names one, no cluster, no kubeconfig) the line is INFO:
// nothing was meant to be recorded. Where Events were meant to be (a pod named, in a cluster, a kubeconfig
// given) it is a warning.
func TestNewWithoutAccess(t *testing.T) {
	tests := []struct {
		name      string
		inCluster bool
		cfg       Config
		warn      bool
		want      string
	}{
		{"outside a pod", false, Config{}, false, "not running in a pod"},
		{"the webhook outside a pod", false, Config{Others: true}, false, "not running in a pod"},
		{"no pod name", false, Config{Namespace: "edge"}, true, EnvPodName + " not set"},
		{"in a cluster, pod unknown", true, Config{}, true, EnvPodName + " and " + EnvPodNamespace + " not set"},
		{"not in a cluster", false, testPod, true, "not running in a cluster and no --kubeconfig given"},
		{"kubeconfig missing", false, Config{Pod: "p", Namespace: "n", Kubeconfig: "/nonexistent/kubeconfig"}, true, "/nonexistent/kubeconfig"},
		{"kubeconfig missing, pod unknown", false, Config{Kubeconfig: "/nonexistent/kubeconfig"}, true, EnvPodName + " and " + EnvPodNamespace + " not set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a cluster, whatever runs the test
			t.Setenv("KUBERNETES_SERVICE_PORT", "")
			if tt.inCluster {
				t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
				t.Setenv("KUBERNETES_SERVICE_PORT", "443")
			}
			log, buf := newLog()
			c := New(tt.cfg, log)
			if c.Enabled() {
				t.Fatal("enabled without access")
			}
			c.Record(Event{Reason: ReasonDrainStarted})
			c.Close(CloseWait)
			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(buf.text()), "\n") {
				if l != "" {
					lines = append(lines, l)
				}
			}
			level := `"level":"INFO"`
			if tt.warn {
				level = `"level":"WARN"`
			}
			if len(lines) != 1 || !strings.Contains(lines[0], level) || !strings.Contains(lines[0], "kubernetes events disabled") || !strings.Contains(lines[0], tt.want) {
				t.Errorf("log %q, want one line at %s saying %q", lines, level, tt.want)
			}
		})
	}
}

func TestEventName(t *testing.T) {
	at := time.Unix(0, 0x1234)
	if got := eventName("envoy-0", at); got != "envoy-0.1234" {
		t.Errorf("got %q", got)
	}
	if got := eventName(strings.Repeat("a", 253), at); len(got) != 253 || !strings.HasSuffix(got, ".1234") {
		t.Errorf("long pod name: %d bytes %q", len(got), got[240:])
	}
}

// TestClientWarnsOncePerRefusal: each reason the API server refuses Events for is one warning (a second reason
// is news, a repeat is not), and Close counts the refusals by reason. A note over MaxNote is cut to MaxNote, so
// that the API server does not refuse the Event for its length.
func TestClientWarnsOncePerRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		forbidden, invalid := readFile(t, "testdata/status-forbidden.json"), readFile(t, "testdata/status-invalid.json")
		log, buf := newLog()
		var notes []string
		c := newClient(testPod, log, func(ctx context.Context, ev *apiEvent) error {
			notes = append(notes, ev.Note)
			switch ev.Reason { // the API server's answers, as the sender reads them
			case ReasonDrainStarted:
				return answerError(403, "403 Forbidden", forbidden)
			default:
				return answerError(422, "422 Unprocessable Entity", invalid)
			}
		})
		for _, reason := range []string{ReasonDrainStarted, ReasonDrainStarted, "Other", ReasonDrainStarted, "Other"} {
			c.Record(Event{Type: "Normal", Reason: reason, Note: strings.Repeat("é", 600)})
			synctest.Wait()
		}
		c.Close(CloseWait)
		w := buf.warnings()
		if len(w) != 2 || !strings.Contains(w[0], `"refusal":"Forbidden"`) || !strings.Contains(w[1], `"refusal":"Invalid"`) {
			t.Errorf("warnings %q, want two: Forbidden, then Invalid", w)
		}
		if !strings.Contains(buf.text(), `"refused":"Forbidden=3 Invalid=2"`) {
			t.Errorf("log %s: want the refusals counted at Close", buf.text())
		}
		for _, n := range notes {
			if len(n) > MaxNote || !utf8.ValidString(n) || !strings.HasSuffix(n, "…") {
				t.Errorf("note of %d bytes (valid UTF-8 %v), want at most %d ending in …", len(n), utf8.ValidString(n), MaxNote)
			}
		}
	})
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

package drain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// logBuffer collects JSON log lines; safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the log lines with message msg.
func (b *logBuffer) lines(msg string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(b.buf.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

const readFailed = "reading envoy's listener configuration failed; counting without it where needed"

// The listener configuration is read once per drain, at its first poll, not on every poll.
func TestTopologyReadOncePerDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(1)
		e := startEngine(t, testConfig(), fake, nil)
		d, _ := e.Trigger(context.Background(), testCaller)
		time.Sleep(20 * time.Second) // 2s delay, 5s minimum duration, then polls every 250ms with 1 in flight
		synctest.Wait()
		fake.set(func(f *fakeAdmin) { f.inflight = 0 })
		<-d.Done()
		fake.mu.Lock()
		calls := fake.topoCall
		fake.mu.Unlock()
		if polls := e.Status().Polls; calls != 1 || polls < 20 {
			t.Errorf("listener config read %d times in %d polls, want once", calls, polls)
		}
		if st := e.Status(); st.CountBasis != BasisListenerConfig || len(st.Groups) != 2 {
			t.Errorf("status basis %q, groups %+v; want the listener configuration's 2 groups", st.CountBasis, st.Groups)
		}
	})
}

// A listener the configuration does not know makes the next poll read it again, at most once per
// topologyRereadGap, and only once for the same listener.
func TestTopologyRereadOnNewListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(1)
		cfg := testConfig()
		cfg.Delay, cfg.MinDuration = 0, 0
		e := startEngine(t, cfg, fake, nil)
		d, _ := e.Trigger(context.Background(), testCaller)
		time.Sleep(time.Second)
		synctest.Wait()
		fake.set(func(f *fakeAdmin) { f.added = "listener.0.0.0.0_9090" })
		time.Sleep(10 * time.Second)
		synctest.Wait()
		fake.set(func(f *fakeAdmin) { f.inflight = 0 })
		<-d.Done()
		fake.mu.Lock()
		calls := fake.topoCall
		fake.mu.Unlock()
		if calls != 2 {
			t.Errorf("listener config read %d times, want twice: at the start, and once for the new listener", calls)
		}
		st := e.Status()
		i := slicesIndex(st.Groups, "listener.0.0.0.0_9090")
		if i < 0 || st.Groups[i].Reason != reasonUnknown || !st.Groups[i].Counted {
			t.Errorf("groups %+v: want the unknown listener counted on its own", st.Groups)
		}
	})
}

func slicesIndex(groups []Group, listener string) int {
	for i, g := range groups {
		for _, l := range g.Listeners {
			if l == listener {
				return i
			}
		}
	}
	return -1
}

// When the configuration cannot be read, the drain counts with the rule without it, says so in its status,
// warns once however many polls follow, and retries with a growing gap.
func TestTopologyUnavailableFallsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(1)
		fake.topoErr = errors.New("GET /config_dump: status 403: forbidden")
		var logs logBuffer
		e, err := New(testConfig(), fake, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = e.Run(ctx) }()
		defer func() { cancel(); <-done }()
		d, _ := e.Trigger(context.Background(), testCaller)
		time.Sleep(60 * time.Second)
		synctest.Wait()
		st := e.Status()
		if want := "fallback: listener configuration unavailable: GET /config_dump: status 403: forbidden"; st.CountBasis != want {
			t.Errorf("count basis %q, want %q", st.CountBasis, want)
		}
		if st.Open != 1 {
			t.Errorf("open = %d, want the 1 request by the rule without configuration", st.Open)
		}
		<-d.Done()
		if w := logs.lines(readFailed); len(w) != 1 || w[0]["level"] != "WARN" || w[0]["err"] == nil {
			t.Errorf("warnings %v, want one with the error", w)
		}
		fake.mu.Lock()
		calls := fake.topoCall
		fake.mu.Unlock()
		// 53s of polling after the 7s of delay and minimum duration: retries after 1, 2, 4, 8, 16, 30s.
		if calls < 2 || calls > 7 {
			t.Errorf("listener config read %d times in a minute, want a retry with a growing gap", calls)
		}
	})
}

// Through the real client: an admin API whose /config_dump fails (an Envoy with it blocked by a proxy, or an
// answer over the size cap) still drains, by the rule without the configuration, and /status says so.
func TestConfigDumpUnavailableRealClient(t *testing.T) {
	var rq sync.Mutex
	inflight := 1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/config_dump":
			http.Error(w, "not here", http.StatusNotFound)
		case "/stats":
			rq.Lock()
			n := inflight
			rq.Unlock()
			w.Write([]byte(`{"stats":[{"name":"listener.0.0.0.0_8080.downstream_cx_active","value":3},` +
				`{"name":"http.ingress.downstream_cx_active","value":3},{"name":"http.ingress.downstream_rq_active","value":` + strconv.Itoa(n) + `}]}`))
		default:
			w.Write([]byte("OK\n"))
		}
	}))
	defer srv.Close()
	addr, _ := envoyadmin.ParseAddress(srv.URL)
	client := envoyadmin.New(addr, envoyadmin.Options{Timeout: time.Second})
	var logs logBuffer
	cfg := Config{Timeout: 30 * time.Second, Interval: 20 * time.Millisecond, Mode: ModeInflight, ListenerDrain: ListenerDrainNone}
	e, _ := New(cfg, client, slog.New(slog.NewJSONHandler(&logs, nil)), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Run(ctx)
	d, _ := e.Trigger(ctx, testCaller)
	deadline := time.Now().Add(10 * time.Second)
	for e.Status().Polls < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	st := e.Status()
	if !strings.HasPrefix(st.CountBasis, "fallback: listener configuration unavailable: GET /config_dump: status 404") || st.Open != 1 {
		t.Errorf("status basis %q open %d; want the fallback with its reason, 1 in flight", st.CountBasis, st.Open)
	}
	rq.Lock()
	inflight = 0
	rq.Unlock()
	<-d.Done()
	if r := d.Result(); r.Outcome != OutcomeDrained {
		t.Errorf("outcome %s (%s), want drained", r.Outcome, r.Reason)
	}
	if w := logs.lines(readFailed); len(w) != 1 {
		t.Errorf("%d warnings, want 1:\n%s", len(w), logs.buf.String())
	}
}

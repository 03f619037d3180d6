package manager

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// writeProc writes one process of a /proc-like tree.
func writeProc(t *testing.T, root string, pid int, argv0, state string) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "comm"), []byte(filepath.Base(argv0)+"\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cmdline"), []byte(argv0+"\x00-c\x00/etc/envoy.yaml\x00"), 0o644)
	os.WriteFile(filepath.Join(dir, "stat"), []byte(fmt.Sprintf("%d (%s) %s 1 1", pid, filepath.Base(argv0), state)), 0o644)
}

func TestProcWitness(t *testing.T) {
	tests := []struct {
		name  string
		procs map[int][2]string // pid -> argv0, state
		want  drain.Verdict
		text  string
	}{
		{"envoy alive", map[int][2]string{1: {"/pause", "S"}, 12: {"envoy", "S"}}, drain.VerdictMisconfigured, "envoy pid 12 is running"},
		{"only a zombie", map[int][2]string{1: {"/pause", "S"}, 12: {"envoy", "Z"}}, drain.VerdictGone, "no envoy process is running"},
		{"no envoy", map[int][2]string{1: {"/pause", "S"}}, drain.VerdictGone, "no envoy process is running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for pid, p := range tt.procs {
				writeProc(t, root, pid, p[0], p[1])
			}
			ev := procWitness{root: root}.Gone(context.Background())
			if ev.Verdict != tt.want || !strings.Contains(ev.Text, tt.text) {
				t.Errorf("evidence = %+v, want verdict %d saying %q", ev, tt.want, tt.text)
			}
		})
	}
	if ev := (procWitness{root: filepath.Join(t.TempDir(), "missing")}).Gone(context.Background()); ev.Verdict != drain.VerdictUnknown {
		t.Errorf("unreadable /proc: evidence = %+v, want unknown", ev)
	}
}

func TestChildWitness(t *testing.T) {
	exited := make(chan struct{})
	w := childWitness(42, exited)
	if ev := w.Gone(context.Background()); ev.Verdict != drain.VerdictMisconfigured || !strings.Contains(ev.Text, "pid 42") {
		t.Errorf("child running: evidence = %+v, want misconfigured naming pid 42", ev)
	}
	close(exited)
	if ev := w.Gone(context.Background()); ev.Verdict != drain.VerdictGone {
		t.Errorf("child reaped: evidence = %+v, want gone", ev)
	}
}

// stateAdmin refuses /server_info until answerAfter has passed (never, if 0).
type stateAdmin struct {
	start       time.Time
	answerAfter time.Duration
	calls       atomic.Int32
}

func (s *stateAdmin) ServerState(context.Context) (envoyadmin.ServerState, error) {
	s.calls.Add(1)
	if s.answerAfter > 0 && time.Since(s.start) >= s.answerAfter {
		return envoyadmin.StateLive, nil
	}
	return "", fmt.Errorf("GET /server_info: %w: connection refused", envoyadmin.ErrUnreachable)
}

// The sidecar's evidence: never reached is a configuration error, with a WARN after reachWarnAfter; reached
// once, a refusal later is gone.
func TestReachWitness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs lockedLog
		log := slog.New(slog.NewTextHandler(&logs, nil))
		admin := &stateAdmin{start: time.Now(), answerAfter: 8 * time.Second}
		r := newReachWitness()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.probe(ctx, admin, envoyadmin.Address{Network: "tcp", Addr: "127.0.0.1:19000"}, log)
		}()

		time.Sleep(reachWarnAfter + time.Second)
		synctest.Wait()
		if ev := r.Gone(ctx); ev.Verdict != drain.VerdictMisconfigured || !strings.Contains(ev.Text, "never answered") {
			t.Errorf("never reached: evidence = %+v, want misconfigured", ev)
		}
		if !strings.Contains(logs.String(), "level=WARN msg=\"envoy admin API has not answered since serve started") ||
			!strings.Contains(logs.String(), "admin_address=http://127.0.0.1:19000") {
			t.Errorf("no WARN naming the address after %s:\n%s", reachWarnAfter, logs.String())
		}
		<-done // it answers at 8s
		if ev := r.Gone(ctx); ev.Verdict != drain.VerdictGone || !strings.Contains(ev.Text, "answered serve at") {
			t.Errorf("reached: evidence = %+v, want gone", ev)
		}
		if !strings.Contains(logs.String(), "envoy admin API reached") {
			t.Errorf("the first answer not logged:\n%s", logs.String())
		}
		if n := admin.calls.Load(); n < 10 {
			t.Errorf("%d probes in 8s, want one every %s", n, reachProbeEvery)
		}
	})
}

// lockedLog is a log written by one goroutine and read by the test.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// bootstrapAdmin answers /server_info's bootstrap with path and inline.
type bootstrapAdmin struct{ path, inline string }

func (b bootstrapAdmin) ServerBootstrap(context.Context) (string, string, error) {
	return b.path, b.inline, nil
}

// The hook's identity check: the admin API's bootstrap must be on the command line of the Envoy process it
// sees, in whatever flag form Envoy was given it; only a clear absence is another Envoy.
func TestProcWitnessIdentify(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "12")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "comm"), []byte("envoy\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cmdline"), []byte("envoy\x00--config-path=/etc/envoy/a.yaml\x00--config-yaml admin: {address: {pipe: {path: /s}}}\x00"), 0o644)
	tests := []struct {
		admin bootstrapAdmin
		want  drain.Verdict
	}{
		{bootstrapAdmin{"/etc/envoy/a.yaml", "admin: {address: {pipe: {path: /s}}}"}, drain.VerdictUnknown},
		{bootstrapAdmin{"/etc/envoy/a.yaml", ""}, drain.VerdictUnknown},
		{bootstrapAdmin{"/etc/envoy/b.yaml", ""}, drain.VerdictMisconfigured},
		{bootstrapAdmin{"/etc/envoy/a.yaml", "admin: {address: {pipe: {path: /other}}}"}, drain.VerdictMisconfigured},
	}
	// A second Envoy here (a hot restart's, or another container's when the process namespace is shared):
	// the admin API is ours if it is either's.
	writeProc(t, root, 30, "envoy", "S")
	tests = append(tests, struct {
		admin bootstrapAdmin
		want  drain.Verdict
	}{bootstrapAdmin{"/etc/envoy.yaml", ""}, drain.VerdictUnknown})
	for _, tt := range tests {
		ev := procWitness{root: root, admin: tt.admin}.Identify(context.Background())
		if ev.Verdict != tt.want {
			t.Errorf("admin %+v: evidence %+v, want verdict %d", tt.admin, ev, tt.want)
		}
	}
}

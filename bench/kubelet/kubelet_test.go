package kubelet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The test binary is also the fake peer: with FAKE_PEER set it behaves like a peer's process instead of
// running the tests (the os/exec tests' helper-process pattern).
func TestMain(m *testing.M) {
	if mode := os.Getenv("FAKE_PEER"); mode != "" {
		os.Exit(fakePeer(mode))
	}
	os.Exit(m.Run())
}

// fakePeer is a peer's process, like Contour's: a sidecar server with no SIGTERM handler whose /shutdown
// answers once a ready file exists, an exec hook that writes that file, and an "Envoy" that only waits.
func fakePeer(mode string) int {
	ready := os.Getenv("FAKE_READY")
	switch mode {
	case "sidecar": // serves on the listener passed as fd 3; no signal handler: SIGTERM kills it
		ln, err := net.FileListener(os.NewFile(3, "listener"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake sidecar:", err)
			return 2
		}
		mux := http.NewServeMux()
		mux.HandleFunc("GET /shutdown", func(w http.ResponseWriter, r *http.Request) {
			// Checks the file now, then (like Contour's 1 s poll, lengthened so the test does not
			// depend on timing) not again before the test is over. It tells the hook through the FIFO
			// FAKE_SEEN that it has looked, so the hook writes the file only after that.
			if _, err := os.Stat(ready); err == nil {
				fmt.Fprintln(w, "OK")
				return
			}
			if seen := os.Getenv("FAKE_SEEN"); seen != "" {
				os.WriteFile(seen, []byte("seen\n"), 0) // blocks until the hook reads
			}
			<-r.Context().Done()
		})
		http.Serve(ln, mux)
		return 1
	case "hook": // writes the ready file (once the sidecar has looked for it) and exits 0
		if seen := os.Getenv("FAKE_SEEN"); seen != "" {
			if _, err := os.ReadFile(seen); err != nil {
				return 1
			}
		}
		if err := os.WriteFile(ready, nil, 0o644); err != nil {
			return 1
		}
		return 0
	case "hook-forever": // a hook that never returns (Contour's with no Envoy behind its socket)
		select {}
	case "envoy": // waits; SIGTERM kills it
		select {}
	case "stubborn": // ignores SIGTERM: only SIGKILL ends it
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ignoring")
		select {}
	}
	return 3
}

// startFake starts the test binary as a fake peer process of the given mode; the test kills it at cleanup.
func startFake(t *testing.T, mode, ready, seen string, ln *net.TCPListener) *Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FAKE_PEER="+mode, "FAKE_READY="+ready, "FAKE_SEEN="+seen)
	log := filepath.Join(t.TempDir(), mode+".log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if ln != nil {
		lf, err := ln.File()
		if err != nil {
			t.Fatal(err)
		}
		defer lf.Close()
		cmd.ExtraFiles = []*os.File{lf}
	}
	var out *os.File
	if mode == "stubborn" { // wait until the handler is in place: it prints once it ignores SIGTERM
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, out = w, r
		defer w.Close()
	}
	c, err := Start(cmd)
	if err != nil {
		t.Fatalf("starting fake %s: %v", mode, err)
	}
	t.Cleanup(c.Kill)
	if out != nil {
		buf := make([]byte, 9)
		if _, err := out.Read(buf); err != nil {
			t.Fatalf("fake %s did not start (log %s): %v", mode, log, err)
		}
		out.Close()
	}
	return c
}

func hookOf(mode, ready, seen string) Hook {
	return ExecHook{Path: os.Args[0], Args: []string{"-test.run=^$"},
		Env: append(os.Environ(), "FAKE_PEER="+mode, "FAKE_READY="+ready, "FAKE_SEEN="+seen)}
}

// TestTerminateKubeletOrder runs a Contour-like pod (a sidecar with no SIGTERM handler and an exec hook,
// and an Envoy whose httpGet hook waits on the sidecar) through Terminate and checks kubelet's order.
func TestTerminateKubeletOrder(t *testing.T) {
	tests := []struct {
		name        string
		sidecarHook string
		envoyHook   bool
		envoyMode   string
		grace       time.Duration
		// want
		sidecarHookKind HookKind
		envoyHookKind   HookKind
		envoyKilled     bool
	}{
		{
			// The sidecar's hook returns, so the sidecar gets SIGTERM and dies before its handler answers
			// Envoy's hook: Envoy's hook ends with no response, and only then does Envoy get SIGTERM.
			name: "sidecar dies when its own hook returns", sidecarHook: "hook", envoyHook: true, envoyMode: "envoy",
			grace: time.Minute, sidecarHookKind: HookExited, envoyHookKind: HookNoResponse,
		},
		{
			// Neither hook returns: both are cut at the grace period's end, then SIGTERM.
			name: "hooks running at the grace end are cut", sidecarHook: "hook-forever", envoyHook: true, envoyMode: "envoy",
			grace: 300 * time.Millisecond, sidecarHookKind: HookNeverReturned, envoyHookKind: HookNeverReturned,
		},
		{
			// A container without a hook gets SIGTERM at once; one that ignores it is killed at the grace end.
			name: "no hook: SIGTERM at once, SIGKILL at the grace end", sidecarHook: "hook-forever", envoyMode: "stubborn",
			grace: 300 * time.Millisecond, sidecarHookKind: HookNeverReturned, envoyHookKind: HookNone, envoyKilled: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ready, seen := filepath.Join(dir, "ok"), ""
			if tc.envoyHook {
				seen = filepath.Join(dir, "seen")
				if err := syscall.Mkfifo(seen, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			sidecar := startFake(t, "sidecar", ready, seen, ln)
			envoy := startFake(t, tc.envoyMode, ready, "", nil)
			var envoyHook Hook
			if tc.envoyHook {
				envoyHook = HTTPGetHook{URL: "http://" + ln.Addr().String() + "/shutdown"}
			}
			term := Terminate(context.Background(), tc.grace, []Container{
				{Name: "shutdown-manager", Main: sidecar, PreStop: hookOf(tc.sidecarHook, ready, seen)},
				{Name: "envoy", Main: envoy, PreStop: envoyHook},
			})
			rs := term.Results()
			sc, ev := rs[0], rs[1]
			t.Logf("sidecar %+v (%s); envoy %+v", sc, sidecar.ExitStatus(), ev)

			if got, want := sc.Hook.Kind, tc.sidecarHookKind; got != want {
				t.Errorf("sidecar hook: got %q, want %q", got, want)
			}
			if got, want := ev.Hook.Kind, tc.envoyHookKind; got != want {
				t.Errorf("envoy hook: got %q (%s), want %q", got, ev.Hook.Err, want)
			}
			// kubelet's order, for each container: hook end, then SIGTERM, then exit.
			for _, r := range rs {
				if r.SIGTERM.IsZero() {
					t.Errorf("%s: no SIGTERM", r.Name)
				}
				if r.Hook.Kind != HookNone && r.SIGTERM.Before(r.Hook.End) {
					t.Errorf("%s: SIGTERM at %v, before its hook returned at %v", r.Name, r.SIGTERM, r.Hook.End)
				}
			}
			if got, want := sidecar.ExitStatus(), "signal terminated"; got != want {
				t.Errorf("sidecar (no SIGTERM handler) ended with %q, want %q", got, want)
			}
			if got, want := ev.Killed, tc.envoyKilled; got != want {
				t.Errorf("envoy killed: got %v, want %v", got, want)
			}
			if !ev.Killed && ev.Exited.IsZero() {
				t.Errorf("envoy: no exit recorded")
			}
			switch tc.envoyHookKind {
			case HookNoResponse:
				// The answer was lost because the sidecar got SIGTERM when its own hook returned.
				if ev.Hook.End.Before(sc.SIGTERM) {
					t.Errorf("envoy's hook ended at %v, before the sidecar's SIGTERM at %v", ev.Hook.End, sc.SIGTERM)
				}
				if _, err := os.Stat(ready); err != nil {
					t.Errorf("the sidecar hook's ready file: %v", err)
				}
			case HookNone:
				// Without a hook Envoy is signalled at once, long before the sidecar's hook is cut.
				if !ev.SIGTERM.Before(sc.Hook.End) {
					t.Errorf("envoy (no hook) got SIGTERM at %v, not before the sidecar's hook ended at %v", ev.SIGTERM, sc.Hook.End)
				}
			}
		})
	}
}

// TestHTTPGetHookOutcomes: an answer of any status ends the hook as answered; a closed port is no response.
func TestHTTPGetHookOutcomes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/503" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	tests := []struct {
		url  string
		want string
	}{
		{srv.URL + "/200", "answered 200"},
		{srv.URL + "/503", "answered 503"},
		{closedURL + "/shutdown", "no response"},
	}
	for _, tc := range tests {
		got := HTTPGetHook{URL: tc.url}.Run(context.Background()).String()
		if got != tc.want {
			t.Errorf("GET %s: got %q, want %q", tc.url, got, tc.want)
		}
	}
}

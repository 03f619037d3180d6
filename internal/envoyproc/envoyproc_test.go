package envoyproc

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestIsEnvoy(t *testing.T) {
	tests := []struct {
		comm string
		args []string
		want bool
	}{
		{"envoy", []string{"envoy", "-c", "/etc/envoy/envoy.yaml"}, true},
		{"envoy-1.40.0", []string{"/tools/bin/envoy-1.40.0"}, true},
		{"wrk:worker_0", []string{"/usr/local/bin/envoy", "-c", "x"}, true}, // comm renamed, argv[0] still says envoy
		{"shutdown-manag", []string{"/opt/shutdown-manager/shutdown-manager", "run", "--", "envoy"}, false},
		{"pause", []string{"/pause"}, false},
		{"envoyctl", []string{"envoyctl"}, false},
		{"", nil, false},
	}
	for _, tt := range tests {
		if got := IsEnvoy(tt.comm, tt.args); got != tt.want {
			t.Errorf("IsEnvoy(%q, %q) = %v, want %v", tt.comm, tt.args, got, tt.want)
		}
	}
}

// fakeProc writes a /proc-like tree: pid -> comm and argv.
func fakeProc(t *testing.T, procs map[int][]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, argv := range procs {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "comm"), []byte(filepath.Base(argv[0])+"\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "cmdline"), []byte(strings.Join(argv, "\x00")+"\x00"), 0o644)
	}
	os.MkdirAll(filepath.Join(root, "self"), 0o755) // not a PID: skipped
	return root
}

func TestFind(t *testing.T) {
	tests := []struct {
		name  string
		procs map[int][]string
		want  int // 0: ErrNotFound
	}{
		{"envoy is PID 1", map[int][]string{1: {"envoy", "-c", "/etc/envoy.yaml"}, 40: {"/opt/sm/shutdown-manager", "drain"}}, 1},
		{"shared process namespace: pause is PID 1", map[int][]string{1: {"/pause"}, 7: {"/usr/local/bin/envoy", "-c", "a"}, 30: {"sh"}}, 7},
		{"agent: envoy is the manager's child", map[int][]string{1: {"/opt/sm/shutdown-manager", "run", "--", "envoy"}, 9: {"envoy", "-c", "b"}}, 9},
		{"hot restart: the oldest", map[int][]string{1: {"/pause"}, 20: {"envoy", "--restart-epoch", "1"}, 12: {"envoy", "--restart-epoch", "0"}}, 12},
		{"no envoy", map[int][]string{1: {"/pause"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Find(fakeProc(t, tt.procs))
			if tt.want == 0 {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("Find = %+v, %v; want ErrNotFound", p, err)
				}
				return
			}
			if err != nil || p.PID != tt.want {
				t.Fatalf("Find = %+v, %v; want pid %d", p, err, tt.want)
			}
			if want := tt.procs[tt.want]; strings.Join(p.Args, " ") != strings.Join(want, " ") {
				t.Errorf("args = %q, want %q", p.Args, want)
			}
		})
	}
}

// A zombie Envoy (exited, its parent not yet reaping it) is no running Envoy: the drain's evidence that
// Envoy is gone must not be spoiled by it (internal/manager's hook witness).
func TestFindSkipsZombies(t *testing.T) {
	root := fakeProc(t, map[int][]string{1: {"/pause"}, 7: {"envoy", "-c", "a"}, 9: {"envoy", "-c", "b"}})
	os.WriteFile(filepath.Join(root, "7", "stat"), []byte("7 (envoy) Z 1 7 7 0 -1"), 0o644)
	os.WriteFile(filepath.Join(root, "9", "stat"), []byte("9 (envoy) S 1 9 9 0 -1"), 0o644)
	if p, err := Find(root); err != nil || p.PID != 9 {
		t.Fatalf("Find = %+v, %v; want pid 9 (7 is a zombie)", p, err)
	}
	os.WriteFile(filepath.Join(root, "9", "stat"), []byte("9 (en) Z) X 1 9 9 0 -1"), 0o644)
	if p, err := Find(root); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Find = %+v, %v; want ErrNotFound (both exited)", p, err)
	}
}

func TestExited(t *testing.T) {
	for stat, want := range map[string]bool{
		"12 (envoy) Z 1": true, "12 (envoy) X 1": true, "12 (envoy) S 1": false, "12 (envoy) R 1": false,
		"12 (a) Z) S 1": false, "12 (a) S) Z 1": true, "": false, "12 (envoy)": false,
	} {
		if got := exited([]byte(stat)); got != want {
			t.Errorf("exited(%q) = %v, want %v", stat, got, want)
		}
	}
}

func FuzzSplitCmdline(f *testing.F) {
	f.Add([]byte("envoy\x00-c\x00/etc/envoy.yaml\x00"))
	f.Add([]byte(""))
	f.Add([]byte("\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		args := splitCmdline(b)
		if strings.Join(args, "\x00") != strings.TrimSuffix(string(b), "\x00") {
			t.Fatalf("splitCmdline(%q) = %q: joined back it differs", b, args)
		}
	})
}

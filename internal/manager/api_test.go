package manager

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestParseListen(t *testing.T) {
	tests := []struct {
		in      string
		want    ListenAddress
		wantErr string
	}{
		{in: ":8090", want: ListenAddress{"tcp", ":8090"}},
		{in: "127.0.0.1:0", want: ListenAddress{"tcp", "127.0.0.1:0"}},
		{in: "[::1]:8090", want: ListenAddress{"tcp", "[::1]:8090"}},
		{in: "0.0.0.0:65535", want: ListenAddress{"tcp", "0.0.0.0:65535"}},
		{in: "unix:///run/sm/api.sock", want: ListenAddress{"unix", "/run/sm/api.sock"}},
		{in: ":99999", wantErr: "port must be a number"},
		{in: ":-1", wantErr: "port must be a number"},
		{in: ":http", wantErr: "port must be a number"},
		{in: "localhost:8090", wantErr: "must be an IP address"},
		{in: "999.1.1.1:8090", wantErr: "must be an IP address"},
		{in: "nowhere", wantErr: "want [IP]:PORT"},
		{in: "unix://relative.sock", wantErr: "absolute path"},
	}
	for _, tt := range tests {
		got, err := ParseListen(tt.in)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("ParseListen(%q) = %v, %v; want error %q", tt.in, got, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || got != tt.want):
			t.Errorf("ParseListen(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestRemoveStaleSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "sm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	live := filepath.Join(dir, "live.sock")
	ln, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	stale := filepath.Join(dir, "stale.sock")
	sl, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	sl.(*net.UnixListener).SetUnlinkOnClose(false) // a process that died: its socket file stays
	sl.Close()

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	subdir := filepath.Join(dir, "dir")
	if err := os.Mkdir(subdir, 0o755); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		path    string
		wantErr string // "" = removed (or absent) and free to listen on
	}{
		{filepath.Join(dir, "absent.sock"), ""},
		{stale, ""},
		{live, "a running process answers"},
		{file, "is a regular file"},
		{subdir, "is a directory"},
	}
	for _, tt := range tests {
		err := removeStaleSocket(tt.path)
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v, want nil", filepath.Base(tt.path), err)
			}
			if _, err := os.Lstat(tt.path); !os.IsNotExist(err) {
				t.Errorf("%s still exists", filepath.Base(tt.path))
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: %v, want error %q", filepath.Base(tt.path), err, tt.wantErr)
		}
		if _, err := os.Lstat(tt.path); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(tt.path), err)
		}
	}
	// The live socket still answers.
	c, err := net.Dial("unix", live)
	if err != nil {
		t.Fatalf("live socket taken over: %v", err)
	}
	c.Close()
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		path, want, wantErr string
	}{
		{write("ok", "s3cret\n"), "s3cret", ""},
		{write("spaces", "  s3cret  "), "s3cret", ""},
		{write("empty", "\n"), "", "is empty"},
		{write("lines", "a\nb\n"), "", "more than one line"},
		{write("big", strings.Repeat("x", maxTokenFile+1)), "", "larger than"},
		{filepath.Join(dir, "absent"), "", "no such file"},
	}
	for _, tt := range tests {
		tf, err := ReadToken(tt.path)
		got := tf.Secret
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: %q, %v; want error %q", filepath.Base(tt.path), got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: %q, %v; want %q", filepath.Base(tt.path), got, err, tt.want)
		}
	}
}

// A world-readable token file is accepted with a warning that says why it matters and how to mount it; a
// file readable by its owner (and group: a non-root container reads a Secret through fsGroup) is not.
func TestTokenFileModeWarning(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		mode os.FileMode
		warn bool
	}{{0o600, false}, {0o400, false}, {0o440, false}, {0o640, false}, {0o644, true}, {0o604, true}} {
		path := filepath.Join(dir, fmt.Sprintf("token-%o", tt.mode))
		if err := os.WriteFile(path, []byte("s3cret"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, tt.mode); err != nil {
			t.Fatal(err)
		}
		tf, err := ReadToken(path)
		if err != nil {
			t.Fatalf("mode %o: %v", tt.mode, err)
		}
		var buf bytes.Buffer
		tf.WarnMode(slog.New(slog.NewTextHandler(&buf, nil)))
		warned := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), "readable by every user") &&
			strings.Contains(buf.String(), fmt.Sprintf("mode=%#o", tt.mode)) && strings.Contains(buf.String(), "defaultMode 0400")
		if warned != tt.warn {
			t.Errorf("token file mode %o: log %q, want a warning %v", tt.mode, buf.String(), tt.warn)
		}
	}
}

// FuzzParseListen: never panics, and what it accepts is a unix path or an IP-literal (or empty) host with a
// port from 0 to 65535, which net.Listen takes without a DNS lookup.
func FuzzParseListen(f *testing.F) {
	for _, s := range []string{":8090", "127.0.0.1:0", "[::1]:1", "unix:///a.sock", ":99999", "999.1.1.1:1", "localhost:80", "[fe80::1%eth0]:80", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		la, err := ParseListen(s)
		if err != nil {
			return
		}
		switch la.Network() {
		case "unix":
			if !strings.HasPrefix(la.Addr(), "/") {
				t.Errorf("%q: unix path %q not absolute", s, la.Addr())
			}
		case "tcp":
			host, port, err := net.SplitHostPort(la.Addr())
			if err != nil {
				t.Fatalf("%q accepted but not host:port: %v", s, err)
			}
			if host != "" && net.ParseIP(strings.Split(host, "%")[0]) == nil {
				t.Errorf("%q: host %q is not an IP literal", s, host)
			}
			if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
				t.Errorf("%q: port %q out of range", s, port)
			}
		default:
			t.Errorf("%q: network %q", s, la.Network())
		}
	})
}

package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manager"
)

// Address problems are usage errors, found before anything starts: exit 2 and one line.
func TestAddressUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--listen=:99999"},
		{"serve", "--listen", "999.1.1.1:8090"},
		{"serve", "--listen", "localhost:8090"},
		{"serve", "--metrics-listen", "localhost:9090"},
		{"serve", "--listen", "127.0.0.1:8090", "--metrics-listen", "127.0.0.1:8090"},
		{"serve", "--max-waiters", "0"},
		{"serve", "--max-waiters", "100", "--max-connections", "100"},
		{"serve", "--token-file", "/nonexistent/token"},
		{"run", "--listen", ":99999", "--", "true"},
		{"run", "--metrics-listen", "127.0.0.1:9090", "--", "true"},
		{"drain", "--via", "http://localhost:8090"},
		{"drain", "--token-file", "/x"},
		{"resume", "--force"},
		{"resume", "--via", "nowhere"},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), args, nil, &stdout, &stderr)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if code != ExitUsage || len(lines) != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line", args, code, stderr.String())
		}
	}
}

// A token file that is not a regular file is refused at once, naming what it is: a FIFO would otherwise block
// the start-up until someone writes to it. A symbolic link to a regular file (a Secret volume) is read.
func TestTokenFileNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "..data-token")
	if err := os.WriteFile(target, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "token")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, wantErr string }{
		{fifo, "is a named pipe (FIFO), not a regular file"},
		{dir, "is a directory, not a regular file"},
		{"/dev/null", "is a device, not a regular file"},
	} {
		var stdout, stderr bytes.Buffer
		done := make(chan int, 1)
		go func() {
			done <- Run(context.Background(), []string{"serve", "--token-file", tt.path}, nil, &stdout, &stderr)
		}()
		select {
		case code := <-done:
			if code != ExitUsage || !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("serve --token-file %s: exit %d, stderr %q; want exit 2 and %q", tt.path, code, stderr.String(), tt.wantErr)
			}
		case <-time.After(10 * time.Second): // a FIFO blocks open(2) for ever: no event to wait for
			t.Fatalf("serve --token-file %s: still starting after 10s (blocked reading the token)", tt.path)
		}
	}
	if tf, err := manager.ReadToken(link); err != nil || tf.Secret != "s3cret" {
		t.Errorf("token through a symbolic link: %q, %v; want s3cret", tf.Secret, err)
	}
}

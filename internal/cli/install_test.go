package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// runInstallCLI runs `shutdown-manager install ARGS…` in-process and returns the exit code and the log.
func runInstallCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Run(t.Context(), append([]string{"install"}, args...), nil, &stdout, &stderr)
	return code, stdout.String() + stderr.String()
}

func TestInstallCopiesItself(t *testing.T) {
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Skipf("no /proc/self/exe: %v", err)
	}
	dir := t.TempDir()
	dst := filepath.Join(dir, "shutdown-manager")
	for run := 1; run <= 2; run++ { // the second run replaces the first copy: a restarted init container
		code, log := runInstallCLI(t, dir)
		if code != ExitOK {
			t.Fatalf("run %d: exit %d, want 0: %s", run, code, log)
		}
		lines := strings.Split(strings.TrimSpace(log), "\n")
		var entry struct{ Msg, Path, Mode string }
		if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &entry) != nil || entry.Msg != "installed" || entry.Path != dst || entry.Mode != "0555" {
			t.Errorf("run %d: log = %q, want one JSON line: installed, path %s, mode 0555", run, log, dst)
		}
		fi, err := os.Stat(dst)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != 0o555 {
			t.Errorf("run %d: mode %v, want -r-xr-xr-x", run, fi.Mode())
		}
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, self) {
			t.Errorf("run %d: the copy (%d bytes) differs from the running binary (%d bytes)", run, len(got), len(self))
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			t.Errorf("run %d: DIR holds %d entries, want only shutdown-manager (no temporary file left)", run, len(entries))
		}
	}
}

func TestInstallErrors(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(tmp, "missing")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"missing dir", []string{missing}, ExitFailure, "installing into " + missing + ": stat " + missing + ": no such file or directory"},
		{"not a dir", []string{file}, ExitFailure, "installing into " + file + ": " + file + " is not a directory"},
		{"no dir", nil, ExitUsage, "want one argument, the directory to install into (got 0)"},
		{"two dirs", []string{tmp, tmp}, ExitUsage, "(got 2)"},
		{"bad flag", []string{"--nope", tmp}, ExitUsage, "flag provided but not defined: --nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, log := runInstallCLI(t, tt.args...)
			if code != tt.wantCode || !strings.Contains(log, tt.want) {
				t.Errorf("exit %d, output %q; want exit %d and %q", code, log, tt.wantCode, tt.want)
			}
		})
	}
	code, out := runInstallCLI(t, "-h")
	if code != ExitOK || !strings.Contains(out, "Usage: shutdown-manager install [FLAGS] DIR") {
		t.Errorf("install -h: exit %d, %q", code, out)
	}
}

// TestInstallAsNonRoot runs install as UID 65532 (the image's user) in a child process: into a directory
// it owns (an emptyDir) it works; into a root-owned one it fails, naming the directory. When the test does
// not run as root, it uses its own UID and a directory made read-only instead.
func TestInstallAsNonRoot(t *testing.T) {
	if os.Getenv("SHUTDOWN_MANAGER_INSTALL_CHILD") == "1" {
		t.Skip("the child's own run of this test")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A directory tree any UID can traverse, holding a copy of the test binary any UID can execute.
	base, err := os.MkdirTemp("", "sm-install-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(base, "cli.test")
	copyFile(t, self, exe)
	writable, readOnly := filepath.Join(base, "volume"), filepath.Join(base, "root-owned")
	for _, d := range []string{writable, readOnly} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65532, Gid: 65532}
		if err := os.Chown(writable, 65532, 65532); err != nil {
			t.Fatal(err)
		}
	} else if err := os.Chmod(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}

	child := func(dir string) (int, string) {
		cmd := exec.CommandContext(t.Context(), exe, "-test.run=^TestInstallChild$", "-test.v")
		cmd.Env = append(os.Environ(), "SHUTDOWN_MANAGER_INSTALL_CHILD=1", "SHUTDOWN_MANAGER_INSTALL_DIR="+dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("running %s: %v", exe, err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if code, out := child(writable); code != 0 {
		t.Errorf("install into a directory the user owns: exit %d:\n%s", code, out)
	} else if fi, err := os.Stat(filepath.Join(writable, "shutdown-manager")); err != nil || fi.Mode() != 0o555 {
		t.Errorf("after install into %s: %v, %v; want a file with mode -r-xr-xr-x", writable, fi, err)
	}
	code, out := child(readOnly)
	if want := "installing into " + readOnly + ": open " + readOnly + "/.shutdown-manager.tmp-"; code == 0 || !strings.Contains(out, want) || !strings.Contains(out, "permission denied") {
		t.Errorf("install into a directory the user cannot write: exit %d, want non-zero and %q … permission denied:\n%s", code, want, out)
	}
}

// TestInstallChild is TestInstallAsNonRoot's child: it runs the install command on the directory it is given.
func TestInstallChild(t *testing.T) {
	dir := os.Getenv("SHUTDOWN_MANAGER_INSTALL_DIR")
	if os.Getenv("SHUTDOWN_MANAGER_INSTALL_CHILD") != "1" || dir == "" {
		t.Skip("run by TestInstallAsNonRoot")
	}
	if code, log := runInstallCLI(t, dir); code != ExitOK {
		t.Fatalf("exit %d (uid %d): %s", code, os.Geteuid(), log)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

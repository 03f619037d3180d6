package image

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// containerd is a private containerd started by a test: its own root, state, socket and config in a temp
// directory, no CRI plugin, stopped by its PID when the test ends.
type containerd struct {
	address string // the gRPC socket
	log     string // containerd's log file
}

// needTool returns the path of a real binary; a missing one fails under CI=true and skips elsewhere.
func needTool(t *testing.T, name, hint string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed (CI=true: a missing real part is a failure): %s", name, hint)
	}
	t.Skipf("%s is not installed: %s", name, hint)
	return ""
}

// startContainerd starts containerd as root with everything under a new temp directory. The directory's
// name is short because a unix socket's path is limited to 107 bytes.
func startContainerd(t *testing.T) containerd {
	t.Helper()
	bin := needTool(t, "containerd", "apt-get install containerd (Debian's package; .ci/run installs it)")
	needTool(t, "ctr", "apt-get install containerd")
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("containerd needs root (CI=true: a missing real part is a failure)")
		}
		t.Skip("containerd needs root to mount its snapshots")
	}
	dir, err := os.MkdirTemp("", "sm-ctr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := containerd{address: filepath.Join(dir, "c.sock"), log: filepath.Join(dir, "containerd.log")}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
# Images only: no CRI (it would want CNI and a sandbox image), no listener but our socket.
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = %q # else /opt/containerd
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.address, c.address+".ttrpc", filepath.Join(dir, "opt"))
	configPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(c.log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config", configPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second // then SIGKILL
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting containerd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logFile.Close() }()
	t.Cleanup(func() {
		cancel()
		<-exited
		// Snapshots may still be mounted if containerd was killed: unmount what is under our root only.
		if out, err := os.ReadFile("/proc/self/mounts"); err == nil {
			for line := range strings.Lines(string(out)) {
				if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
					_ = syscall.Unmount(f[1], syscall.MNT_DETACH)
				}
			}
		}
	})
	// Ready when the socket answers; every wait is bounded by the process's exit or a deadline.
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if conn, err := net.Dial("unix", c.address); err == nil {
			conn.Close()
			return c
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("containerd exited before serving: %v (log: %s)\n%s", err, c.log, readTail(c.log))
		case <-deadline.C:
			t.Fatalf("containerd did not serve %s within 30s (log: %s)", c.address, c.log)
		case <-tick.C:
		}
	}
}

// ctr runs `ctr --address SOCK -n NS ARGS…` and returns its standard output.
func (c containerd) ctr(t *testing.T, args ...string) []byte {
	t.Helper()
	args = append([]string{"--address", c.address, "-n", "shutdown-manager-test"}, args...)
	var stderr bytes.Buffer
	// Not t.Context(): cleanups run ctr too, after it is cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ctr", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ctr %s: %v: %s (containerd's log: %s)", strings.Join(args, " "), err, stderr.Bytes(), c.log)
	}
	return out
}

func readTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// TestArchiveImportsIntoContainerd imports the docker archive `make image` writes into a real containerd with
// `ctr images import`, as the README tells users without a registry, and checks what containerd stored: the
// name, the config (user, entrypoint, platform, labels) and the unpacked file (mode 0555, owner 0:0, content).
func TestArchiveImportsIntoContainerd(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("containerd runs on Linux")
	}
	c := startContainerd(t)
	bins, idx := realIndex(t)
	img, err := ImageFor(idx, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteArchive(tarPath, "shutdown-manager:"+testMetadata.Version, img); err != nil {
		t.Fatal(err)
	}
	out := c.ctr(t, "images", "import", tarPath)
	t.Logf("ctr images import: %s", bytes.TrimSpace(out))

	// containerd normalises the short name.
	ref := "docker.io/library/shutdown-manager:" + testMetadata.Version
	if got := strings.Fields(string(c.ctr(t, "images", "ls", "-q"))); len(got) != 1 || got[0] != ref {
		t.Fatalf("ctr images ls -q = %q, want [%s]", got, ref)
	}
	check := string(c.ctr(t, "images", "check"))
	t.Logf("ctr images check:\n%s", check)
	if !strings.Contains(check, "complete") || !strings.HasSuffix(strings.TrimSpace(check), "true") {
		t.Errorf("ctr images check: want complete and unpacked (true):\n%s", check)
	}

	// The manifest containerd recorded, then the config it points at.
	var manifestDigest string
	for line := range strings.Lines(string(c.ctr(t, "images", "ls"))) {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == ref {
			manifestDigest = f[2]
		}
	}
	if manifestDigest == "" {
		t.Fatalf("ctr images ls: no line for %s", ref)
	}
	var manifest v1.Manifest
	if err := json.Unmarshal(c.ctr(t, "content", "get", manifestDigest), &manifest); err != nil {
		t.Fatalf("decoding the manifest %s: %v", manifestDigest, err)
	}
	wantConfig, _ := img.ConfigName()
	if manifest.Config.Digest != wantConfig || len(manifest.Layers) != 1 {
		t.Errorf("manifest = config %s, %d layers; want config %s, 1 layer", manifest.Config.Digest, len(manifest.Layers), wantConfig)
	}
	var cf v1.ConfigFile
	if err := json.Unmarshal(c.ctr(t, "content", "get", manifest.Config.Digest.String()), &cf); err != nil {
		t.Fatalf("decoding the config: %v", err)
	}
	checkConfig(t, &cf, runtime.GOARCH, testMetadata)

	// The unpacked layer: a read-only view of its snapshot (chain ID = diff ID for one layer) is a bind
	// mount of the snapshot's directory. The view is printed as it is made: nothing references it, so
	// containerd's garbage collector may remove it at any time after (its directory is the layer's, kept).
	var mounts []struct {
		Type, Source string
	}
	view := c.ctr(t, "snapshots", "view", "--mounts", "sm-test-view", cf.RootFS.DiffIDs[0].String())
	if err := json.Unmarshal(view, &mounts); err != nil || len(mounts) != 1 || mounts[0].Type != "bind" {
		t.Fatalf("ctr snapshots view --mounts printed %s (%v), want one bind mount of the snapshot's directory", view, err)
	}
	root := mounts[0].Source
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "shutdown-manager" {
		t.Errorf("unpacked image root holds %v, want only shutdown-manager", entries)
	}
	path := filepath.Join(root, "shutdown-manager")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode() != 0o555 || st.Uid != 0 || st.Gid != 0 {
		t.Errorf("unpacked %s: mode %v owner %d:%d, want -r-xr-xr-x 0:0", path, fi.Mode(), st.Uid, st.Gid)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bins {
		if b.Arch == runtime.GOARCH && !bytes.Equal(data, b.Data) {
			t.Errorf("unpacked binary differs from the one built")
		}
	}
}

package kubetest

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A test that needs the binaries waits while scripts/kube-binaries.sh builds them (it holds the cache
// directory's lock meanwhile), and finds them once the build has ended; without a build, it does not wait.
func TestAwaitBuild(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if AwaitBuild(bin, []string{"etcd"}, io.Discard) {
		t.Fatal("waited without a lock file")
	}
	lock, err := os.Create(filepath.Join(dir, ".lock"))
	if err != nil {
		t.Fatal(err)
	}
	if AwaitBuild(bin, []string{"etcd"}, io.Discard) {
		t.Fatal("waited on a lock nobody holds")
	}
	// What the script does: flock 9 (exclusive) on the lock, build, move the binary in, exit (the lock goes).
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	r, w := io.Pipe()
	waited := make(chan bool)
	go func() {
		ok := AwaitBuild(bin, []string{"etcd"}, w)
		w.Close()
		waited <- ok
	}()
	// Once it says it waits, the build ends: the binary moved in, the lock released.
	if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
		t.Fatalf("AwaitBuild returned while the build held the lock, without saying it waits: %v", err)
	}
	go io.Copy(io.Discard, r)
	if err := os.WriteFile(filepath.Join(bin, "etcd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	lock.Close()
	if !<-waited {
		t.Error("AwaitBuild said it waited, then that it did not")
	}
	if m := missingIn(bin, []string{"etcd"}); len(m) != 0 {
		t.Errorf("missing after the build: %v", m)
	}
}

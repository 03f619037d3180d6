package kubetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EnvBinDir names the environment variable that, when set, is the directory the Kubernetes binaries are taken
// from, instead of the cache scripts/kube-binaries.sh builds into.
const EnvBinDir = "KUBE_BIN_DIR"

// script builds the binaries and knows the cache directory; it is found by walking up from the working directory.
const script = "scripts/kube-binaries.sh"

// scriptTimeout bounds `kube-binaries.sh --print-dir`, which only reads tools/go.mod.
const scriptTimeout = 30 * time.Second

// controlPlane are the binaries Start runs.
var controlPlane = []string{"etcd", "kube-apiserver", "kubectl"}

// BinDir returns the directory holding every named binary (etcd, kube-apiserver, kubectl, kubelet, ...): $KUBE_BIN_DIR
// if that is set, else the cache directory of scripts/kube-binaries.sh for the versions pinned in tools/go.mod.
// Its error names what is missing, where, and the command that builds it.
func BinDir(names ...string) (string, error) {
	dir := os.Getenv(EnvBinDir)
	from := "$" + EnvBinDir
	if dir == "" {
		var err error
		if dir, err = cacheDir(); err != nil {
			return "", err
		}
		from = "cache"
	}
	missing := missingIn(dir, names)
	if len(missing) > 0 && from == "cache" && AwaitBuild(dir, missing, os.Stderr) {
		missing = missingIn(dir, names)
	}
	if len(missing) > 0 {
		if from == "$"+EnvBinDir {
			return "", fmt.Errorf("no %s in %s ($%s): set it to a directory that has them, or unset it and run `%s`",
				strings.Join(missing, ", "), dir, EnvBinDir, BuildCommand(names...))
		}
		return "", fmt.Errorf("no %s in %s (the cache of %s): build them with `%s`, or set $%s to a directory that has them",
			strings.Join(missing, ", "), dir, script, BuildCommand(names...), EnvBinDir)
	}
	return dir, nil
}

// missingIn returns the names that are not executable files in dir.
func missingIn(dir string, names []string) []string {
	var missing []string
	for _, n := range names {
		fi, err := os.Stat(filepath.Join(dir, n))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, n)
		}
	}
	return missing
}

// buildWait bounds how long BinDir waits for a build in progress: a cold build of the newest line took 1,178 s and
// 1,519 s beside make test's other lanes on 2 CPUs (docs/development.md); make integration's alarm (60m) covers it.
const buildWait = 40 * time.Minute

// AwaitBuild waits while scripts/kube-binaries.sh builds into the cache directory bin is in (it holds that
// directory's lock while it builds): `make test` builds the binaries beside the tiers that need none, and a test
// that needs them waits for them rather than failing. It says on log that it waits, and reports whether it did.
func AwaitBuild(bin string, missing []string, log io.Writer) bool {
	f, err := os.Open(filepath.Join(filepath.Dir(bin), ".lock"))
	if err != nil {
		return false // no build has ever run here
	}
	defer f.Close()
	deadline := time.Now().Add(buildWait)
	for waited := false; ; waited = true {
		// A shared lock is refused while the script holds its exclusive one; closing f releases ours.
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
			return waited
		} else if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			return waited
		}
		if !waited {
			fmt.Fprintf(log, "kubetest: waiting up to %s for the build in progress of %s in %s\n", buildWait, strings.Join(missing, ", "), bin)
		}
		time.Sleep(time.Second)
	}
}

// BuildCommand returns the shell command that builds the named binaries into the cache: `make kube` for the
// control plane, the script with KUBE_BINARIES for any other set.
func BuildCommand(names ...string) string {
	for _, n := range names {
		if !slices.Contains(controlPlane, n) {
			return fmt.Sprintf("KUBE_BINARIES=%q %s", strings.Join(names, " "), script)
		}
	}
	return "make kube"
}

// BinDirTB returns BinDir(names...). Without the binaries it fails tb when the environment variable CI is "true"
// (CI must never pass by not testing) and skips it otherwise; both say how to build them.
func BinDirTB(tb testing.TB, names ...string) string {
	tb.Helper()
	dir, err := BinDir(names...)
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("CI=true and no Kubernetes binaries: %v", err)
		}
		tb.Skipf("no Kubernetes binaries: %v", err)
	}
	return dir
}

// cacheDir asks scripts/kube-binaries.sh where its cache is, so that the key (the pinned versions) is computed in
// one place.
func cacheDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, script), "--print-dir")
	cmd.Stderr = &stderr
	cmd.WaitDelay = time.Second // a child left behind must not hold the pipes open
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("asking %s for its cache directory: %w: %s", script, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// RepoRoot walks up from the working directory (a test's package directory) to the directory holding the script.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, script)); err == nil {
			return d, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("finding the repository root: %w", err)
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no %s above %s: set $%s to the directory holding the Kubernetes binaries", script, dir, EnvBinDir)
		}
	}
}

//go:build e2e && linux

package e2e

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
)

func TestSplitRule(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{`-A INPUT -j KUBE-FIREWALL`, []string{"-A", "INPUT", "-j", "KUBE-FIREWALL"}},
		{`-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS`,
			[]string{"-A", "INPUT", "-m", "comment", "--comment", "kubernetes health check service ports", "-j", "KUBE-NODEPORTS"}},
		{`-A X --comment "a \"q\"" -j Y`, []string{"-A", "X", "--comment", `a "q"`, "-j", "Y"}},
	} {
		if got := splitRule(tc.line); !slices.Equal(got, tc.want) {
			t.Errorf("splitRule(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
}

// The host check fails on a mount left behind, names it, and is quiet once it is gone.
func TestSnapshotSeesALeakedMount(t *testing.T) {
	if os.Geteuid() != 0 {
		unavailable(t, "not root (mounting needs it)")
	}
	dir := t.TempDir()
	before := takeSnapshot([]string{dir})
	if out, err := exec.Command("mount", "-t", "tmpfs", "smgr-leak", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	diff := before.diff(takeSnapshot([]string{dir}))
	_ = syscall.Unmount(dir, syscall.MNT_DETACH)
	want := "+ mount: " + dir + " (tmpfs smgr-leak)"
	if !slices.Contains(diff, want) {
		t.Errorf("diff after a leaked mount = %q, want it to contain %q", diff, want)
	}
	if diff := before.diff(takeSnapshot([]string{dir})); len(diff) != 0 {
		t.Errorf("diff after the unmount = %q, want none", diff)
	}
}

//go:build e2e && linux

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
)

// The host state the cluster changes, recorded before and put back after (see LOCAL-KUBERNETES.md, which lists
// what kubelet, kube-proxy, the CNI plugins and containerd leave behind on these machines).

// sysctls are the knobs kubelet (panic, panic_on_oops, overcommit_memory, panic_on_oom, keys), the bridge plugin
// and the harness (ip_forward) or kube-proxy (route_localnet) may change; each is restored if it changed.
var sysctls = []string{
	"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "vm/panic_on_oom",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward", "net/ipv4/conf/all/route_localnet", "net/bridge/bridge-nf-call-iptables",
}

// hostPaths are directories that kubelet, containerd or the CNI plugins create at fixed places whatever their
// configuration says: each one that did not exist before the cluster is removed after it.
var hostPaths = []string{
	"/var/lib/cni", "/var/log/containers", "/var/log/pods", "/run/nri",
	"/run/containerd", "/opt/containerd", "/var/lib/kubelet", "/usr/libexec/kubernetes", "/etc/cni/net.d",
	"/var/lib/containerd", "/etc/kubernetes",
}

// hostState is what the harness found before it changed anything.
type hostState struct {
	sysctls     map[string]string
	missing     []string            // hostPaths that did not exist
	kubeChains  map[string][]string // "iptables filter" -> KUBE-* chains that existed
	nftTables   []string            // `nft list tables` lines
	cgroupRoots []string            // /sys/fs/cgroup/<hierarchy> without a kubepods directory
}

func recordHost() (*hostState, error) {
	h := &hostState{sysctls: map[string]string{}, kubeChains: map[string][]string{}}
	for _, s := range sysctls {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil {
			h.sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err != nil {
			h.missing = append(h.missing, p)
		}
	}
	for _, ipt := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle"} {
			h.kubeChains[ipt+" "+table] = kubeChains(ipt, table)
		}
	}
	h.nftTables = nftTables()
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, r := range roots {
		if _, err := os.Stat(filepath.Join(r, "kubepods")); err != nil {
			h.cgroupRoots = append(h.cgroupRoots, r)
		}
	}
	return h, nil
}

// restoreSysctls writes back every recorded value that changed; it returns what it restored.
func (h *hostState) restoreSysctls() (restored []string, errs []error) {
	for _, s := range sysctls {
		old, ok := h.sysctls[s]
		if !ok {
			continue
		}
		b, err := os.ReadFile("/proc/sys/" + s)
		if err != nil || strings.TrimSpace(string(b)) == old {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+s, []byte(old), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s to %s: %w", s, old, err))
			continue
		}
		restored = append(restored, fmt.Sprintf("%s %s->%s", s, strings.TrimSpace(string(b)), old))
	}
	return restored, errs
}

func setSysctl(name, value string) error {
	if err := os.WriteFile("/proc/sys/"+name, []byte(value), 0o644); err != nil {
		return fmt.Errorf("setting %s=%s: %w", name, value, err)
	}
	return nil
}

// kubeChains lists the KUBE-* chains of one table.
func kubeChains(ipt, table string) []string {
	out, err := exec.Command(ipt, "-w", "-t", table, "-S").Output()
	if err != nil {
		return nil
	}
	var chains []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "-N" && strings.HasPrefix(f[1], "KUBE-") {
			chains = append(chains, f[1])
		}
	}
	return chains
}

// removeKubeChains deletes the KUBE-* chains kubelet and kube-proxy created (not those that existed before):
// first every rule that jumps to one, then the chains. Kubelet re-creates KUBE-FIREWALL while it runs, so this runs
// after kubelet has stopped.
func (h *hostState) removeKubeChains() []error {
	var errs []error
	for _, ipt := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle"} {
			var ours []string
			for _, c := range kubeChains(ipt, table) {
				if !slices.Contains(h.kubeChains[ipt+" "+table], c) {
					ours = append(ours, c)
				}
			}
			if len(ours) == 0 {
				continue
			}
			out, _ := exec.Command(ipt, "-w", "-t", table, "-S").Output()
			for _, line := range strings.Split(string(out), "\n") {
				f := splitRule(line)
				if len(f) < 2 || f[0] != "-A" {
					continue
				}
				if i := slices.Index(f, "-j"); i >= 0 && i+1 < len(f) && slices.Contains(ours, f[i+1]) {
					f[0] = "-D"
					if b, err := exec.Command(ipt, append([]string{"-w", "-t", table}, f...)...).CombinedOutput(); err != nil {
						errs = append(errs, fmt.Errorf("%s -t %s %s: %w: %s", ipt, table, strings.Join(f, " "), err, b))
					}
				}
			}
			for _, op := range []string{"-F", "-X"} {
				for _, c := range ours {
					if b, err := exec.Command(ipt, "-w", "-t", table, op, c).CombinedOutput(); err != nil {
						errs = append(errs, fmt.Errorf("%s -t %s %s %s: %w: %s", ipt, table, op, c, err, b))
					}
				}
			}
		}
	}
	return errs
}

func nftTables() []string {
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		return nil
	}
	var tables []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			tables = append(tables, l)
		}
	}
	return tables
}

// removeNftTables deletes the nft tables that appeared since recordHost (iptables-nft creates its tables on first
// use; kube-proxy may create its own).
func (h *hostState) removeNftTables() []error {
	var errs []error
	for _, t := range nftTables() {
		if slices.Contains(h.nftTables, t) {
			continue
		}
		f := strings.Fields(t) // "table ip filter"
		if b, err := exec.Command("nft", append([]string{"delete"}, f...)...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("nft delete %s: %w: %s", t, err, b))
		}
	}
	return errs
}

// removeCgroups removes the kubepods cgroups (deepest first) in every hierarchy that had none.
func (h *hostState) removeCgroups() []error {
	var errs []error
	for _, r := range h.cgroupRoots {
		top := filepath.Join(r, "kubepods")
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !os.IsNotExist(err) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errs
}

// removePaths removes the hostPaths that did not exist before, after unmounting what is mounted under them (the
// network namespaces in /var/run/netns are bind mounts).
func (h *hostState) removePaths() []error {
	var errs []error
	for _, p := range h.missing {
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		errs = append(errs, unmountUnder(p)...)
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
		}
	}
	return errs
}

// unmountUnder unmounts (lazily, deepest first) every mount point at or under dir.
func unmountUnder(dir string) []error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []error{err}
	}
	var points []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			points = append(points, mp)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, mp := range points {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
		}
	}
	return errs
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// shimsOf returns the PIDs of containerd-shim processes whose command line names socket (ours, not another
// containerd's).
func shimsOf(socket string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && strings.Contains(filepath.Base(args[0]), "containerd-shim") && slices.Contains(args, socket) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// splitRule splits a line of `iptables -S` into arguments: words, and double-quoted strings (comments) as one
// argument without their quotes.
func splitRule(line string) []string {
	var args []string
	var cur strings.Builder
	in, have := false, false
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == '\\' && in && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case ch == '"':
			in, have = !in, true
		case ch == ' ' && !in:
			if have {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(ch)
			have = true
		}
	}
	if have {
		args = append(args, cur.String())
	}
	return args
}

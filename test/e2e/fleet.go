//go:build e2e && linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
	"golang.org/x/sys/unix"
)

// More nodes on this machine (make e2e-fleet). Each extra node is a network namespace of its own, joined to the
// host by a veth pair, with its own containerd (root, state, socket), CNI bridge and pod subnet, kubelet (root
// directory, cgroup root, name, address) and kube-proxy (its iptables rules live in the node's namespace), all
// registered with the first node's control plane.
//
// The namespace is not made with `ip netns add` (it bind-mounts the host-wide /run/netns onto itself: see
// containerdConfig) but with `unshare --net=FILE`, FILE under the node's directory: unmounting FILE and ending the
// node's processes frees the namespace, and with it its veth end, bridge, routes and rules.
//
// Addresses, for node k (2, 3, ...): pod subnet 10.213.(k-1).0/24 whose first address is the node's (its bridge,
// as on the first node); the link 10.213.254.4k/30, .4k+1 on the host, .4k+2 in the node. The host routes each
// node's pod subnet to it; a node routes everything else to the host. Pods on different nodes reach each other
// through the host, which forwards between the first node's bridge and the nodes' veths, and nothing else.

// fleetVethPrefix names the host ends of the nodes' veth pairs (smgre2en2, smgre2en3, ...).
const fleetVethPrefix = "smgre2en"

// nodeBridge is each extra node's CNI bridge, inside its own namespace.
const nodeBridge = "smgrbr0"

// FleetCIDR covers every node's pod subnet: the extra nodes' kube-proxies count it as the cluster's.
const FleetCIDR = "10.213.0.0/22"

// Node is one extra node.
type Node struct {
	Name, IP, PodCIDR string
	Dir               string
	netns             string // the bind-mounted namespace file
	veth              string // the host end
	hostIP, linkIP    string
	cgroup            string // the kubelet's cgroup root, made in every v1 hierarchy
	socket            string
	containerd        *testproc.Proc
	kubelet           *testproc.Proc
	kubeProxy         *testproc.Proc
	c                 *Cluster
}

// AddNode starts node k (2, 3, ...) and waits until it is Ready. Its teardown is registered with tb: it runs
// before the first node's (cleanups run last first), while the control plane still answers.
func (c *Cluster) AddNode(ctx context.Context, tb testing.TB, k int) *Node {
	tb.Helper()
	n := &Node{
		Name:    fmt.Sprintf("smgr-e2e-node%d", k),
		IP:      fmt.Sprintf("10.213.%d.1", k-1),
		PodCIDR: fmt.Sprintf("10.213.%d.0/24", k-1),
		Dir:     filepath.Join(c.Dir, fmt.Sprintf("node%d", k)),
		veth:    fmt.Sprintf("%s%d", fleetVethPrefix, k),
		hostIP:  fmt.Sprintf("10.213.254.%d", 4*k+1),
		linkIP:  fmt.Sprintf("10.213.254.%d", 4*k+2),
		cgroup:  fmt.Sprintf("smgr-e2e-node%d", k),
		c:       c,
	}
	if _, err := os.Stat(filepath.Join(cniBinDir, "portmap")); err != nil {
		unavailable(tb, "no CNI portmap plugin in %s (apt-get install containernetworking-plugins): the extra nodes' hostPorts need it", cniBinDir)
	}
	n.netns = filepath.Join(n.Dir, "netns")
	n.socket = filepath.Join(n.Dir, "containerd", "containerd.sock")
	if err := os.MkdirAll(filepath.Join(n.Dir, "logs"), 0o755); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { n.teardown(tb) })
	began := time.Now()
	if err := n.setUpNetwork(); err != nil {
		tb.Fatalf("node %s: the network: %v", n.Name, err)
	}
	if err := n.makeCgroups(); err != nil {
		tb.Fatalf("node %s: cgroups: %v", n.Name, err)
	}
	// The node's containerd trusts the registry's CA as the first node's does (the pods' pull Secret gives the
	// credentials): a pod injected with --image-pull-policy=Always pulls the manager's image from the registry on
	// whichever node it runs.
	if err := c.Registry.writeHostsTOML(certsDir(n.Dir)); err != nil {
		tb.Fatalf("node %s: containerd's hosts.toml for the registry: %v", n.Name, err)
	}
	if err := n.startContainerd(ctx); err != nil {
		tb.Fatalf("node %s: containerd: %v", n.Name, err)
	}
	// The manager's image too, for the peers' pods that name it by tag with IfNotPresent (the takeover rows).
	for _, a := range []string{"images.tar", "manager.tar"} {
		if out, err := n.ctr(ctx, "images", "import", filepath.Join(c.Dir, a)); err != nil {
			tb.Fatalf("node %s: importing %s: %v: %s", n.Name, a, err, out)
		}
	}
	if err := n.startKubelet(); err != nil {
		tb.Fatalf("node %s: kubelet and kube-proxy: %v", n.Name, err)
	}
	if err := poll(ctx, 3*time.Minute, func() error {
		out, err := c.kubectl(ctx, "get", "node", n.Name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err == nil && strings.TrimSpace(out) != "True" {
			err = fmt.Errorf("Ready is %q", out)
		}
		return err
	}); err != nil {
		tb.Fatalf("node %s is not Ready: %v\nkubelet: %s\ncontainerd: %s", n.Name, err, n.kubelet.LogEnd(30), n.containerd.LogEnd(10))
	}
	tb.Logf("node %s (%s, pods %s) Ready in %s", n.Name, n.IP, n.PodCIDR, time.Since(began).Round(time.Millisecond))
	return n
}

// run runs a command, saying what failed.
func run2(args ...string) error {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// in returns args run inside the node's network namespace.
func (n *Node) in(args ...string) []string {
	return append([]string{"nsenter", "--net=" + n.netns, "--"}, args...)
}

func (n *Node) setUpNetwork() error {
	if err := os.WriteFile(n.netns, nil, 0o644); err != nil {
		return err
	}
	steps := [][]string{
		{"unshare", "--net=" + n.netns, "true"},
		n.in("ip", "link", "add", "eth0", "type", "veth", "peer", "name", n.veth, "netns", strconv.Itoa(os.Getpid())),
		n.in("ip", "link", "set", "lo", "up"),
		n.in("ip", "addr", "add", n.linkIP+"/30", "dev", "eth0"),
		n.in("ip", "link", "set", "eth0", "up"),
		n.in("ip", "link", "add", nodeBridge, "type", "bridge"),
		n.in("ip", "addr", "add", n.IP+"/24", "dev", nodeBridge),
		n.in("ip", "link", "set", nodeBridge, "up"),
		n.in("ip", "route", "add", "default", "via", n.hostIP),
		n.in("sysctl", "-q", "-w", "net.ipv4.ip_forward=1"),
		{"ip", "addr", "add", n.hostIP + "/30", "dev", n.veth},
		{"ip", "link", "set", n.veth, "up"},
		{"ip", "route", "add", n.PodCIDR, "via", n.linkIP, "dev", n.veth},
		// Before the first node's DROP rules: between the nodes, and between them and the first node's bridge.
		{"iptables", "-w", "-I", "FORWARD", "1", "-i", n.veth, "-o", Bridge, "-j", "ACCEPT"},
		{"iptables", "-w", "-I", "FORWARD", "1", "-i", Bridge, "-o", n.veth, "-j", "ACCEPT"},
		{"iptables", "-w", "-I", "FORWARD", "1", "-i", n.veth, "-o", fleetVethPrefix + "+", "-j", "ACCEPT"},
	}
	for _, s := range steps {
		if err := run2(s...); err != nil {
			return err
		}
	}
	// kube-proxy's ClusterIP rules see bridged pod traffic only with this (per namespace since Linux 5.3).
	_ = run2(n.in("sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1")...)
	return nil
}

// cgroupHierarchies are the cgroup v1 hierarchies the node's kubelet uses, each given the node's cgroup root.
func cgroupHierarchies() []string {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	var out []string
	for _, r := range roots {
		if filepath.Base(r) == "unified" {
			continue
		}
		if fi, err := os.Lstat(r); err == nil && fi.IsDir() {
			out = append(out, r)
		}
	}
	return out
}

func (n *Node) makeCgroups() error {
	for _, h := range cgroupHierarchies() {
		d := filepath.Join(h, n.cgroup)
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return nil
}

func (n *Node) startContainerd(ctx context.Context) error {
	// hostPorts (Contour's DaemonSet's 80 and 443) work on the extra nodes: portmap's rules stay in the node's
	// namespace and go with it.
	cfgPath, err := writeContainerdConfig(n.Dir, n.socket, nodeBridge, n.PodCIDR, n.IP, portmapPlugin)
	if err != nil {
		return err
	}
	p, err := startProc("containerd", filepath.Join(n.Dir, "logs", "containerd.log"),
		[]string{"PATH=" + n.c.ctrdBin + ":" + os.Getenv("PATH")},
		"nsenter", n.in(filepath.Join(n.c.ctrdBin, "containerd"), "--config", cfgPath)[1:]...)
	if err != nil {
		return err
	}
	n.containerd = p
	return awaitContainerd(ctx, p, n.c.ctrdBin, n.socket)
}

// ctr runs ctr against the node's containerd in the k8s.io namespace.
func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	return ctrAt(ctx, n.c.ctrdBin, n.socket, args...)
}

func (n *Node) startKubelet() error {
	kd := filepath.Join(n.Dir, "kubelet")
	if err := os.MkdirAll(kd, 0o755); err != nil {
		return err
	}
	// Ports: the node's own address and loopback are its own; the first node's ports are free there.
	cfg := fmt.Sprintf(kubeletConfig, n.IP, 10250, 10248, n.socket, filepath.Join(n.Dir, "pod-logs"), filepath.Join(n.Dir, "volume-plugins"),
		NodeIP, ClusterDomain)
	cfg += "cgroupRoot: /" + n.cgroup + "\n"
	cfgPath := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	var err error
	n.kubelet, err = startProc("kubelet", filepath.Join(n.Dir, "logs", "kubelet.log"), nil, "nsenter", n.in(
		filepath.Join(n.c.kubeBin, "kubelet"),
		"--config="+cfgPath,
		"--kubeconfig="+n.c.API.Kubeconfig,
		"--root-dir="+kd,
		"--node-ip="+n.IP,
		"--hostname-override="+n.Name,
		"--v=2",
	)[1:]...)
	if err != nil {
		return err
	}
	pcfg := fmt.Sprintf(kubeProxyConfig, n.c.API.Kubeconfig, n.Name, FleetCIDR, n.IP, 10256, 10249)
	pcfg = strings.Replace(pcfg, "nodePortAddresses: ["+FleetCIDR+"]", "nodePortAddresses: ["+n.PodCIDR+"]", 1)
	pcfgPath := filepath.Join(n.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(pcfgPath, []byte(pcfg), 0o644); err != nil {
		return err
	}
	n.kubeProxy, err = startProc("kube-proxy", filepath.Join(n.Dir, "logs", "kube-proxy.log"), nil, "nsenter",
		n.in(filepath.Join(n.c.kubeBin, "kube-proxy"), "--config="+pcfgPath)[1:]...)
	return err
}

// teardown: the node's pods go (short grace), then its containers, kube-proxy, kubelet, containerd and its shims,
// the mounts under its directory (the namespace file last), its cgroups, its veth and forwarding rules, the Node
// object. The namespace, with its bridge and kube-proxy's rules, goes with its last process and mount.
func (n *Node) teardown(tb testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := n.c
	if n.kubelet != nil && n.kubelet.Running() {
		_, _ = c.kubectl(ctx, "delete", "deployments,replicasets,daemonsets,statefulsets,jobs", "--all", "-A", "--cascade=orphan", "--wait=false")
		_, _ = c.kubectl(ctx, "delete", "pods", "--all", "-A", "--field-selector=spec.nodeName="+n.Name, "--grace-period=1", "--wait=false")
		if err := poll(ctx, 2*time.Minute, func() error {
			out, err := c.kubectl(ctx, "get", "pods", "-A", "--field-selector=spec.nodeName="+n.Name, "-o", "name")
			if err == nil && strings.TrimSpace(out) != "" {
				return fmt.Errorf("pods left: %s", out)
			}
			return err
		}); err != nil {
			tb.Errorf("teardown of %s: the pods did not go: %v", n.Name, err)
		}
		if err := poll(ctx, 2*time.Minute, func() error {
			out, err := n.ctr(ctx, "tasks", "ls", "-q")
			if err == nil && strings.TrimSpace(out) != "" {
				return fmt.Errorf("tasks left: %s", out)
			}
			return err
		}); err != nil {
			tb.Errorf("teardown of %s: the containers did not stop: %v", n.Name, err)
		}
	}
	if n.kubelet != nil && !n.kubelet.Running() {
		tb.Errorf("teardown of %s: its kubelet had exited (%v): %s", n.Name, n.kubelet.Wait(), n.kubelet.LogEnd(10))
		// Nothing will end its pods: their objects go, their containers with containerd below.
		_, _ = c.kubectl(ctx, "delete", "pods", "--all", "-A", "--field-selector=spec.nodeName="+n.Name, "--force", "--grace-period=0")
	}
	if n.containerd != nil && n.containerd.Running() {
		// Containers no kubelet ended (its kubelet had exited, or the wait ran out) are killed, not left behind
		// with their shims.
		out, _ := n.ctr(ctx, "tasks", "ls", "-q")
		for _, id := range strings.Fields(out) {
			tb.Logf("teardown of %s: killing the container %s", n.Name, id)
			if out, err := n.ctr(ctx, "tasks", "rm", "-f", id); err != nil {
				tb.Errorf("teardown of %s: %v: %s", n.Name, err, out)
			}
		}
	}
	for _, p := range []*testproc.Proc{n.kubeProxy, n.kubelet, n.containerd} {
		if p != nil {
			p.Stop(10 * time.Second)
		}
	}
	if n.socket != "" {
		for _, pid := range shimsOf(n.socket) {
			tb.Logf("teardown of %s: killing leftover shim %d", n.Name, pid)
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
	}
	_, _ = c.kubectl(ctx, "delete", "node", n.Name, "--wait=false")
	var errs []error
	errs = append(errs, unmountUnder(n.Dir)...)
	errs = append(errs, n.removeCgroups(ctx)...)
	for _, s := range [][]string{
		{"iptables", "-w", "-D", "FORWARD", "-i", n.veth, "-o", Bridge, "-j", "ACCEPT"},
		{"iptables", "-w", "-D", "FORWARD", "-i", Bridge, "-o", n.veth, "-j", "ACCEPT"},
		{"iptables", "-w", "-D", "FORWARD", "-i", n.veth, "-o", fleetVethPrefix + "+", "-j", "ACCEPT"},
	} {
		if err := run2(s...); err != nil && !strings.Contains(err.Error(), "does a matching rule exist") {
			errs = append(errs, err)
		}
	}
	// The veth goes with the namespace; a link still here is deleted (which removes its peer too).
	if _, err := net.InterfaceByName(n.veth); err == nil {
		if err := run2("ip", "link", "del", n.veth); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
			errs = append(errs, err)
		}
	}
	for _, err := range errs {
		tb.Errorf("teardown of %s: %v", n.Name, err)
	}
}

// removeCgroups removes the node's cgroup root in every hierarchy, deepest first.
func (n *Node) removeCgroups(ctx context.Context) []error {
	var errs []error
	// A process still in the node's cgroups (a container nothing ended) is killed by its PID first.
	for pid, cg := range n.cgroupProcs() {
		errs = append(errs, fmt.Errorf("process %d was left in %s: killed", pid, cg))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(errs) > 0 { // the kernel empties the cgroups of the killed processes once they have exited
		if err := poll(ctx, 5*time.Second, func() error {
			if left := n.cgroupProcs(); len(left) > 0 {
				return fmt.Errorf("processes still in the node's cgroups: %v", left)
			}
			return nil
		}); err != nil {
			errs = append(errs, err)
		}
	}
	// Every hierarchy, the unified one too: kubelet makes its cgroups there as well on this hybrid layout.
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range roots {
		top := filepath.Join(h, n.cgroup)
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errs
}

// cgroupProcs returns the processes in the node's cgroups of the pids hierarchy, each with its cgroup.
func (n *Node) cgroupProcs() map[int]string {
	procs := map[int]string{}
	_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup/pids", n.cgroup), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if pid, _ := strconv.Atoi(f); pid > 0 {
				procs[pid] = filepath.Dir(p)
			}
		}
		return nil
	})
	return procs
}

// Dial opens a connection from inside the node's network namespace: its traffic to a ClusterIP goes through the
// node's kube-proxy rules, as a client on that node would.
func (n *Node) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	res := make(chan result, 1)
	go func() {
		// The thread enters the namespace and comes back before it is unlocked. A locked thread must not be left
		// to end: testproc starts the cluster's processes with a parent-death signal, which the kernel sends when
		// the thread that forked them ends (a node's kubelet and kube-proxy died so in the first run).
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			res <- result{nil, err}
			return
		}
		defer home.Close()
		f, err := os.Open(n.netns)
		if err != nil {
			runtime.UnlockOSThread()
			res <- result{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			res <- result{nil, fmt.Errorf("setns %s: %w", n.netns, err)}
			return
		}
		c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
		if berr := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); berr != nil {
			// Stays locked (and ends with the goroutine) rather than run other goroutines in the node's namespace.
			if c != nil {
				c.Close()
			}
			res <- result{nil, fmt.Errorf("setns back from %s: %w", n.netns, berr)}
			return
		}
		runtime.UnlockOSThread()
		res <- result{c, err}
	}()
	select {
	case r := <-res:
		return r.c, r.err
	case <-ctx.Done():
		go func() { // a connection made after all is closed
			if r := <-res; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

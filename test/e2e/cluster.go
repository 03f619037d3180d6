//go:build e2e && linux

// Package e2e runs shutdown-manager on a real single-node Kubernetes cluster built on this machine (etcd,
// kube-apiserver, controller-manager, scheduler, kubelet, kube-proxy, containerd 2, runc, a CNI bridge), rolls
// injected Envoy pods under load and counts every failed request. `make e2e` runs it; it needs root.
// ../../../shared/LOCAL-KUBERNETES.md (kept by the project's lead) has the facts the harness is built on.
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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/image"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// The cluster's network: a bridge of its own (a distinctive name: the machine is shared), a private pod subnet whose
// first address is the node's (kubelet, the API server and kube-proxy use it, nothing touches eth0), and a Service
// range routed onto the bridge so that ClusterIP traffic never follows the default route.
const (
	Bridge      = "smgre2e0"
	PodCIDR     = "10.213.0.0/24"
	NodeIP      = "10.213.0.1"
	ServiceCIDR = "10.213.128.0/24"
	NodeName    = "smgr-e2e-node"
)

// The host binaries the cluster and its scenarios run besides ours (Debian packages; .ci/run installs them): the
// node's, HAProxy for the load-balancer rows, curl for the Contour page's first command.
var hostTools = []string{"runc", "iptables", "ip6tables", "nft", "conntrack", "ip", "ldd", "haproxy", "curl"}

// cniBinDir is where Debian's containernetworking-plugins puts the plugins.
const cniBinDir = "/usr/lib/cni"

// kubeBinaries are the Kubernetes binaries the cluster runs.
var kubeBinaries = []string{"etcd", "kube-apiserver", "kubectl", "kubelet", "kube-proxy", "kube-controller-manager", "kube-scheduler"}

// containerdBinaries are built by scripts/kube-binaries.sh from tools/containerd.
var containerdBinaries = []string{"containerd", "containerd-shim-runc-v2", "ctr"}

// Cluster is a running single-node cluster. Start registers its teardown with the test.
type Cluster struct {
	API *kubetest.APIServer
	// Dir holds everything: configs, containerd's root and state, kubelet's root, logs (LogDir).
	Dir    string
	LogDir string
	// Socket is containerd's socket.
	Socket     string
	kubeBin    string
	ctrdBin    string
	envoy      testbed.Binary // the Envoy in EnvoyImage
	host       *hostState
	before     hostSnapshot // the host before the cluster changed anything; teardown compares
	containerd *testproc.Proc
	// Registry serves our image and chart; ManagerDigest is the index StartCluster pushed to it, by digest.
	Registry      *Registry
	ManagerDigest string
	kubelet       *testproc.Proc
	kubeProxy     *testproc.Proc
	managers      []*testproc.Proc // controller-manager, scheduler
	dns           *testproc.Proc   // CoreDNS (dns.go)
}

// unavailable fails the test when CI=true (a machine that cannot run the cluster must not pass CI) and skips it
// elsewhere; both say why.
func unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		tb.Fatalf("CI=true and this machine cannot run the e2e cluster: %s", msg)
	}
	tb.Skipf("this machine cannot run the e2e cluster: %s", msg)
}

// StartCluster builds nothing: it needs the Kubernetes and containerd binaries in the cache of
// scripts/kube-binaries.sh (make e2e builds them) and the Debian tools. It writes the images, starts the cluster and
// waits until the node is Ready. Teardown (registered with tb, so it runs on failure and, through the signal
// context of TestMain, on interrupt) goes in the order LOCAL-KUBERNETES.md found to work.
func StartCluster(ctx context.Context, tb testing.TB, root string) *Cluster {
	tb.Helper()
	if os.Geteuid() != 0 {
		unavailable(tb, "not root (kubelet, containerd and the bridge need root)")
	}
	for _, t := range hostTools {
		if _, err := exec.LookPath(t); err != nil {
			unavailable(tb, "no %s on PATH (install runc iptables nftables conntrack iproute2 haproxy curl: .ci/run does)", t)
		}
	}
	if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
		unavailable(tb, "no CNI bridge plugin in %s (apt-get install containernetworking-plugins)", cniBinDir)
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		if _, err2 := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err2 != nil {
			unavailable(tb, "no cgroup filesystem at /sys/fs/cgroup")
		}
	}
	if ifc, err := net.InterfaceByName(Bridge); err == nil {
		tb.Fatalf("the bridge %s exists already (index %d): another e2e cluster runs, or a killed run left it (ip link del %s)", Bridge, ifc.Index, Bridge)
	}
	kubeBin, err := kubetest.BinDir(kubeBinaries...)
	if err != nil {
		unavailable(tb, "%v", err)
	}
	ctrdBin, err := binDir("--print-containerd-dir", containerdBinaries, "scripts/kube-binaries.sh")
	if err != nil {
		unavailable(tb, "%v", err)
	}
	dnsBin, err := binDir("--print-dir", corednsBinaries, "scripts/coredns-binary.sh")
	if err != nil {
		unavailable(tb, "%v", err)
	}
	host, err := recordHost()
	if err != nil {
		tb.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "smgr-e2e-")
	if err != nil {
		tb.Fatal(err)
	}
	c := &Cluster{Dir: dir, LogDir: filepath.Join(dir, "logs"), Socket: filepath.Join(dir, "containerd", "containerd.sock"),
		kubeBin: kubeBin, ctrdBin: ctrdBin, host: host}
	c.before = takeSnapshot(c.ours())
	if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.teardownHost(tb) })
	if err := c.setUpNetwork(); err != nil {
		tb.Fatalf("setting up the network: %v", err)
	}
	// On the node's address, which exists from now on; its stop is registered after teardownHost's, so it runs
	// before it.
	c.Registry = StartRegistry(ctx, tb, dir, c.LogDir)
	if err := c.Registry.writeHostsTOML(certsDir(dir)); err != nil {
		tb.Fatalf("writing containerd's hosts.toml for the registry: %v", err)
	}

	began := time.Now()
	c.API = kubetest.StartWith(tb, kubetest.Config{BindAddress: NodeIP, AdvertiseAddress: NodeIP, ServiceClusterIPRange: ServiceCIDR})
	tb.Cleanup(func() {
		for _, p := range c.managers {
			p.Stop(5 * time.Second)
		}
	})
	if err := c.startManagers(); err != nil {
		tb.Fatalf("starting the controller-manager and scheduler: %v", err)
	}
	tb.Cleanup(func() {
		if c.dns != nil {
			c.dns.Stop(5 * time.Second)
		}
	})
	if err := c.startDNS(ctx, dnsBin); err != nil {
		tb.Fatalf("starting the cluster's DNS: %v", err)
	}
	tb.Cleanup(func() { c.stopContainerd(tb) })
	if err := c.startContainerd(ctx); err != nil {
		tb.Fatalf("starting containerd: %v", err)
	}
	imagesStart := time.Now()
	envoyBin, err := envoyBinary(root)
	if err != nil {
		unavailable(tb, "%v", err)
	}
	c.envoy = envoyBin
	// The node's own images (written, then imported into containerd) and the manager's (compiled, then pushed to
	// the registry) share nothing, and each is mostly one goroutine compressing layers: made side by side.
	var (
		wg        sync.WaitGroup
		importErr error
		imported  time.Duration
	)
	wg.Go(func() {
		importErr = c.importImages(ctx, root, dir, envoyBin.Path)
		imported = time.Since(imagesStart)
	})
	pushed, pushErr := c.pushManagerImages(ctx, root, dir)
	pushedIn := time.Since(imagesStart)
	wg.Wait()
	if importErr != nil {
		tb.Fatal(importErr)
	}
	if pushErr != nil {
		tb.Fatal(pushErr)
	}
	tb.Logf("images written and imported in %s; the release's index pushed as %s, the cluster image too, in %s",
		imported.Round(time.Millisecond), pushed, pushedIn.Round(time.Millisecond))
	tb.Cleanup(func() { c.stopNode(tb) })
	if err := c.startNode(); err != nil {
		tb.Fatalf("starting kubelet and kube-proxy: %v", err)
	}
	tb.Cleanup(func() { c.diagnose(tb) })
	// Polled, not `kubectl wait`: that fails at once while the node is not registered yet.
	if err := poll(ctx, 3*time.Minute, func() error {
		out, err := c.kubectl(ctx, "get", "node", NodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err == nil && strings.TrimSpace(out) != "True" {
			err = fmt.Errorf("Ready is %q", out)
		}
		return err
	}); err != nil {
		tb.Fatalf("the node is not Ready: %v\nkubelet: %s", err, c.kubelet.LogEnd(30))
	}
	tb.Logf("cluster up in %s (everything in %s, logs in %s)", time.Since(began).Round(time.Millisecond), dir, c.LogDir)
	return c
}

// binDir asks script (scripts/kube-binaries.sh, scripts/helm-binary.sh) where the named binaries are, so that the
// cache key is computed in one place, and checks they are there, once a build of them in progress has ended.
func binDir(flag string, names []string, script string) (string, error) {
	root, err := kubetest.RepoRoot()
	if err != nil {
		return "", err
	}
	out, err := exec.Command("bash", filepath.Join(root, script), flag).Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", script, flag, err)
	}
	dir := strings.TrimSpace(string(out))
	missing := func() (out []string) {
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
				out = append(out, n)
			}
		}
		return out
	}
	// A build still running (scripts/e2e.sh starts the one the last row needs in the background) is waited for.
	if m := missing(); len(m) > 0 && kubetest.AwaitBuild(dir, m, os.Stderr) {
		m = missing()
	}
	if m := missing(); len(m) > 0 {
		return "", fmt.Errorf("no %s in %s: make e2e builds it (scripts/e2e.sh)", strings.Join(m, ", "), dir)
	}
	return dir, nil
}

// setUpNetwork creates the bridge with the node's address (the API server binds it before any pod exists), routes
// the Service range onto it, turns forwarding on and drops whatever would be forwarded between the bridge and any
// other interface: pods reach the node and each other, nothing else.
func (c *Cluster) setUpNetwork() error {
	steps := [][]string{
		{"ip", "link", "add", Bridge, "type", "bridge"},
		{"ip", "addr", "add", NodeIP + "/24", "dev", Bridge},
		{"ip", "link", "set", Bridge, "up"},
		{"ip", "route", "add", ServiceCIDR, "dev", Bridge, "src", NodeIP},
		{"iptables", "-w", "-I", "FORWARD", "1", "-i", Bridge, "!", "-o", Bridge, "-j", "DROP"},
		{"iptables", "-w", "-I", "FORWARD", "1", "-o", Bridge, "!", "-i", Bridge, "-j", "DROP"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(s, " "), err, out)
		}
	}
	if err := setSysctl("net/ipv4/ip_forward", "1"); err != nil {
		return err
	}
	// kube-proxy's ClusterIP rules see bridged traffic only with this (1 already on these machines).
	_ = setSysctl("net/bridge/bridge-nf-call-iptables", "1")
	return nil
}

// startProc runs path with args through testproc.Start (a process group of its own, stdout and stderr to
// logPath), env added to the test's environment. It runs until the teardown stops it, by its PID.
func startProc(name, logPath string, env []string, path string, args ...string) (*testproc.Proc, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	return testproc.Start(context.Background(), name, cmd, logPath)
}

// freePort returns a port of host that was free a moment ago.
func freePort(host string) (int, error) {
	ports, err := testproc.FreePorts(host, 1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

func (c *Cluster) startManagers() error {
	cmPort, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	cm, err := startProc("kube-controller-manager", filepath.Join(c.LogDir, "kube-controller-manager.log"), nil,
		filepath.Join(c.kubeBin, "kube-controller-manager"),
		"--kubeconfig="+c.API.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(cmPort),
		"--service-account-private-key-file="+c.API.ServiceAccountKey,
		"--root-ca-file="+c.API.CAFile,
		"--cluster-cidr="+PodCIDR,
		"--service-cluster-ip-range="+ServiceCIDR,
		"--use-service-account-credentials=false",
	)
	if err != nil {
		return err
	}
	c.managers = append(c.managers, cm)
	schedPort, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	sched, err := startProc("kube-scheduler", filepath.Join(c.LogDir, "kube-scheduler.log"), nil,
		filepath.Join(c.kubeBin, "kube-scheduler"),
		"--kubeconfig="+c.API.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(schedPort),
	)
	if err != nil {
		return err
	}
	c.managers = append(c.managers, sched)
	return nil
}

// containerdConfig is containerd's configuration (version 2, which containerd 2 migrates on load): everything
// under the run directory, runc with a root of its own, cgroupfs, overlayfs, our pause image, CNI from Debian's
// plugins with our bridge, and the sandbox's fix: this kernel refuses a negative oom_score_adj. NRI is off (it would
// create /run/nri/nri.sock).
//
// The pods' network namespaces are mounted under containerd's state directory, not in the host-wide /run/netns:
// that directory belongs to everything on the machine, and `ip netns add` (iproute2) bind-mounts it onto itself
// recursively, which doubles every namespace mounted there. containerd removes a namespace with one unmount and
// an unlink, so each pod that existed at that moment then stays Terminating (FailedKillPod: unlinkat
// /run/netns/cni-…: device or resource busy) and its mounts outlive the run. InterfereWithHostNetns does exactly
// that on purpose in every run.
const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.nri.v1.nri"]
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = %[7]q
        Root = %[8]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[9]q
    conf_dir = %[10]q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[11]q
`

// cniConfig is the bridge network: host-local addresses from PodCIDR (its state in the run directory), no
// masquerading (pods talk only to the node and each other), hairpin so that a pod reaches itself through a Service.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "smgr-e2e",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": %q, "gateway": %q}]],
      "routes": [{"dst": "0.0.0.0/0"}],
      "dataDir": %q
    }
  }%s]
}
`

// portmapPlugin, chained after the bridge, gives pods their hostPorts (containerd passes the pod's port mappings
// to plugins with the portMappings capability): its DNAT rules live in the namespace the node's containerd runs
// in. Only the extra nodes ask for it (writeContainerdConfig's chained): on the first node, the host's own
// namespace, its chains would be left in the host's iptables.
const portmapPlugin = `{"type": "portmap", "capabilities": {"portMappings": true}}`

func (c *Cluster) startContainerd(ctx context.Context) error {
	cfgPath, err := writeContainerdConfig(c.Dir, c.Socket, Bridge, PodCIDR, NodeIP)
	if err != nil {
		return err
	}
	// The shim is found on PATH: ours first.
	p, err := startProc("containerd", filepath.Join(c.LogDir, "containerd.log"),
		[]string{"PATH=" + c.ctrdBin + ":" + os.Getenv("PATH")},
		filepath.Join(c.ctrdBin, "containerd"), "--config", cfgPath)
	if err != nil {
		return err
	}
	c.containerd = p
	return awaitContainerd(ctx, p, c.ctrdBin, c.Socket)
}

// writeContainerdConfig writes the configuration of a node's containerd (root, state and socket under
// dir/containerd) and of the CNI bridge network its pods get, and returns the configuration's path. chained are
// CNI plugins (JSON objects, portmapPlugin) run after the bridge, in that order.
func writeContainerdConfig(dir, socket, bridge, podCIDR, nodeIP string, chained ...string) (string, error) {
	d := filepath.Join(dir, "containerd")
	cniDir := filepath.Join(dir, "cni")
	for _, p := range []string{d, cniDir} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return "", err
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return "", err
	}
	cfg := fmt.Sprintf(containerdConfig, filepath.Join(d, "root"), filepath.Join(d, "state"), socket, socket+".ttrpc",
		filepath.Join(d, "opt"), "docker.io/"+PauseImage, runc, filepath.Join(d, "runc"), cniBinDir, cniDir, certsDir(dir))
	cfgPath := filepath.Join(d, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return "", err
	}
	var more strings.Builder
	for _, p := range chained {
		more.WriteString(", " + p)
	}
	cni := fmt.Sprintf(cniConfig, bridge, podCIDR, nodeIP, filepath.Join(dir, "cni-ipam"), more.String())
	if err := os.WriteFile(filepath.Join(cniDir, "10-smgr-e2e.conflist"), []byte(cni), 0o644); err != nil {
		return "", err
	}
	return cfgPath, nil
}

// certsDir is the registry host configuration directory (containerd's certs.d, its CRI config_path) of the
// containerd whose run directory is dir: Registry.writeHostsTOML writes the registry's hosts.toml there.
func certsDir(dir string) string { return filepath.Join(dir, "containerd", "certs.d") }

// awaitContainerd waits up to a minute for the containerd p to answer ctr at socket.
func awaitContainerd(ctx context.Context, p *testproc.Proc, ctrdBin, socket string) error {
	return poll(ctx, time.Minute, func() error {
		if !p.Running() {
			return fmt.Errorf("containerd exited (%v); %s", p.Wait(), p.LogEnd(20))
		}
		_, err := ctrAt(ctx, ctrdBin, socket, "version")
		return err
	})
}

// ctr runs containerd's ctr against our containerd in the k8s.io namespace (the one kubelet's pods use).
func (c *Cluster) ctr(ctx context.Context, args ...string) (string, error) {
	return ctrAt(ctx, c.ctrdBin, c.Socket, args...)
}

// ctrAt runs containerd's ctr against the containerd at socket, in the k8s.io namespace.
func ctrAt(ctx context.Context, ctrdBin, socket string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(ctrdBin, "ctr"), append([]string{"--address", socket, "-n", "k8s.io"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr // where ctr warns that cgroup v1 is deprecated, on every run
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// kubeletConfig: the sandbox fixes (cgroups v1, cgroupfs), the node's address on the bridge, anonymous access
// allowed (the API server calls kubelet for logs and exec without a client certificate; kubelet listens only on the
// bridge), every directory kubelet lets us choose under the run directory, and eviction thresholds low enough that
// a busy shared disk never evicts the test's pods.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[4]s
imageServiceEndpoint: unix://%[4]s
podLogsDir: %[5]s
volumePluginDir: %[6]s
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
clusterDNS: [%[7]s]
clusterDomain: %[8]s
`

// kubeProxyConfig: iptables mode on the pod subnet only; conntrack settings 0 so that kube-proxy changes no
// sysctl; no localhost NodePorts (they need route_localnet).
const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]s
mode: iptables
hostnameOverride: %[2]s
clusterCIDR: %[3]s
nodePortAddresses: [%[3]s]
bindAddress: %[4]s
healthzBindAddress: 127.0.0.1:%[5]d
metricsBindAddress: 127.0.0.1:%[6]d
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`

func (c *Cluster) startNode() error {
	kd := filepath.Join(c.Dir, "kubelet")
	if err := os.MkdirAll(kd, 0o755); err != nil {
		return err
	}
	port, err := freePort(NodeIP)
	if err != nil {
		return err
	}
	hz, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	cfg := fmt.Sprintf(kubeletConfig, NodeIP, port, hz, c.Socket, filepath.Join(c.Dir, "pod-logs"), filepath.Join(c.Dir, "volume-plugins"),
		NodeIP, ClusterDomain)
	cfgPath := filepath.Join(c.Dir, "kubelet.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	c.kubelet, err = startProc("kubelet", filepath.Join(c.LogDir, "kubelet.log"), nil, filepath.Join(c.kubeBin, "kubelet"),
		"--config="+cfgPath,
		"--kubeconfig="+c.API.Kubeconfig,
		"--root-dir="+kd,
		"--node-ip="+NodeIP,
		"--hostname-override="+NodeName,
		"--v=2",
	)
	if err != nil {
		return err
	}
	hz2, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	metrics, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	pcfg := fmt.Sprintf(kubeProxyConfig, c.API.Kubeconfig, NodeName, PodCIDR, NodeIP, hz2, metrics)
	pcfgPath := filepath.Join(c.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(pcfgPath, []byte(pcfg), 0o644); err != nil {
		return err
	}
	c.kubeProxy, err = startProc("kube-proxy", filepath.Join(c.LogDir, "kube-proxy.log"), nil, filepath.Join(c.kubeBin, "kube-proxy"),
		"--config="+pcfgPath)
	return err
}

// kubectl runs kubectl against the cluster, bounded by ctx and two minutes.
func (c *Cluster) kubectl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	out, err := c.API.Command(ctx, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// diagnose prints, when the test failed, what tells why: pods, events, and the end of every log.
func (c *Cluster) diagnose(tb testing.TB) {
	if !tb.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"get", "pods", "-A", "-o", "wide"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
	} {
		out, err := c.kubectl(ctx, args...)
		tb.Logf("kubectl %s (%v):\n%s", strings.Join(args, " "), err, out)
	}
	for _, p := range append([]*testproc.Proc{c.kubelet, c.containerd, c.kubeProxy}, c.managers...) {
		if p != nil {
			tb.Logf("%s: %s", p.Name, p.LogEnd(25))
		}
	}
}

// stopNode is the first half of the teardown: the pods go (short grace; a deleted Deployment would leave them
// their full grace period), then their containers (they linger until kubelet's minute GC otherwise), then
// kube-proxy's rules, kube-proxy, kubelet, and the chains kubelet keeps re-creating while it runs.
func (c *Cluster) stopNode(tb testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if c.kubelet != nil && c.kubelet.Running() {
		_, _ = c.kubectl(ctx, "delete", "deployments,replicasets,daemonsets,statefulsets,jobs", "--all", "-A", "--cascade=orphan", "--wait=false")
		_, _ = c.kubectl(ctx, "delete", "pods", "--all", "-A", "--grace-period=1", "--wait=false")
		if err := poll(ctx, 2*time.Minute, func() error {
			out, err := c.kubectl(ctx, "get", "pods", "-A", "-o", "name")
			if err == nil && strings.TrimSpace(out) != "" {
				return fmt.Errorf("pods left: %s", out)
			}
			return err
		}); err != nil {
			tb.Errorf("teardown: the pods did not go: %v", err)
		}
		if err := poll(ctx, 2*time.Minute, func() error {
			out, err := c.ctr(ctx, "tasks", "ls", "-q")
			if err == nil && strings.TrimSpace(out) != "" {
				return fmt.Errorf("tasks left: %s", out)
			}
			return err
		}); err != nil {
			tb.Errorf("teardown: the containers did not stop: %v", err)
		}
	}
	if out, err := exec.Command(filepath.Join(c.kubeBin, "kube-proxy"), "--cleanup").CombinedOutput(); err != nil {
		tb.Logf("teardown: kube-proxy --cleanup: %v: %s", err, testproc.LastLines(string(out), 5))
	}
	c.kubeProxy.Stop(5 * time.Second)
	c.kubelet.Stop(10 * time.Second)
	for _, err := range c.host.removeKubeChains() {
		tb.Errorf("teardown: %v", err)
	}
}

// stopContainerd stops containerd, then any shim of ours it left (found by our socket path, killed by PID).
func (c *Cluster) stopContainerd(tb testing.TB) {
	c.containerd.Stop(10 * time.Second)
	for _, pid := range shimsOf(c.Socket) {
		tb.Logf("teardown: killing leftover shim %d", pid)
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
		}
	}
}

// teardownHost is the last step, after the control plane: mounts under the run directory, cgroups, the bridge
// (its route goes with it), our FORWARD rules, new nft tables, the host directories the cluster created, sysctls;
// then the run directory, whose logs are kept when the test failed.
func (c *Cluster) teardownHost(tb testing.TB) {
	var errs []error
	errs = append(errs, unmountUnder(c.Dir)...)
	errs = append(errs, c.host.removeCgroups()...)
	for _, s := range [][]string{
		{"iptables", "-w", "-D", "FORWARD", "-i", Bridge, "!", "-o", Bridge, "-j", "DROP"},
		{"iptables", "-w", "-D", "FORWARD", "-o", Bridge, "!", "-i", Bridge, "-j", "DROP"},
		{"ip", "link", "del", Bridge},
	} {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") &&
			!strings.Contains(string(out), "does a matching rule exist") {
			errs = append(errs, fmt.Errorf("%s: %w: %s", strings.Join(s, " "), err, out))
		}
	}
	errs = append(errs, c.host.removeNftTables()...)
	errs = append(errs, c.host.removePaths()...)
	restored, serrs := c.host.restoreSysctls()
	errs = append(errs, serrs...)
	if len(restored) > 0 {
		tb.Logf("teardown: sysctls restored: %s", strings.Join(restored, ", "))
	}
	for _, err := range errs {
		tb.Errorf("teardown: %v", err)
	}
	c.checkHost(tb)
	if tb.Failed() {
		entries, _ := os.ReadDir(c.Dir)
		for _, e := range entries {
			if e.Name() != "logs" {
				_ = os.RemoveAll(filepath.Join(c.Dir, e.Name()))
			}
		}
		tb.Logf("test failed: the cluster's logs are kept in %s", c.LogDir)
		return
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		tb.Errorf("teardown: removing %s: %v", c.Dir, err)
	}
}

// InterfereWithHostNetns adds a network namespace with `ip netns add` while the cluster's pods run, as any other
// tool on the machine may (it bind-mounts /run/netns onto itself, recursively, on first use), and removes it and
// that bind mount at the end of the test, leaving /run/netns as it found it. The cluster must not notice.
func (c *Cluster) InterfereWithHostNetns(tb testing.TB) {
	tb.Helper()
	const name = "smgr-e2e-probe"
	_, statErr := os.Stat("/run/netns")
	wasMount := slices.ContainsFunc(mounts(), func(m string) bool { return strings.HasPrefix(m, "/run/netns (") })
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		tb.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	tb.Logf("ip netns add %s: /run/netns is now bind-mounted onto itself (it was a mount point before: %v)", name, wasMount)
	tb.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			tb.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
		if !wasMount {
			if err := syscall.Unmount("/run/netns", syscall.MNT_DETACH); err != nil {
				tb.Errorf("unmounting /run/netns: %v", err)
			}
		}
		if errors.Is(statErr, fs.ErrNotExist) {
			if err := os.Remove("/run/netns"); err != nil {
				tb.Errorf("removing /run/netns: %v", err)
			}
		}
	})
}

// ours are the path prefixes that make a process the cluster's (see takeSnapshot): its run directory, the API
// server's directory (etcd's data, the kubeconfig every kubectl and controller names) and containerd's binaries.
// Not the Kubernetes binaries' directory: it is a cache shared with every `go test ./test/kube` on the machine,
// whose etcd and kube-apiserver came and went during runs and failed the host check though nothing was ours.
func (c *Cluster) ours() []string {
	o := []string{c.Dir, c.ctrdBin}
	if c.API != nil {
		o = append(o, filepath.Dir(c.API.Kubeconfig))
	}
	return o
}

// checkHost compares the host with the snapshot taken before the cluster started and fails the test for every
// difference left after the teardown (a pass, a failure or an interrupt alike): mounts, network namespaces,
// links, routes, iptables and nft, cgroups, sysctls, processes. Mounts that appeared are then unmounted, so that a
// failed run does not leave the next one a host it did not find either.
func (c *Cluster) checkHost(tb testing.TB) {
	diff := c.before.diff(takeSnapshot(c.ours()))
	if len(diff) == 0 {
		tb.Logf("teardown: the host is as the e2e found it (%s)", c.before.summary())
		return
	}
	tb.Errorf("teardown: the host is not as the e2e found it, %d differences (+ appeared, - went):\n%s", len(diff), strings.Join(diff, "\n"))
	for _, d := range diff {
		if mp, ok := strings.CutPrefix(d, "+ mount: "); ok {
			mp, _, _ = strings.Cut(mp, " (")
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
				tb.Logf("teardown: unmounting the leftover %s: %v", mp, err)
			}
		}
	}
}

// nodeState says why a pod may not go: the pod, its Events, what containerd and kubelet logged about it, the
// containers still running, the network namespaces under /run/netns with the processes whose mount namespaces
// hold them.
func (c *Cluster) nodeState(ctx context.Context, ns, pod string) string {
	var b strings.Builder
	out, _ := c.kubectl(ctx, "-n", ns, "get", "pod", pod, "-o", "wide")
	fmt.Fprintf(&b, "pod:\n%s\n", out)
	out, _ = c.kubectl(ctx, "-n", ns, "get", "events", "--field-selector=involvedObject.name="+pod, "--sort-by=.lastTimestamp")
	fmt.Fprintf(&b, "its events:\n%s\n", out)
	out, _ = c.ctr(ctx, "tasks", "ls")
	fmt.Fprintf(&b, "containerd tasks:\n%s\n", out)
	for _, p := range []*testproc.Proc{c.containerd, c.kubelet} {
		if p != nil {
			fmt.Fprintf(&b, "%s errors (%s):\n%s\n", p.Name, p.LogPath, grepLines(p.LogPath, 15, "error", "Error", "FailedKillPod"))
		}
	}
	fmt.Fprintf(&b, "mounts under /run/netns: %v\n", netnsHolders())
	return b.String()
}

// netnsHolders maps each nsfs mount under /run/netns to the processes whose mount namespace has it (a mount of a
// network namespace held in another mount namespace is what makes its removal fail with EBUSY).
func netnsHolders() map[string][]string {
	held := map[string][]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "mountinfo"))
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) > 4 && strings.Contains(f[4], "/netns/") {
				held[f[4]] = append(held[f[4]], e.Name()+" "+strings.TrimSpace(string(comm)))
			}
		}
	}
	return held
}

// grepLines returns the last n lines of the file at path that contain any of words.
func grepLines(path string, n int, words ...string) string {
	b, _ := os.ReadFile(path)
	var hits []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				hits = append(hits, l)
				break
			}
		}
	}
	if len(hits) > n {
		hits = hits[len(hits)-n:]
	}
	return strings.Join(hits, "\n")
}

// poll calls f until it returns nil, ctx ends or timeout passes (then the last error).
func poll(ctx context.Context, timeout time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// importImages writes the node's own images (the test upstream, the sandbox's pause, Envoy) as one docker archive
// in dir and imports it into the node's containerd.
func (c *Cluster) importImages(ctx context.Context, root, dir, envoyBin string) error {
	archive := filepath.Join(dir, "images.tar")
	if err := writeImages(ctx, root, dir, envoyBin, archive); err != nil {
		return fmt.Errorf("writing the images: %w", err)
	}
	if out, err := c.ctr(ctx, "images", "import", archive); err != nil {
		return fmt.Errorf("importing the images: %w: %s", err, out)
	}
	return nil
}

// pushManagerImages builds the manager's images and pushes them to the registry: the pod image as the release's
// index of both architectures, the cluster image (the webhook's) for this machine's only (what the pods pull is
// the part under test, and each architecture is a build). It sets c.ManagerDigest, writes both as a docker
// archive in dir for the fleet's nodes, and returns the pod image's reference as pushed.
func (c *Cluster) pushManagerImages(ctx context.Context, root, dir string) (name.Digest, error) {
	idx, err := managerIndex(ctx, root, image.MainPackage, managerArches)
	if err != nil {
		return name.Digest{}, fmt.Errorf("building the release's image index: %w", err)
	}
	pushed, err := image.Push(ctx, ManagerImage, idx, c.Registry, remote.WithTransport(c.Registry.Transport()))
	if err != nil {
		return name.Digest{}, fmt.Errorf("pushing the image index to the registry: %w", err)
	}
	c.ManagerDigest = pushed.DigestStr()
	clusterIdx, err := managerIndex(ctx, root, image.ClusterPackage, []string{runtime.GOARCH})
	if err != nil {
		return name.Digest{}, fmt.Errorf("building the cluster image: %w", err)
	}
	if _, err := image.Push(ctx, ClusterImage, clusterIdx, c.Registry, remote.WithTransport(c.Registry.Transport())); err != nil {
		return name.Digest{}, fmt.Errorf("pushing the cluster image to the registry: %w", err)
	}
	if err := writeManagerArchive(map[string]v1.ImageIndex{ManagerImage: idx, ClusterImage: clusterIdx}, filepath.Join(dir, "manager.tar")); err != nil {
		return name.Digest{}, fmt.Errorf("writing the manager's archive for the fleet's nodes: %w", err)
	}
	return pushed, nil
}

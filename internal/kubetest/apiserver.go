// Package kubetest runs a real Kubernetes control plane for tests: etcd and kube-apiserver built from the versions
// pinned in tools/go.mod by scripts/kube-binaries.sh (`make kube`), listening on 127.0.0.1 (unless Config says
// otherwise), and kubectl against it. It shells out to the binaries, so the project's own module never depends on Kubernetes' Go packages.
//
// A test that needs the API server (for instance to have Kubernetes itself check a manifest's schema):
//
//	api := kubetest.Start(t)
//	api.ApplyDryRun(t, "deploy/envoy.yaml")
//
// Without the binaries a test fails under CI=true and is skipped elsewhere, naming the command that builds them.
// Everything Start starts is stopped by a cleanup of the test, by PID; a failed test keeps the logs and says where.
package kubetest

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// DefaultServiceClusterIPRange is the Service range when Config leaves it empty. Nothing routes it: the API server
// only allocates ClusterIPs from it.
const DefaultServiceClusterIPRange = "10.96.0.0/16"

// Timeouts of a start. On the project's 2-core machine etcd answers within a second and kube-apiserver's /readyz
// passed 3.7-7.8 s after the start, idle or with a load average of 12. The bounds are for a wedged process, not a
// slow one.
const (
	etcdReadyTimeout      = time.Minute
	apiServerReadyTimeout = 3 * time.Minute
	checkTimeout          = 5 * time.Second // one readiness request
	startAttempts         = 3               // a free port taken by someone else between our check and the bind
)

// Config changes how Start runs kube-apiserver; the zero value is what Start uses.
type Config struct {
	// ServiceClusterIPRange is --service-cluster-ip-range; empty means DefaultServiceClusterIPRange.
	ServiceClusterIPRange string
	// BindAddress is --bind-address: the one IP address kube-apiserver listens on, and URL's host; empty means
	// 127.0.0.1. Its self-signed certificate covers it. A cluster whose pods call the API (through the kubernetes
	// Service) sets it and AdvertiseAddress to an address of the node that pods reach.
	BindAddress string
	// AdvertiseAddress is --advertise-address (the address the kubernetes Service's endpoints name); empty means
	// BindAddress. A loopback address cannot be an endpoint, so the API server then keeps no endpoints for the
	// kubernetes Service (--endpoint-reconciler-type=none).
	AdvertiseAddress string
	// ExtraArgs are appended to kube-apiserver's command line; for a flag given twice, the last value wins.
	ExtraArgs []string
}

// APIServer is a running etcd and kube-apiserver, stopped by the cleanup of the test that started it. Its fields
// are read-only.
type APIServer struct {
	// URL is the API server's base URL, https://<Config.BindAddress, 127.0.0.1 by default>:<port>.
	URL string
	// Kubeconfig is the path of a kubeconfig for URL: the admin token, the server's certificate checked.
	Kubeconfig string
	// Token is the admin's bearer token; its user "admin" is in the group system:masters.
	Token string
	// CAFile is the path of a PEM bundle that verifies URL's self-signed serving certificate.
	CAFile string
	// ServiceAccountKey is the path of the PEM RSA private key that signs service account tokens (what
	// kube-controller-manager's --service-account-private-key-file takes).
	ServiceAccountKey string
	// EtcdURL is etcd's client URL, http://127.0.0.1:<port>.
	EtcdURL string
	// BinDir is where etcd, kube-apiserver and kubectl were found.
	BinDir string
	// Dir is the temporary directory holding everything: etcd's data, certificates, keys, logs. The cleanup
	// removes it, except LogDir when the test failed; what a killed test binary left, a later Start removes.
	Dir string
	// LogDir holds etcd.log and kube-apiserver.log: each process's stdout and stderr.
	LogDir string

	etcd, apiServer *testproc.Proc
	clientOnce      sync.Once
	client          *Client // see Client
}

// Start starts etcd and kube-apiserver on free ports of 127.0.0.1 (Config's zero value), waits until /readyz
// passes and writes a kubeconfig. See StartWith.
func Start(tb testing.TB) *APIServer {
	tb.Helper()
	return StartWith(tb, Config{})
}

// StartWith starts etcd (a temporary data directory) and kube-apiserver (a self-signed certificate, service account
// keys made here, an admin token in system:masters, authorization Node,RBAC) on free ports, waits until /readyz
// passes with the admin token, writes a kubeconfig, and creates the default service account of namespace default
// (no controller runs to create it, and the API server refuses a pod without it). It registers a cleanup with tb
// that kills both by PID and removes their files; a failed test keeps the logs and says where they are.
//
// It fails tb if either does not start, quoting the end of the log of the one that failed and naming the file;
// without the binaries see BinDirTB.
func StartWith(tb testing.TB, cfg Config) *APIServer {
	tb.Helper()
	bin := BinDirTB(tb, controlPlane...)
	removeAbandoned()
	dir, err := os.MkdirTemp("", dirPattern)
	if err != nil {
		tb.Fatalf("creating the API server's directory: %v", err)
	}
	s := &APIServer{BinDir: bin, Dir: dir, LogDir: filepath.Join(dir, "logs")}
	tb.Cleanup(func() { s.cleanup(tb) })
	if err := writeOwner(dir); err != nil {
		tb.Fatalf("writing the API server directory's owner: %v", err)
	}
	began := time.Now()
	if err := s.start(tb.Context(), cfg); err != nil {
		tb.Fatalf("starting the API server: %v", err)
	}
	tb.Logf("kube-apiserver %s ready in %s (logs in %s)", s.URL, time.Since(began).Round(time.Millisecond), s.LogDir)
	return s
}

func (s *APIServer) start(ctx context.Context, cfg Config) error {
	bind := cmp.Or(cfg.BindAddress, "127.0.0.1")
	advertise := cmp.Or(cfg.AdvertiseAddress, bind)
	for _, a := range []string{bind, advertise} {
		if ip := net.ParseIP(a); ip == nil || ip.IsUnspecified() {
			return fmt.Errorf("%q is not one IP address (BindAddress %q, AdvertiseAddress %q)", a, cfg.BindAddress, cfg.AdvertiseAddress)
		}
	}
	if err := os.Mkdir(s.LogDir, 0o755); err != nil {
		return fmt.Errorf("creating the log directory: %w", err)
	}
	token, err := randomHex(16)
	if err != nil {
		return err
	}
	s.Token = token
	tokens := filepath.Join(s.Dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+",admin,admin,system:masters\n"), 0o600); err != nil {
		return fmt.Errorf("writing the token file: %w", err)
	}
	s.ServiceAccountKey = filepath.Join(s.Dir, "sa.key")
	publicKey := filepath.Join(s.Dir, "sa.pub")
	if err := writeServiceAccountKeys(s.ServiceAccountKey, publicKey); err != nil {
		return err
	}
	if err := s.startEtcd(ctx); err != nil {
		return err
	}

	certDir := filepath.Join(s.Dir, "certs")
	s.CAFile = filepath.Join(certDir, "apiserver.crt") // kube-apiserver writes its certificate and its CA's there
	serviceRange := cmp.Or(cfg.ServiceClusterIPRange, DefaultServiceClusterIPRange)
	var reconcile []string
	if net.ParseIP(advertise).IsLoopback() {
		// The kubernetes Service may not have a loopback endpoint: without this the API server logs that it
		// cannot sync it, every few seconds. Nothing in a pod could reach a loopback address anyway.
		reconcile = []string{"--endpoint-reconciler-type=none"}
	}
	args := func(port int) []string {
		return slices.Concat([]string{
			"--etcd-servers=" + s.EtcdURL,
			"--bind-address=" + bind,
			"--secure-port=" + strconv.Itoa(port),
			"--advertise-address=" + advertise,
			"--cert-dir=" + certDir,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + publicKey,
			"--service-account-signing-key-file=" + s.ServiceAccountKey,
			"--token-auth-file=" + tokens,
			"--authorization-mode=Node,RBAC",
			"--service-cluster-ip-range=" + serviceRange,
			"--allow-privileged=true",
			"--kubelet-preferred-address-types=InternalIP",
			"--profiling=false",
		}, reconcile, cfg.ExtraArgs)
	}
	p, err := startOnFreePorts(ctx, bind, 1, func(ports []int) (*testproc.Proc, error) {
		s.URL = "https://" + net.JoinHostPort(bind, strconv.Itoa(ports[0]))
		return startProcess("kube-apiserver", filepath.Join(s.LogDir, "kube-apiserver.log"),
			filepath.Join(s.BinDir, "kube-apiserver"), args(ports[0])...)
	}, apiServerReadyTimeout, s.readyz)
	s.apiServer = p
	if err != nil {
		return err
	}
	if err := s.writeKubeconfig(); err != nil {
		return err
	}
	return s.createNamespace(ctx, "default")
}

// startEtcd runs etcd as a single member with a unique name, on two free ports; it is ready when its member list,
// asked on the client port, names that member (and so is ours, not another test's etcd on a port we thought free).
func (s *APIServer) startEtcd(ctx context.Context) error {
	suffix, err := randomHex(4)
	if err != nil {
		return err
	}
	name := "kubetest-" + suffix
	p, err := startOnFreePorts(ctx, "127.0.0.1", 2, func(ports []int) (*testproc.Proc, error) {
		s.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		data := filepath.Join(s.Dir, "etcd")
		if err := os.RemoveAll(data); err != nil { // what an earlier attempt left
			return nil, fmt.Errorf("clearing etcd's data directory: %w", err)
		}
		return startProcess("etcd", filepath.Join(s.LogDir, "etcd.log"), filepath.Join(s.BinDir, "etcd"),
			"--name="+name,
			"--data-dir="+data,
			"--listen-client-urls="+s.EtcdURL,
			"--advertise-client-urls="+s.EtcdURL,
			"--listen-peer-urls="+peer,
			"--initial-advertise-peer-urls="+peer,
			"--initial-cluster="+name+"="+peer,
			"--unsafe-no-fsync", // the data dies with the test; fsync only slows a busy disk
		)
	}, etcdReadyTimeout, func(ctx context.Context) error { return s.etcdHasMember(ctx, name) })
	s.etcd = p
	return err
}

// startOnFreePorts picks n free ports of host, starts a process on them and waits until ready passes. When
// the process exits because a port was taken in between (the log says "address already in use"), it tries again
// with other ports, startAttempts times in all. It returns the last process started, if any, for the cleanup.
func startOnFreePorts(ctx context.Context, host string, n int, start func(ports []int) (*testproc.Proc, error),
	timeout time.Duration, ready func(context.Context) error) (*testproc.Proc, error) {
	var p *testproc.Proc
	for attempt := 1; ; attempt++ {
		ports, err := testproc.FreePorts(host, n)
		if err != nil {
			return p, err
		}
		if p, err = start(ports); err != nil {
			return p, err
		}
		err = waitReady(ctx, p, timeout, ready)
		if err == nil || !errors.Is(err, errExited) || !logContains(p, "address already in use") || attempt == startAttempts {
			return p, err
		}
	}
}

// etcdHasMember asks etcd's JSON gateway for its member list and succeeds if it names name.
func (s *APIServer) etcdHasMember(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.EtcdURL+"/v3/cluster/member/list", strings.NewReader("{}"))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("member list: %s: %s", resp.Status, body)
	}
	var list struct {
		Members []etcdMember `json:"members"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("decoding the member list: %w", err)
	}
	if !slices.ContainsFunc(list.Members, func(m etcdMember) bool { return m.Name == name }) {
		return fmt.Errorf("member list %s does not name %s: another etcd answers on this port", body, name)
	}
	return nil
}

// etcdMember is the part of an etcd member we read.
type etcdMember struct {
	Name string `json:"name"`
}

// readyz succeeds when GET /readyz, with the admin token, over TLS checked against the certificate kube-apiserver
// wrote, answers 200. Only our server knows our token, so this also proves the port is ours.
func (s *APIServer) readyz(ctx context.Context) error {
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		return fmt.Errorf("no serving certificate yet: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("no certificate in %s yet", s.CAFile)
	}
	client := &http.Client{
		Timeout:   checkTimeout,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/readyz", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s: %s", resp.Status, testproc.LastLines(string(body), 5))
	}
	return nil
}

// writeKubeconfig writes the kubeconfig for URL, CAFile and Token. Strings are JSON-quoted, which YAML reads as is.
func (s *APIServer) writeKubeconfig() error {
	q := strconv.Quote
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: kubetest
  context:
    cluster: kubetest
    user: admin
current-context: kubetest
`, q(s.URL), q(s.CAFile), q(s.Token))
	s.Kubeconfig = filepath.Join(s.Dir, "kubeconfig")
	if err := os.WriteFile(s.Kubeconfig, []byte(config), 0o600); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	return nil
}

// cleanup stops kube-apiserver then etcd, by PID, and removes Dir. When tb failed it keeps LogDir and says so; a
// process that had died on its own is reported with the end of its log.
func (s *APIServer) cleanup(tb testing.TB) {
	var died []*testproc.Proc
	for _, p := range []*testproc.Proc{s.apiServer, s.etcd} {
		if p == nil {
			continue
		}
		if p.Running() {
			p.Stop(0)
		} else {
			died = append(died, p)
		}
	}
	for _, p := range died {
		if s.Kubeconfig == "" {
			break // it died while starting, and Start's failure already quoted its log
		}
		tb.Errorf("%s had exited (%v) before the test ended; %s", p.Name, p.Wait(), p.LogEnd(30))
	}
	if !tb.Failed() {
		if err := os.RemoveAll(s.Dir); err != nil {
			tb.Errorf("removing %s: %v", s.Dir, err)
		}
		return
	}
	tb.Logf("test failed: etcd's and kube-apiserver's logs are kept in %s", s.LogDir)
	entries, err := os.ReadDir(s.Dir) // all but the logs go, the owner file too: kept logs are not abandoned
	if err != nil {
		tb.Logf("reading %s: %v", s.Dir, err)
		return
	}
	for _, e := range entries {
		if e.Name() != filepath.Base(s.LogDir) {
			_ = os.RemoveAll(filepath.Join(s.Dir, e.Name()))
		}
	}
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return hex.EncodeToString(b), nil
}

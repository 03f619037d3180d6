//go:build e2e && linux

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"golang.org/x/crypto/bcrypt"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// The registry the cluster pulls our image from, as a user's nodes would: distribution's registry
// (scripts/registry-binary.sh builds it) on the node's address, where pods and the node's containerd reach it, over
// TLS (a CA of the test's, trusted by containerd through certs.d) with basic auth (htpasswd, bcrypt). The port is
// fixed so that the image's name is a constant: NodeIP is on our own bridge, which exists only while the cluster
// runs (StartCluster refuses to start when it is there already), so nothing else listens there.
const (
	RegistryHost = NodeIP + ":5443"
	// RegistryUser is the one account; its password is random per run (Registry.Password).
	RegistryUser = "e2e"
	// PullSecret is the kubernetes.io/dockerconfigjson Secret every namespace that runs our image holds, and the
	// imagePullSecrets entry of its pods (through their ServiceAccount) and of the chart's webhook.
	PullSecret = "registry-credentials"
	// ChartRepository is where the chart is pushed (helm push … oci://RegistryHost/platform/charts), as
	// docs/release.md does.
	ChartRepository = "oci://" + RegistryHost + "/platform/charts"
)

// registryBinaries are built by scripts/registry-binary.sh from tools/registry (a package of the tools module, tools/go.mod).
var registryBinaries = []string{"registry"}

// Registry is a running registry. StartRegistry registers its stop with the test.
type Registry struct {
	Dir      string // its configuration, certificates, htpasswd, storage and log
	CAFile   string // the CA that signed its certificate (PEM): containerd's hosts.toml and Helm's --ca-file name it
	Password string // RegistryUser's
	bin      string // the registry's executable
	proc     *testproc.Proc
	pool     *x509.CertPool
}

// registryConfig is distribution's configuration: filesystem storage in the run directory, TLS, htpasswd.
const registryConfig = `version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %[1]q
http:
  addr: %[2]q
  tls:
    certificate: %[3]q
    key: %[4]q
auth:
  htpasswd:
    realm: smgr-e2e
    path: %[5]q
`

// StartRegistry writes a CA, the registry's certificate (for NodeIP) and a htpasswd with a random password into
// dir/registry, starts the registry on RegistryHost and waits until it refuses an anonymous /v2/ (401) and answers
// RegistryUser's (200): TLS and auth both work. It is stopped by PID when tb ends; its files go with dir.
func StartRegistry(ctx context.Context, tb testing.TB, dir, logDir string) *Registry {
	tb.Helper()
	bin, err := binDir("--print-dir", registryBinaries, "scripts/registry-binary.sh")
	if err != nil {
		unavailable(tb, "%v", err)
	}
	r := &Registry{Dir: filepath.Join(dir, "registry"), bin: filepath.Join(bin, "registry")}
	if err := r.writeFiles(); err != nil {
		tb.Fatalf("registry: %v", err)
	}
	cfg := filepath.Join(r.Dir, "config.yml")
	cmd := exec.Command(r.bin, "serve", cfg)
	// No OpenTelemetry exporter (autoexport): by default it would send traces to a collector on localhost.
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none")
	r.proc, err = testproc.Start(context.Background(), "registry", cmd, filepath.Join(logDir, "registry.log"))
	if err != nil {
		tb.Fatalf("starting the registry: %v", err)
	}
	tb.Cleanup(func() { r.proc.Stop(5 * time.Second) })
	client := &http.Client{Timeout: 5 * time.Second, Transport: r.Transport()}
	err = poll(ctx, time.Minute, func() error {
		if !r.proc.Running() {
			return fmt.Errorf("the registry exited (%v): %s", r.proc.Wait(), r.proc.LogEnd(20))
		}
		for _, c := range []struct {
			user string
			want int
		}{{"", http.StatusUnauthorized}, {RegistryUser, http.StatusOK}} {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+RegistryHost+"/v2/", nil)
			if err != nil {
				return err
			}
			if c.user != "" {
				req.SetBasicAuth(c.user, r.Password)
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				return fmt.Errorf("GET /v2/ as %q: %s, want %d", c.user, resp.Status, c.want)
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("the registry on %s does not answer as it should: %v (log: %s)", RegistryHost, err, r.proc.LogPath)
	}
	tb.Logf("registry on https://%s (TLS, basic auth), pid %d, log %s", RegistryHost, r.proc.Cmd.Process.Pid, r.proc.LogPath)
	return r
}

// writeFiles writes the CA, the server's key and certificate, the htpasswd and the configuration.
func (r *Registry) writeFiles() error {
	if err := os.MkdirAll(filepath.Join(r.Dir, "data"), 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "smgr-e2e registry CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("making the CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: NodeIP},
		IPAddresses: []net.IP{net.ParseIP(NodeIP)},
		NotBefore:   now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("making the registry's certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pw := make([]byte, 16)
	if _, err := rand.Read(pw); err != nil {
		return err
	}
	r.Password = hex.EncodeToString(pw)
	// distribution's htpasswd accepts bcrypt only.
	hash, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.DefaultCost)
	if err != nil {
		return err
	}
	r.CAFile = filepath.Join(r.Dir, "ca.crt")
	crt, keyFile, htpasswd := filepath.Join(r.Dir, "server.crt"), filepath.Join(r.Dir, "server.key"), filepath.Join(r.Dir, "htpasswd")
	cfg := fmt.Sprintf(registryConfig, filepath.Join(r.Dir, "data"), RegistryHost, crt, keyFile, htpasswd)
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{r.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644},
		{crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644},
		{keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600},
		{htpasswd, []byte(RegistryUser + ":" + string(hash) + "\n"), 0o600},
		{filepath.Join(r.Dir, "config.yml"), []byte(cfg), 0o600},
	} {
		if err := os.WriteFile(f.path, f.data, f.mode); err != nil {
			return err
		}
	}
	r.pool = x509.NewCertPool()
	r.pool.AddCert(ca)
	return nil
}

// Transport is an HTTP transport that trusts the registry's CA (and nothing else).
func (r *Registry) Transport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: r.pool, MinVersion: tls.VersionTLS12}
	return t
}

// Resolve makes the registry an authn.Keychain (what image.Push, `make image-push`'s code, takes): RegistryUser's
// credentials for RegistryHost, anonymous elsewhere.
func (r *Registry) Resolve(res authn.Resource) (authn.Authenticator, error) {
	if res.RegistryStr() != RegistryHost {
		return authn.Anonymous, nil
	}
	return &authn.Basic{Username: RegistryUser, Password: r.Password}, nil
}

// hostsTOML is containerd's registry host configuration (certs.d/<host>/hosts.toml): the registry by HTTPS,
// trusting the test's CA.
const hostsTOML = `server = "https://%[1]s"

[host."https://%[1]s"]
  capabilities = ["pull", "resolve"]
  ca = %[2]q
`

// writeHostsTOML writes certsDir/RegistryHost/hosts.toml, so that the containerd whose CRI config_path is certsDir
// trusts the registry's CA.
func (r *Registry) writeHostsTOML(certsDir string) error {
	d := filepath.Join(certsDir, RegistryHost)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(fmt.Sprintf(hostsTOML, RegistryHost, r.CAFile)), 0o644)
}

// mirrorTOML makes the registry the only host of another registry's names (server and host both: nothing is
// asked of the other registry), with RegistryUser's credentials in a header of every request, as a node's mirror
// configuration carries them for pods that name no pull Secret.
const mirrorTOML = `server = "https://%[1]s"

[host."https://%[1]s"]
  capabilities = ["pull", "resolve"]
  ca = %[2]q
  [host."https://%[1]s".header]
    authorization = %[3]q
`

// writeMirrorTOML writes certsDir/upstream/hosts.toml: the containerd whose CRI config_path is certsDir pulls
// upstream's images (ghcr.io/…) from the registry, at the same repository path.
func (r *Registry) writeMirrorTOML(certsDir, upstream string) error {
	d := filepath.Join(certsDir, upstream)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(RegistryUser+":"+r.Password))
	return os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(fmt.Sprintf(mirrorTOML, RegistryHost, r.CAFile, auth)), 0o600)
}

// logSummary counts, in the registry's log, the requests containerd made (its User-Agent) that the registry
// answered as RegistryUser's: manifests resolved (HEAD) and fetched (GET), blobs fetched. Evidence that the node
// pulled from the registry, with credentials.
func (r *Registry) logSummary() string {
	return r.pullSummary("/v2/")
}

// pullSummary is logSummary for the requests whose path begins with prefix (a repository's: /v2/NAME/).
func (r *Registry) pullSummary(prefix string) string {
	p, err := r.pulls(prefix)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("containerd, authenticated as %s: %d manifest resolutions (HEAD), %d manifests and %d blobs fetched (GET)", RegistryUser, p.heads, p.manifests, p.blobs)
}

// pullCounts are the requests logSummary counts.
type pullCounts struct{ heads, manifests, blobs int }

// pulls counts them for the paths that begin with prefix.
func (r *Registry) pulls(prefix string) (pullCounts, error) {
	var p pullCounts
	b, err := os.ReadFile(r.proc.LogPath)
	if err != nil {
		return p, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, "http.request.uri="+prefix) && !strings.Contains(l, `http.request.uri="`+prefix) {
			continue
		}
		// logrus quotes a value only when it must: containerd/v2.2.1 is not.
		ua := strings.Contains(l, "http.request.useragent=containerd/") || strings.Contains(l, `http.request.useragent="containerd/`)
		if !strings.Contains(l, "response completed") || !ua ||
			!strings.Contains(l, "auth.user.name="+RegistryUser) {
			continue
		}
		switch {
		case strings.Contains(l, "/manifests/") && strings.Contains(l, "http.request.method=HEAD"):
			p.heads++
		case strings.Contains(l, "/manifests/") && strings.Contains(l, "http.request.method=GET"):
			p.manifests++
		case strings.Contains(l, "/blobs/") && strings.Contains(l, "http.request.method=GET"):
			p.blobs++
		}
	}
	return p, nil
}

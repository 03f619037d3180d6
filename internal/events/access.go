package events

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/podenv"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/yamljson"
)

// access is where the API server is and who to be there: a kubeconfig's current context, or the pod's
// service account. Credentials in files are read at each request, so that a rotated one is used as soon as it
// is written.
type access struct {
	server     string // https://host:port, with the path prefix a proxy in front of the API server may need
	serverName string // the name the API server's certificate is checked for, when not the server's host
	insecure   bool   // its certificate is not checked (insecure-skip-tls-verify)
	proxy      func(*http.Request) (*url.URL, error)
	ca         source // PEM; none: the system's roots
	cert, key  source // PEM client certificate and key
	token      source // a bearer token
	username   string // HTTP basic authentication, without a token
	password   string
	namespace  string // the context's namespace (Reader); empty: none said
}

// source is a credential: bytes a kubeconfig holds inline, or a file read each time it is used.
type source struct {
	data []byte
	file string
}

func (s source) read() ([]byte, error) {
	if s.file == "" {
		return s.data, nil
	}
	b, err := os.ReadFile(s.file)
	if err != nil {
		return nil, fmt.Errorf("reading a credential: %w", err) // the *PathError names the file
	}
	return b, nil
}

// name says where the credential comes from, for errors.
func (s source) name() string {
	if s.file != "" {
		return s.file
	}
	return "(inline)"
}

// serviceAccountDir is where Kubernetes mounts a pod's service account: token, ca.crt, namespace.
const serviceAccountDir = ServiceAccountDir

// ServiceAccountDir is where kubelet mounts a pod's ServiceAccount token (automountServiceAccountToken).
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// podServiceAccountDir is where the in-cluster access is read from: the directory the environment variable
// podenv.ServiceAccountDir names (inject sets it with a token of the manager's own, in a pod that turns
// automountServiceAccountToken off), else serviceAccountDir.
func podServiceAccountDir() string {
	if dir := os.Getenv(podenv.ServiceAccountDir); dir != "" {
		return dir
	}
	return serviceAccountDir
}

// errNotInCluster: no kubeconfig given and no KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT to reach the API
// server from a pod.
var errNotInCluster = errors.New("not running in a cluster and no --kubeconfig given")

// accessFor is the kubeconfig's access, or else the in-cluster one.
func accessFor(kubeconfig string) (access, error) {
	if kubeconfig != "" {
		a, err := readKubeconfig(kubeconfig)
		if err != nil {
			return access{}, fmt.Errorf("reading --kubeconfig %s: %w", kubeconfig, err)
		}
		return a, nil
	}
	return inCluster(podServiceAccountDir())
}

// inCluster is the access of a pod's service account mounted at dir: the API server that the variables
// Kubernetes sets in every container name, its CA and the pod's token (which the kubelet rotates: it is read
// at each request).
func inCluster(dir string) (access, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return access{}, errNotInCluster
	}
	return access{
		server: "https://" + net.JoinHostPort(host, port),
		proxy:  http.ProxyFromEnvironment,
		ca:     source{file: filepath.Join(dir, "ca.crt")},
		token:  source{file: filepath.Join(dir, "token")},
	}, nil
}

// kubeconfig is the part of a kubeconfig file (clientcmd's v1 Config) that is read.
type kubeconfig struct {
	CurrentContext string        `json:"current-context"`
	Contexts       []kubeContext `json:"contexts"`
	Clusters       []struct {
		Name    string      `json:"name"`
		Cluster kubeCluster `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string   `json:"name"`
		User kubeUser `json:"user"`
	} `json:"users"`
}

type kubeContext struct {
	Name    string `json:"name"`
	Context struct {
		Cluster   string `json:"cluster"`
		User      string `json:"user"`
		Namespace string `json:"namespace"`
	} `json:"context"`
}

type kubeCluster struct {
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
	CertificateAuthority     string `json:"certificate-authority"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
	ProxyURL                 string `json:"proxy-url"`
}

type kubeUser struct {
	ClientCertificate     string `json:"client-certificate"`
	ClientCertificateData []byte `json:"client-certificate-data"`
	ClientKey             string `json:"client-key"`
	ClientKeyData         []byte `json:"client-key-data"`
	Token                 string `json:"token"`
	TokenFile             string `json:"tokenFile"`
	Username              string `json:"username"`
	Password              string `json:"password"`
	// Read only to refuse them: a user that needs a program or a plugin for its credentials, or acts as
	// another, cannot be honoured here, and an Event sent as someone else would be wrong.
	Exec           *struct{} `json:"exec"`
	AuthProvider   *struct{} `json:"auth-provider"`
	Impersonate    string    `json:"as"`
	ImpersonateUID string    `json:"as-uid"`
	ImpersonateGrp []string  `json:"as-groups"`
}

// readKubeconfig reads the access of a kubeconfig file's current context: its cluster's server, CA
// (certificate-authority-data, else certificate-authority), tls-server-name, insecure-skip-tls-verify and
// proxy-url (else the proxy of HTTPS_PROXY and NO_PROXY), and its user's client certificate and key (-data,
// else the file), token (else tokenFile), or username and password. Relative paths are the file's directory's,
// as kubectl has them. A user with exec or auth-provider credentials, or impersonation, is an error.
func readKubeconfig(path string) (access, error) {
	return readKubeconfigContext(path, "")
}

// readKubeconfigContext is readKubeconfig of the context named name ("": the current context), with the
// context's namespace.
func readKubeconfigContext(path, name string) (access, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return access{}, err
	}
	var kc kubeconfig
	if err := yamljson.Unmarshal(b, &kc); err != nil {
		return access{}, fmt.Errorf("decoding: %w", err)
	}
	if name == "" {
		name = kc.CurrentContext
	}
	if name == "" {
		return access{}, errors.New("no current-context")
	}
	ci := slices.IndexFunc(kc.Contexts, func(c kubeContext) bool { return c.Name == name })
	if ci < 0 {
		return access{}, fmt.Errorf("no context %q", name)
	}
	ctx := kc.Contexts[ci].Context
	var cluster *kubeCluster
	for i := range kc.Clusters {
		if kc.Clusters[i].Name == ctx.Cluster {
			cluster = &kc.Clusters[i].Cluster
		}
	}
	if cluster == nil {
		return access{}, fmt.Errorf("context %q: no cluster %q", name, ctx.Cluster)
	}
	var user kubeUser // a context without a user is anonymous
	for i := range kc.Users {
		if kc.Users[i].Name == ctx.User {
			user = kc.Users[i].User
		}
	}
	if err := unsupported(user); err != nil {
		return access{}, fmt.Errorf("user %q: %w", ctx.User, err)
	}

	a := access{serverName: cluster.TLSServerName, insecure: cluster.InsecureSkipTLSVerify, proxy: http.ProxyFromEnvironment,
		username: user.Username, password: user.Password, namespace: ctx.Namespace}
	if a.server = cluster.Server; a.server == "" {
		return access{}, fmt.Errorf("cluster %q: no server", ctx.Cluster)
	}
	if !strings.Contains(a.server, "://") {
		a.server = "https://" + a.server
	}
	if _, err := url.Parse(a.server); err != nil {
		return access{}, fmt.Errorf("cluster %q: %w", ctx.Cluster, err)
	}
	if cluster.ProxyURL != "" {
		u, err := url.Parse(cluster.ProxyURL)
		if err != nil {
			return access{}, fmt.Errorf("cluster %q: proxy-url: %w", ctx.Cluster, err)
		}
		a.proxy = http.ProxyURL(u)
	}
	dir := filepath.Dir(path)
	a.ca = sourceOf(cluster.CertificateAuthorityData, cluster.CertificateAuthority, dir)
	if a.insecure && (a.ca.data != nil || a.ca.file != "") {
		return access{}, fmt.Errorf("cluster %q: a certificate authority and insecure-skip-tls-verify together", ctx.Cluster)
	}
	a.cert = sourceOf(user.ClientCertificateData, user.ClientCertificate, dir)
	a.key = sourceOf(user.ClientKeyData, user.ClientKey, dir)
	a.token = sourceOf([]byte(user.Token), user.TokenFile, dir)
	return a, nil
}

// sourceOf is data when there is some, else the file, relative to dir.
func sourceOf(data []byte, file, dir string) source {
	if len(data) > 0 {
		return source{data: data}
	}
	if file != "" && !filepath.IsAbs(file) {
		file = filepath.Join(dir, file)
	}
	return source{file: file}
}

// unsupported says what of a kubeconfig user this package cannot honour, if anything.
func unsupported(u kubeUser) error {
	var what []string
	if u.Exec != nil {
		what = append(what, "exec credentials")
	}
	if u.AuthProvider != nil {
		what = append(what, "an auth-provider")
	}
	if u.Impersonate != "" || u.ImpersonateUID != "" || len(u.ImpersonateGrp) > 0 {
		what = append(what, "impersonation (as)")
	}
	if len(what) == 0 {
		return nil
	}
	return fmt.Errorf("%s: not supported (a client certificate, a token or tokenFile, or a username and password are)", strings.Join(what, " and "))
}

// Package kubeapi is the cluster side's access to the API server, through client-go: the kubeconfig found and
// merged as kubectl does ($KUBECONFIG's files merged, --kubeconfig, --context, else the pod's service account),
// and every credential a kubeconfig can name (exec plugins: the logins of EKS, GKE and AKS; client
// certificates, tokens and token files; basic auth; impersonation; proxies). The kubectl plugin and `check`
// read through it; the pod side never links it (its Events post through internal/events, without client-go).
//
// It GETs and POSTs JSON by path, as the callers already decode into k8s.io/api types themselves: no typed
// clientset is linked.
package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// Client GETs and POSTs the API server's JSON by path.
type Client struct {
	rc  *rest.RESTClient
	cfg *rest.Config // for pods/exec, whose streams are not the REST client's
	// Namespace is the namespace of the kubeconfig's context, the pod's own in a cluster, else "default".
	Namespace string
	// Server is the API server's URL.
	Server string
}

// Timeout bounds one request, connection included: a page of 500 pods from a busy API server.
const Timeout = 30 * time.Second

// New connects as kubectl would with --kubeconfig kubeconfig (empty: $KUBECONFIG's files merged, else
// ~/.kube/config, else the pod's service account) and --context kubeContext (empty: the current context).
// Nothing is sent until the first request; an exec plugin runs then.
func New(kubeconfig, kubeContext, userAgent string) (*Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, errors.New("no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a pod: nothing says which API server to use")
		}
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig's namespace: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = userAgent
	cfg.Timeout = Timeout
	// kubectl's own limits: a status of a large workload asks for each pod's live state.
	cfg.QPS, cfg.Burst = 50, 300
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.AcceptContentTypes = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = statusCodecs()
	rc, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("the API server's client: %w", err)
	}
	server, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("the API server's URL: %w", err)
	}
	return &Client{rc: rc, cfg: cfg, Namespace: ns, Server: server.String()}, nil
}

// statusCodecs decodes the one object the client itself reads: an answer's Status (the reason of a refusal).
func statusCodecs() runtime.NegotiatedSerializer {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s).WithoutConversion()
}

// Get GETs path (as /api/v1/namespaces/NS/pods) with query and returns the answer's body. An answer other
// than 2xx is an error carrying the API server's Status (apierrors.IsNotFound, IsForbidden, … tell them).
func (c *Client) Get(ctx context.Context, path string, query url.Values) ([]byte, error) {
	req := c.rc.Get().AbsPath(path)
	for k, vs := range query {
		for _, v := range vs {
			req.Param(k, v)
		}
	}
	return answer(req.Do(ctx), "GET", path)
}

// Post POSTs body (JSON) to path and returns the answer's body, as Get. The plugin creates nothing with it but
// reviews whose answer is the object itself (a LocalSubjectAccessReview: may this user do that?).
func (c *Client) Post(ctx context.Context, path string, body []byte) ([]byte, error) {
	return answer(c.rc.Post().AbsPath(path).SetHeader("Content-Type", runtime.ContentTypeJSON).Body(body).Do(ctx), "POST", path)
}

// answer is the body of r, or its error: the API server's Status when its answer was one (Result.Error decodes
// it; Raw's error only names the HTTP code).
func answer(r rest.Result, method, path string) ([]byte, error) {
	b, err := r.Raw()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, r.Error())
	}
	return b, nil
}

// Exec runs command in container of pod namespace/name through the API server's pods/exec, as `kubectl exec`
// does (WebSocket, else SPDY where the API server or a proxy in the way refuses the upgrade), with no stdin and
// no TTY, and copies what it writes to stdout and stderr. code is the command's exit status once it ran (0 or
// not); err is the exec's own failure (refused, no such container, the kubelet unreachable), and then code is -1.
func (c *Client) Exec(ctx context.Context, namespace, name, container string, command []string, stdout, stderr io.Writer) (code int, err error) {
	req := c.rc.Post().AbsPath("/api/v1/namespaces/"+url.PathEscape(namespace)+"/pods/"+url.PathEscape(name)+"/exec").
		Param("container", container).Param("stdout", "true").Param("stderr", "true")
	for _, w := range command {
		req.Param("command", w)
	}
	u := req.URL()
	ws, err := remotecommand.NewWebSocketExecutor(c.cfg, http.MethodGet, u.String())
	if err != nil {
		return -1, fmt.Errorf("pods/exec over WebSocket: %w", err)
	}
	sp, err := remotecommand.NewSPDYExecutor(c.cfg, http.MethodPost, u)
	if err != nil {
		return -1, fmt.Errorf("pods/exec over SPDY: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, sp, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return -1, fmt.Errorf("pods/exec: %w", err)
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit) && exit.Exited():
		return exit.ExitStatus(), nil
	}
	return -1, fmt.Errorf("exec in %s/%s container %s: %w", namespace, name, container, err)
}

package kubeapi

import (
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestAnswers: a body is returned as is, the query reaches the server, and a refusal is an error the callers
// can tell apart (apierrors.IsNotFound, IsForbidden) with the API server's own message, or, from something that
// answers no Status (a proxy in the way), with its code. The real API server's answers: test/kube.
func TestAnswers(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/namespaces/ns/pods":
			if got := r.URL.Query().Get("labelSelector"); got != "app in (a,b)" || r.Header.Get("Authorization") != "Bearer T" {
				http.Error(w, "bad query or credentials: "+got, http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"items":[]}`))
		case "/apis/apps/v1/namespaces/ns/deployments/missing":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"deployments.apps \"missing\" not found","reason":"NotFound","code":404}`))
		default:
			http.Error(w, "proxy says no", http.StatusForbidden)
		}
	}))
	defer srv.Close()
	// A token goes over TLS only: the server's certificate is the kubeconfig's CA.
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`", certificate-authority-data: `+ca+`}}]
users: [{name: u, user: {token: T}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: ns}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(kc, "", "test")
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "ns" || c.Server != srv.URL {
		t.Errorf("namespace %q, server %q; want the context's ns and %s", c.Namespace, c.Server, srv.URL)
	}
	b, err := c.Get(t.Context(), "/api/v1/namespaces/ns/pods", url.Values{"labelSelector": {"app in (a,b)"}})
	if err != nil || string(b) != `{"items":[]}` {
		t.Errorf("GET pods = %s, %v", b, err)
	}
	_, err = c.Get(t.Context(), "/apis/apps/v1/namespaces/ns/deployments/missing", nil)
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `deployments.apps "missing" not found`) {
		t.Errorf("GET a missing deployment: %v; want NotFound with the Status's message", err)
	}
	_, err = c.Post(t.Context(), "/apis/authorization.k8s.io/v1/namespaces/ns/localsubjectaccessreviews", []byte(`{}`))
	if !apierrors.IsForbidden(err) {
		t.Errorf("POST refused by a proxy's 403: %v; want Forbidden", err)
	}
}

// TestNoConfiguration: with no kubeconfig and outside a pod, New says so in one line.
func TestNoConfiguration(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := New("", "", "test"); err == nil || !strings.Contains(err.Error(), "no kubeconfig") {
		t.Errorf("New without any configuration: %v", err)
	}
	if _, err := New(filepath.Join(t.TempDir(), "missing"), "", "test"); err == nil {
		t.Error("New with a --kubeconfig that does not exist succeeded")
	}
}

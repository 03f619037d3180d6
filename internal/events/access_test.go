package events

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/podenv"
)

// TestReadKubeconfig: what of a kubeconfig's current context is read (data before files, relative paths from
// the file's directory, token before tokenFile), and what is refused with a reason.
func TestReadKubeconfig(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	const head = "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts: [{name: other, context: {cluster: x, user: x}}, {name: c, context: {cluster: k, user: u}}]\n"
	tests := []struct {
		name    string
		text    string
		want    access // proxy is not compared
		wantErr string
	}{
		{name: "token and CA file, relative", text: head + "clusters: [{name: k, cluster: {server: https://10.0.0.1:6443, certificate-authority: ca.crt}}]\nusers: [{name: u, user: {token: abc, tokenFile: ignored}}]\n",
			want: access{server: "https://10.0.0.1:6443", ca: source{file: "DIR/ca.crt"}, token: source{data: []byte("abc")}}},
		{name: "client certificate data before files", text: head + "clusters: [{name: k, cluster: {server: https://k:443, certificate-authority-data: " + b64("CA") + ", certificate-authority: /ignored}}]\n" +
			"users: [{name: u, user: {client-certificate-data: " + b64("CERT") + ", client-key-data: " + b64("KEY") + ", client-certificate: /ignored}}]\n",
			want: access{server: "https://k:443", ca: source{data: []byte("CA")}, cert: source{data: []byte("CERT")}, key: source{data: []byte("KEY")}}},
		{name: "client certificate files, tokenFile, server name", text: head + "clusters: [{name: k, cluster: {server: 'k:443', tls-server-name: api, certificate-authority: /etc/ca.pem}}]\n" +
			"users: [{name: u, user: {client-certificate: certs/c.pem, client-key: /keys/k.pem, tokenFile: t}}]\n",
			want: access{server: "https://k:443", serverName: "api", ca: source{file: "/etc/ca.pem"}, cert: source{file: "DIR/certs/c.pem"},
				key: source{file: "/keys/k.pem"}, token: source{file: "DIR/t"}}},
		{name: "insecure, basic auth", text: head + "clusters: [{name: k, cluster: {server: https://k, insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {username: a, password: b}}]\n",
			want: access{server: "https://k", insecure: true, username: "a", password: "b"}},
		{name: "no user: anonymous", text: head + "clusters: [{name: k, cluster: {server: https://k}}]\n", want: access{server: "https://k"}},
		{name: "exec", text: head + "clusters: [{name: k, cluster: {server: https://k}}]\nusers: [{name: u, user: {exec: {command: aws}}}]\n",
			wantErr: `user "u": exec credentials: not supported`},
		{name: "impersonation", text: head + "clusters: [{name: k, cluster: {server: https://k}}]\nusers: [{name: u, user: {token: t, as: admin}}]\n",
			wantErr: "impersonation (as): not supported"},
		{name: "insecure with a CA", text: head + "clusters: [{name: k, cluster: {server: https://k, insecure-skip-tls-verify: true, certificate-authority: ca}}]\n",
			wantErr: "a certificate authority and insecure-skip-tls-verify together"},
		{name: "no server", text: head + "clusters: [{name: k, cluster: {}}]\n", wantErr: `cluster "k": no server`},
		{name: "no cluster", text: head, wantErr: `context "c": no cluster "k"`},
		{name: "no current context", text: "apiVersion: v1\nkind: Config\n", wantErr: "no current-context"},
		{name: "not YAML", text: "{", wantErr: "decoding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "kubeconfig")
			if err := os.WriteFile(path, []byte(tt.text), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := readKubeconfig(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.proxy == nil {
				t.Error("no proxy function: want HTTPS_PROXY's")
			}
			got.proxy = nil
			for _, s := range []*source{&tt.want.ca, &tt.want.cert, &tt.want.key, &tt.want.token} {
				s.file = strings.Replace(s.file, "DIR", dir, 1)
			}
			if g, w := describe(got), describe(tt.want); g != w {
				t.Errorf("got  %s\nwant %s", g, w)
			}
		})
	}
}

// TestKubeconfigProxy: proxy-url is the proxy of every request, whatever HTTPS_PROXY says.
func TestKubeconfigProxy(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://env-proxy:3128")
	path := filepath.Join(t.TempDir(), "kubeconfig")
	text := "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k, cluster: {server: https://k, proxy-url: 'socks5://proxy:1080'}}]\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := readKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "https://k/apis", nil)
	if u, err := a.proxy(req); err != nil || u.String() != "socks5://proxy:1080" {
		t.Errorf("proxy = %v, %v; want socks5://proxy:1080", u, err)
	}
}

// describe prints an access for comparison.
func describe(a access) string {
	src := func(s source) string { return "{" + string(s.data) + "|" + s.file + "}" }
	return strings.Join([]string{a.server, a.serverName, map[bool]string{true: "insecure", false: "checked"}[a.insecure],
		"ca" + src(a.ca), "cert" + src(a.cert), "key" + src(a.key), "token" + src(a.token), a.username, a.password}, " ")
}

// TestInCluster: the API server from KUBERNETES_SERVICE_HOST and _PORT (an IPv6 address bracketed), the CA
// and token from the service account's files; without the variables, not in a cluster.
func TestInCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	a, err := inCluster("/sa")
	if err != nil {
		t.Fatal(err)
	}
	if a.server != "https://[fd00::1]:443" || a.ca.file != "/sa/ca.crt" || a.token.file != "/sa/token" || a.proxy == nil {
		t.Errorf("got %s", describe(a))
	}
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	if _, err := inCluster("/sa"); err != errNotInCluster {
		t.Errorf("err = %v, want errNotInCluster", err)
	}
}

// TestServiceAccountDirFromEnv: without a kubeconfig the access is read from the directory that
// SHUTDOWN_MANAGER_SERVICE_ACCOUNT_DIR names (the token inject mounts for the manager's own use), else from
// the default mount.
func TestServiceAccountDirFromEnv(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	t.Setenv(podenv.ServiceAccountDir, "")
	a, err := accessFor("")
	if err != nil {
		t.Fatal(err)
	}
	if a.token.file != serviceAccountDir+"/token" || a.ca.file != serviceAccountDir+"/ca.crt" {
		t.Errorf("default: got %s", describe(a))
	}
	t.Setenv(podenv.ServiceAccountDir, "/run/own")
	if a, err = accessFor(""); err != nil {
		t.Fatal(err)
	}
	if a.token.file != "/run/own/token" || a.ca.file != "/run/own/ca.crt" {
		t.Errorf("%s=/run/own: got %s", podenv.ServiceAccountDir, describe(a))
	}
}

// TestEventJSON: an Event is sent as the API's events.k8s.io/v1 JSON, its time to the microsecond in UTC.
func TestEventJSON(t *testing.T) {
	at := time.Date(2026, 11, 25, 13, 4, 5, 123456789, time.FixedZone("CET", 3600))
	ev := apiEvent{APIVersion: "events.k8s.io/v1", Kind: "Event", objectMeta: objectMeta{Name: "p.1", Namespace: "edge"},
		EventTime: microTime{at}, Regarding: ObjectReference{APIVersion: "v1", Kind: "Pod", Name: "p", Namespace: "edge"},
		ReportingController: Controller, ReportingInstance: "drain@p", Action: "Drain", Reason: ReasonDrained, Note: "n", Type: TypeNormal}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"p.1","namespace":"edge"},"eventTime":"2026-11-25T12:04:05.123456Z",` +
		`"regarding":{"apiVersion":"v1","kind":"Pod","namespace":"edge","name":"p"},"reportingController":"shutdown-manager.io/shutdown-manager",` +
		`"reportingInstance":"drain@p","action":"Drain","reason":"Drained","note":"n","type":"Normal"}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

// TestAnswerError: the reason of a refusal is its Status's; an answer that is no Status is named by its code.
// testdata/status-*.json are kube-apiserver 1.37.2's answers to this package's Event JSON: as a ServiceAccount
// without the Role (403), and with a type it does not know (422).
func TestAnswerError(t *testing.T) {
	tests := []struct {
		code       int
		answer     string
		wantReason string
		wantText   string
	}{
		{403, string(readFile(t, "testdata/status-forbidden.json")), "Forbidden", `cannot create resource "events"`},
		{422, string(readFile(t, "testdata/status-invalid.json")), "Invalid", `Event "envoy-0.2" is invalid: type`},
		{502, "<html>bad gateway</html>", "InternalError", "the API server answered 502 Bad Gateway: <html>bad gateway</html>"},
		{503, "", "ServiceUnavailable", "503 Service Unavailable"},
		{418, "teapot", "Error", "418 I'm a teapot: teapot"},
	}
	for _, tt := range tests {
		err := answerError(tt.code, fmt.Sprintf("%d %s", tt.code, http.StatusText(tt.code)), []byte(tt.answer))
		if got := refusal(err); got != tt.wantReason || !strings.Contains(err.Error(), tt.wantText) {
			t.Errorf("%d %q: reason %q, error %q; want %q, saying %q", tt.code, tt.answer, got, err, tt.wantReason, tt.wantText)
		}
	}
	if got := refusal(os.ErrDeadlineExceeded); got != "Error" {
		t.Errorf("no answer: reason %q, want Error", got)
	}
}

// TestSendTooManyRequests: an Event turned away with 429 is sent again after its Retry-After, maxAttempts times
// in all; a Retry-After beyond the request's deadline is not waited for. The API server cannot be made to
// answer 429 on demand, so an httptest server stands in for it; the token file is read at each request.
func TestSendTooManyRequests(t *testing.T) {
	var mu sync.Mutex
	var answers []int // what the server answers, in order; then 201
	var tokens []string
	var retryAfter string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		tokens = append(tokens, r.Header.Get("Authorization"))
		if r.URL.Path != "/apis/events.k8s.io/v1/namespaces/edge/events" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "unexpected "+r.URL.Path, http.StatusBadRequest)
			return
		}
		if len(answers) > 0 {
			code := answers[0]
			answers = answers[1:]
			w.Header().Set("Retry-After", retryAfter)
			w.WriteHeader(code)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too many requests, please try again later","reason":"TooManyRequests","code":%d}`, code)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	s, err := newSender(access{server: srv.URL, ca: source{data: ca}, token: source{file: tokenFile}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	ev := &apiEvent{objectMeta: objectMeta{Name: "p.1", Namespace: "edge"}, Reason: ReasonDrained}
	send := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return s.send(ctx, ev)
	}
	answer := func(after string, codes ...int) {
		mu.Lock()
		defer mu.Unlock()
		retryAfter, answers = after, codes
	}

	answer("0", 429, 429)
	if err := send(RequestTimeout); err != nil {
		t.Errorf("after two 429: %v, want sent on the third try", err)
	}
	if err := os.WriteFile(tokenFile, []byte("second"), 0o600); err != nil {
		t.Fatal(err)
	}
	answer("0", 429, 429, 429)
	if err := send(RequestTimeout); refusal(err) != "TooManyRequests" {
		t.Errorf("after three 429: %v, want refused as TooManyRequests after %d tries", err, maxAttempts)
	}
	answer("10", 429)
	start := time.Now()
	if err := send(RequestTimeout); refusal(err) != "TooManyRequests" || time.Since(start) >= RequestTimeout {
		t.Errorf("Retry-After 10 s with 5 s left: %v after %s, want refused at once", err, time.Since(start))
	}
	want := []string{"Bearer first", "Bearer first", "Bearer first", "Bearer second", "Bearer second", "Bearer second", "Bearer second"}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(tokens, want) {
		t.Errorf("tokens sent %q, want %q", tokens, want)
	}
}

// A context other than the current one is read when named (the kubectl plugin's --context), with its namespace.
func TestReadKubeconfigContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	text := "current-context: a\ncontexts: [{name: a, context: {cluster: ka, namespace: one}}, {name: b, context: {cluster: kb, namespace: two}}]\n" +
		"clusters: [{name: ka, cluster: {server: https://a}}, {name: kb, cluster: {server: https://b}}]\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ context, server, namespace string }{{"", "https://a", "one"}, {"b", "https://b", "two"}} {
		a, err := readKubeconfigContext(path, tt.context)
		if err != nil || a.server != tt.server || a.namespace != tt.namespace {
			t.Errorf("context %q: server %q, namespace %q, %v; want %q, %q", tt.context, a.server, a.namespace, err, tt.server, tt.namespace)
		}
	}
	if _, err := readKubeconfigContext(path, "c"); err == nil || !strings.Contains(err.Error(), `no context "c"`) {
		t.Errorf("context c: %v, want no context", err)
	}
}

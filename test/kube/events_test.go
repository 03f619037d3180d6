package kube

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/image"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/podenv"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testpki"
)

// The Events client (internal/events) against a real kube-apiserver, in each way it can be let in: a
// kubeconfig's token, tokenFile (rotated while the client runs) and client certificate, and the pod's service
// account (the real binary, with the token and CA at the path Kubernetes mounts them). Each Event is read back
// with kubectl, as a user would.

const eventsNS = "edge"

// eventsAPI starts kube-apiserver trusting client certificates of the returned CA, with namespace edge, the
// deploy's ServiceAccount envoy and its Role (deploy/common/envoy-events-rbac.yaml), that Role also bound to the
// client-certificate user "drainer", and a ServiceAccount "unbound" the Role is not bound to.
func eventsAPI(t *testing.T) (*kubetest.APIServer, *testpki.CA) {
	t.Helper()
	ca, err := testpki.NewCA("kube clients")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "client-ca.crt")
	writeFile(t, caFile, ca.PEM)
	api := kubetest.StartWith(t, kubetest.Config{ExtraArgs: []string{"--client-ca-file=" + caFile}})
	api.Kubectl(t, "create", "namespace", eventsNS)
	api.Kubectl(t, "apply", "-n", eventsNS, "-f", filepath.Join(repoRoot, "deploy", "common", "envoy-events-rbac.yaml"))
	api.Kubectl(t, "create", "rolebinding", "-n", eventsNS, "drainer-events", "--role=shutdown-manager-events", "--user=drainer")
	api.Kubectl(t, "create", "serviceaccount", "-n", eventsNS, "unbound")
	return api, ca
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// kubeEvent is the part of a core/v1 Event (what `kubectl get events` lists) the tests read.
type kubeEvent struct {
	Reason            string    `json:"reason"`
	Message           string    `json:"message"`
	Type              string    `json:"type"`
	EventTime         time.Time `json:"eventTime"`
	ReportingInstance string    `json:"reportingInstance"`
}

// podEvents is "Type Reason: message" of each Event about pod, oldest first, as `kubectl get events` lists them.
func podEvents(t *testing.T, api *kubetest.APIServer, pod string) []string {
	t.Helper()
	out := api.Kubectl(t, "get", "events", "-n", eventsNS, "--field-selector", "involvedObject.name="+pod, "-o", "json")
	var list struct{ Items []kubeEvent }
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("kubectl get events: %v\n%s", err, out)
	}
	slices.SortStableFunc(list.Items, func(a, b kubeEvent) int { return a.EventTime.Compare(b.EventTime) })
	var got []string
	for _, e := range list.Items {
		got = append(got, e.Type+" "+e.Reason+": "+e.Message)
	}
	return got
}

// token is a token of ServiceAccount sa of the namespace, as `kubectl create token` makes one.
func token(t *testing.T, api *kubetest.APIServer, sa string) string {
	t.Helper()
	return strings.TrimSpace(api.Kubectl(t, "create", "token", "-n", eventsNS, sa))
}

// kubeconfig writes a kubeconfig for api into dir with the cluster and user fields given (YAML flow-map
// entries) and returns its path.
func kubeconfig(t *testing.T, api *kubetest.APIServer, dir, cluster, user string) string {
	t.Helper()
	path := filepath.Join(dir, "kubeconfig")
	writeFile(t, path, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, %s}}]
users: [{name: u, user: {%s}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, api.URL, cluster, user))
	return path
}

// recorder is an Events client for a kubeconfig and the pod, with its log.
type recorder struct {
	*events.Client
	log *syncBuffer
}

// syncBuffer is a log the client's goroutine writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newRecorder(t *testing.T, kubeconfig, pod string) recorder {
	t.Helper()
	return newRecorderUID(t, kubeconfig, pod, "")
}

// newRecorderUID is newRecorder for the pod of that UID.
func newRecorderUID(t *testing.T, kubeconfig, pod, uid string) recorder {
	t.Helper()
	buf := &syncBuffer{}
	c := events.New(events.Config{Kubeconfig: kubeconfig, Pod: pod, Namespace: eventsNS, UID: uid, Component: "test"},
		slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if !c.Enabled() {
		t.Fatalf("events disabled: %s", buf.String())
	}
	return recorder{Client: c, log: buf}
}

// waitLog waits until the client's log says text.
func (r recorder) waitLog(t *testing.T, text string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(r.log.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("the client's log does not say %s after a minute:\n%s", text, r.log.String())
		}
		<-tick.C
	}
}

// close sends what is queued, waiting longer than a command would (events.CloseWait): the test is about where
// the Events land, not about how long a busy machine takes to send them.
func (r recorder) close() { r.Close(time.Minute) }

func (r recorder) warnings() []string {
	var w []string
	for l := range strings.Lines(r.log.String()) {
		if strings.Contains(l, `"level":"WARN"`) {
			w = append(w, strings.TrimSpace(l))
		}
	}
	return w
}

// TestEventsKubeconfig: Events land with each kind of kubeconfig credentials; a service account the Role is not
// bound to is refused, with one warning saying so.
func TestEventsKubeconfig(t *testing.T) {
	api, clientCA := eventsAPI(t)
	serverCA, err := os.ReadFile(api.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	drainer, err := clientCA.Client("drainer")
	if err != nil {
		t.Fatal(err)
	}
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	tests := []struct {
		name          string
		cluster, user func(dir string) string // the kubeconfig's fields; files written into dir
		want          string
	}{
		{name: "token, CA file", want: "Normal Drained: token",
			cluster: func(string) string { return fmt.Sprintf("certificate-authority: %q", api.CAFile) },
			user:    func(string) string { return fmt.Sprintf("token: %q", token(t, api, "envoy")) }},
		{name: "client certificate files, relative", want: "Normal Drained: client certificate files",
			cluster: func(dir string) string {
				writeFile(t, filepath.Join(dir, "ca.crt"), serverCA)
				return "certificate-authority: ca.crt"
			},
			user: func(dir string) string {
				writeFile(t, filepath.Join(dir, "drainer.crt"), drainer.CertPEM)
				writeFile(t, filepath.Join(dir, "drainer.key"), drainer.KeyPEM)
				return "client-certificate: drainer.crt, client-key: drainer.key"
			}},
		{name: "client certificate data", want: "Normal Drained: client certificate data",
			cluster: func(string) string { return "certificate-authority-data: " + b64(serverCA) },
			user: func(string) string {
				return "client-certificate-data: " + b64(drainer.CertPEM) + ", client-key-data: " + b64(drainer.KeyPEM)
			}},
		{name: "forbidden", want: "",
			cluster: func(string) string { return "certificate-authority-data: " + b64(serverCA) },
			user:    func(string) string { return fmt.Sprintf("token: %q", token(t, api, "unbound")) }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			pod := fmt.Sprintf("envoy-%d", i)
			r := newRecorder(t, kubeconfig(t, api, dir, tt.cluster(dir), tt.user(dir)), pod)
			r.Record(events.Event{Type: events.TypeNormal, Reason: events.ReasonDrained, Note: strings.TrimPrefix(tt.want, "Normal Drained: ")})
			r.close()
			if got := strings.Join(podEvents(t, api, pod), "; "); got != tt.want {
				t.Errorf("events %q, want %q", got, tt.want)
			}
			w := r.warnings()
			if tt.want != "" && len(w) != 0 {
				t.Errorf("warnings %q, want none", w)
			}
			if tt.want == "" && (len(w) != 1 || !strings.Contains(w[0], `"refusal":"Forbidden"`) || !strings.Contains(w[0], "forbidden")) {
				t.Errorf("warnings %q, want one: refused as Forbidden", w)
			}
		})
	}
}

// TestEventsTokenRotation: a client whose token file is rewritten sends its next Event with the new token. The
// file goes from a token of the ServiceAccount envoy (the Role's) to one of unbound and back: the Event sent
// in between is refused, the others land. (Deleting the first token's bound object would not show it: the API
// server keeps a token it has accepted for a few seconds.)
func TestEventsTokenRotation(t *testing.T) {
	api, _ := eventsAPI(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	writeFile(t, tokenFile, []byte(token(t, api, "envoy")))
	r := newRecorder(t, kubeconfig(t, api, dir, fmt.Sprintf("certificate-authority: %q", api.CAFile), "tokenFile: token"), "rotated")
	r.Record(events.Event{Type: events.TypeNormal, Reason: events.ReasonDrainStarted, Note: "as envoy"})
	waitEvents(t, api, "rotated", 1)

	writeFile(t, tokenFile, []byte(token(t, api, "unbound")))
	r.Record(events.Event{Type: events.TypeNormal, Reason: events.ReasonDrained, Note: "as unbound"})
	r.waitLog(t, `"refusal":"Forbidden"`)

	writeFile(t, tokenFile, []byte(token(t, api, "envoy")))
	r.Record(events.Event{Type: events.TypeNormal, Reason: events.ReasonDrainStarted, Note: "as envoy again"})
	r.close()
	want := []string{"Normal DrainStarted: as envoy", "Normal DrainStarted: as envoy again"}
	if got := podEvents(t, api, "rotated"); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if w := r.warnings(); len(w) != 1 || !strings.Contains(w[0], "system:serviceaccount:edge:unbound") {
		t.Errorf("warnings %q, want one: the Event sent as unbound refused", w)
	}
}

// waitEvents waits until pod has n Events: the client sends off the caller's path, and says nothing when done.
func waitEvents(t *testing.T, api *kubetest.APIServer, pod string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for len(podEvents(t, api, pod)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("pod %s has %q after a minute, want %d Events", pod, podEvents(t, api, pod), n)
		}
		<-tick.C
	}
}

// TestEventsInCluster: the real pod binary in hook mode, given no kubeconfig, records its Events as the pod's
// service account: KUBERNETES_SERVICE_HOST and _PORT name the API server, and the token and CA are read from
// /var/run/secrets/kubernetes.io/serviceaccount, mounted there (in a mount namespace of the test's own, as
// the kubelet would in a pod) from a directory holding a token of the deploy's ServiceAccount envoy and the
// API server's CA. No Envoy runs (a PID namespace of its own shows no Envoy process, the hook's evidence that
// Envoy is gone): the drain ends EnvoyGone, which is an Event too.
func TestEventsInCluster(t *testing.T) {
	if os.Geteuid() != 0 || lookPath("unshare") != nil || lookPath("mount") != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("this test needs root, unshare and mount (util-linux) to mount the service account where Kubernetes does")
		}
		t.Skip("needs root, unshare and mount")
	}
	api, _ := eventsAPI(t)
	bin := buildManager(t, "./cmd/shutdown-manager-pod") // the binary in the pod
	sa := t.TempDir()
	serverCA, err := os.ReadFile(api.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(sa, "ca.crt"), serverCA)
	writeFile(t, filepath.Join(sa, "token"), []byte(token(t, api, "envoy")))
	writeFile(t, filepath.Join(sa, "namespace"), []byte(eventsNS))
	uid := createPod(t, api, "hooked")
	u, err := url.Parse(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(u.Host)
	gone, err := net.Listen("tcp", "127.0.0.1:0") // a port of Envoy's admin that nothing answers on
	if err != nil {
		t.Fatal(err)
	}
	admin := "http://" + gone.Addr().String()
	gone.Close()

	const mountSA = `mount -t tmpfs run /var/run && mkdir -p /var/run/secrets/kubernetes.io/serviceaccount &&
mount --bind "$0" /var/run/secrets/kubernetes.io/serviceaccount && exec "$@"`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc", "--kill-child", "--", "sh", "-c", mountSA, sa,
		bin, "drain", "--admin-address", admin, "--min-drain-duration", "1s", "--drain-timeout", "30s", "--log-level", "debug")
	cmd.Env = []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port,
		podenv.Name + "=hooked", podenv.Namespace + "=" + eventsNS, podenv.UID + "=" + uid, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	want := []string{"Normal DrainStarted: drain started by command drain; releases within 30s at the latest", "Warning EnvoyGone: "}
	got := podEvents(t, api, "hooked")
	if len(got) != 2 || got[0] != want[0] || !strings.HasPrefix(got[1], want[1]) {
		t.Errorf("events %q, want %q…", got, want)
	}
	described := describedEvents(t, api, "hooked")
	if len(described) != 2 || !strings.Contains(described[0], "DrainStarted") || !strings.Contains(described[1], "EnvoyGone") {
		t.Errorf("kubectl describe pod hooked lists the Events\n%s\nwant DrainStarted, EnvoyGone", strings.Join(described, "\n"))
	}
	for l := range strings.Lines(string(out)) { // the drain warns that Envoy is unreachable; Events must not
		if strings.Contains(l, `"level":"WARN"`) && strings.Contains(l, "kubernetes events") {
			t.Errorf("warning: %s", l)
		}
	}
}

func lookPath(name string) error {
	_, err := exec.LookPath(name)
	return err
}

// buildManager builds the main package pkg (./cmd/shutdown-manager, the full CLI, or ./cmd/shutdown-manager-pod,
// the pod binary, with its own build flags) as `make build` does, named shutdown-manager, and returns its path.
func buildManager(t *testing.T, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shutdown-manager")
	args := []string{"build", "-trimpath"}
	if pkg == image.MainPackage {
		args = append(args, image.PodBuildFlags...) // as the pod image's
	}
	build := exec.Command("go", append(args, "-o", bin, pkg)...)
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building shutdown-manager: %v\n%s", err, out)
	}
	return bin
}

// createPod creates a pod in the namespace (no kubelet runs it) and returns its UID.
func createPod(t *testing.T, api *kubetest.APIServer, name string) string {
	t.Helper()
	api.Kubectl(t, "run", name, "-n", eventsNS, "--image=envoyproxy/envoy:v1.36.2", "--restart=Never",
		"--overrides", `{"spec":{"serviceAccountName":"envoy","automountServiceAccountToken":false}}`)
	return strings.TrimSpace(api.Kubectl(t, "get", "pod", name, "-n", eventsNS, "-o", "jsonpath={.metadata.uid}"))
}

// describedEvents is the rows of the Events table `kubectl describe pod` prints (kubectl selects them by the
// pod's name, namespace, kind and UID: involvedObject.uid).
func describedEvents(t *testing.T, api *kubetest.APIServer, pod string) []string {
	t.Helper()
	out := api.Kubectl(t, "describe", "pod", pod, "-n", eventsNS)
	_, table, ok := strings.Cut(out, "\nEvents:")
	if !ok {
		t.Fatalf("kubectl describe pod %s prints no Events section:\n%s", pod, out)
	}
	var rows []string
	for l := range strings.Lines(table) {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] == "Type" || strings.HasPrefix(f[0], "---") || f[0] == "<none>" {
			continue
		}
		rows = append(rows, strings.TrimSpace(l))
	}
	return rows
}

// TestEventsDescribePod: an Event whose regarding names the pod's UID is listed by `kubectl describe pod`;
// one without it (a pod injected before SHUTDOWN_MANAGER_POD_UID) is recorded, and `kubectl get events` lists
// it, but describe does not. The commands of docs/observability-alerts.md (its ```sh block) list the first.
func TestEventsDescribePod(t *testing.T) {
	api, _ := eventsAPI(t)
	uid := createPod(t, api, "described")
	cfg := kubeconfig(t, api, t.TempDir(), fmt.Sprintf("certificate-authority: %q", api.CAFile), fmt.Sprintf("token: %q", token(t, api, "envoy")))
	const with, without = "with the pod's uid", "without a uid"
	for _, r := range []struct{ uid, reason, note string }{{uid, events.ReasonDrainTimedOut, with}, {"", events.ReasonDrained, without}} {
		rec := newRecorderUID(t, cfg, "described", r.uid)
		rec.Record(events.Event{Type: events.TypeWarning, Reason: r.reason, Note: r.note})
		rec.close()
		if w := rec.warnings(); len(w) != 0 {
			t.Errorf("warnings %q", w)
		}
	}
	if got := podEvents(t, api, "described"); len(got) != 2 {
		t.Fatalf("kubectl get events lists %q, want both Events", got)
	}
	got := describedEvents(t, api, "described")
	if len(got) != 1 || !strings.Contains(got[0], events.ReasonDrainTimedOut) || !strings.HasSuffix(got[0], with) {
		t.Errorf("kubectl describe pod lists the Events\n%s\nwant only the one with the pod's uid", strings.Join(got, "\n"))
	}

	page, err := os.ReadFile(filepath.Join(repoRoot, "docs", "observability-alerts.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```sh\n(.*?)```").FindSubmatch(page)
	if m == nil {
		t.Fatal("docs/observability-alerts.md has no ```sh block")
	}
	for line := range strings.Lines(string(m[1])) {
		words := strings.Fields(strings.NewReplacer("POD", "described", "NAMESPACE", eventsNS).Replace(line))
		if len(words) < 2 || words[0] != "kubectl" {
			t.Errorf("docs/observability-alerts.md: %q is not a kubectl command", line)
			continue
		}
		out := api.Kubectl(t, words[1:]...)
		if !strings.Contains(out, with) || (words[1] == "describe" && strings.Contains(out, without)) {
			t.Errorf("docs/observability-alerts.md: %s printed\n%s\nwant the Event with the pod's uid (and describe, not the other)", strings.TrimSpace(line), out)
		}
	}
}

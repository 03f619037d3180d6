//go:build e2e && linux

package e2e

// Contour's Envoy pod on the real kubelet (issue 18 item 4): the pod template of Contour's own Envoy DaemonSet,
// read from Contour's module (internal/peers: github.com/projectcontour/contour examples/render/contour.yaml), with
// Contour's real `contour` binary (built from the Go module proxy by scripts/kube-binaries.sh --contour) as its
// shutdown manager, deleted and rolled under the e2e's load: once as Contour ships it (the control: its figures are
// reported, not asserted) and once taken over by `shutdown-manager inject --takeover` (0 failed, no
// FailedPreStopHook, our DrainStarted and Drained Events on every pod that went).
//
// What is changed in Contour's pod, and why (each edit must apply: contourEdits fails when Contour's template no
// longer has what it removes):
//   - Images: Contour's image is replaced by ContourImage (the built binary at /bin/contour, as in Contour's image),
//     Envoy's by EnvoyImage (the newest pinned Envoy; Contour renders distroless-v1.38.9). Nothing is pulled here.
//   - hostPorts 80 and 443 are dropped: the pod runs under a Deployment of 3 replicas on one node (below), and only
//     one pod per node can hold a hostPort. (make e2e-fleet's contour-fleet scenarios keep them: contourShape.)
//   - The init container envoy-initconfig (`contour bootstrap` with Contour's xDS address and client certificates)
//     is replaced by a ConfigMap holding a bootstrap that the real `contour bootstrap` wrote (run on the host, same
//     admin socket /admin/admin.sock), with its xDS parts (dynamic_resources, the `contour` cluster) replaced by the
//     static listeners Contour would serve over xDS for one route (the RTDS runtime layer goes too; its admin layer stays): `ingress_http` on 8080 (Contour's HTTP manager
//     prefix, its 60 s connection idle timeout) and `stats-health` on 8002 (/ready, /stats to the admin socket). No
//     Contour control plane runs, so its xDS server, the `envoycert` Secret and its volume are not there either.
//   - The DaemonSet's pod template runs under a Deployment of 3 replicas: on a single node a DaemonSet has one pod,
//     and deleting it would leave the Service with no endpoint at all, whatever the drain.
//   - Taken over with --admin-address=unix:///admin/admin.sock: without the init container nothing in the pod
//     writes Envoy's -c file, and the takeover refuses to guess the admin address (docs/migrate.md).
//   - Taken over only: the chart's Events RBAC is applied as docs/migrate-contour.md installs it (helm template of
//     charts/shutdown-manager's events-rbac.yaml with events.namespaces the scenario's namespace and
//     events.allServiceAccounts). Contour's automountServiceAccountToken: false stays: the takeover mounts a token
//     of the manager's own (inject's --api-token, the default), with which our manager records its Events.
// Contour's grace period (300 s), securityContext (user 65534), volumes /admin, probes and Envoy's arguments stay.

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
)

// ContourImage holds the `contour` binary built from the version internal/peers reads the manifests of.
const ContourImage = "e2e/contour:" + peers.ContourVersion

// contourScenarios: Contour's pod as shipped (the control), then taken over.
var contourScenarios = []scenario{
	{name: "contour-shipped-delete-pod", peer: "contour", action: "delete-pod"},
	{name: "contour-shipped-rollout", peer: "contour", action: "rollout"},
	{name: "contour-takeover-delete-pod", peer: "contour", inject: []string{"--takeover"}, action: "delete-pod"},
	{name: "contour-takeover-rollout", peer: "contour", inject: []string{"--takeover"}, action: "rollout"},
}

// contourSource is the document of Contour's module whose pod template the scenarios run.
const contourSource = "examples/render/contour.yaml#"

// contourBinary returns the `contour` that scripts/kube-binaries.sh --contour built (make e2e builds it).
func contourBinary(tb testing.TB) string {
	tb.Helper()
	dir, err := binDir("--print-contour-dir", []string{"contour"}, "scripts/kube-binaries.sh")
	if err != nil {
		unavailable(tb, "%v", err)
	}
	return filepath.Join(dir, "contour")
}

// importContourImage writes ContourImage (the binary at /bin/contour, PATH=/bin: Contour's pod runs /bin/contour
// and `contour`) and imports it into the cluster's containerd.
func importContourImage(ctx context.Context, t *testing.T, c *Cluster, bin string) {
	t.Helper()
	began := time.Now()
	archive := writeContourImage(t, c, bin)
	if out, err := c.ctr(ctx, "images", "import", archive); err != nil {
		t.Fatalf("importing %s: %v: %s", ContourImage, err, out)
	}
	t.Logf("%s written and imported in %s", ContourImage, time.Since(began).Round(time.Millisecond))
}

// writeContourImage writes ContourImage (bin at /bin/contour, PATH=/bin) into a docker-archive tar in the
// cluster's directory, for `ctr images import`, and returns its path.
func writeContourImage(t *testing.T, c *Cluster, bin string) string {
	t.Helper()
	img, err := contourImageOf(bin)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ContourImage)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(c.Dir, "contour-image.tar")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatalf("writing %s: %v", archive, err)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (%d MB) written to %s", ContourImage, fi.Size()>>20, archive)
	return archive
}

// contourImageOf is an image of the `contour` at bin, as Contour's: /bin/contour, PATH=/bin (Contour's pods run
// /bin/contour and `contour`).
func contourImageOf(bin string) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	return newImage([]file{{"/bin/contour", data, 0o555}}, []string{"/bin/contour"}, []string{"PATH=/bin"})
}

// contourShape is how a scenario runs Contour's Envoy pod: the edits contourEdits makes beyond those the file's
// comment lists for every scenario.
type contourShape struct {
	// events mounts the ServiceAccount token (Contour sets automountServiceAccountToken: false): our manager records
	// its Events with it.
	events bool
	// hostPorts keeps Envoy's hostPorts (80 and 443: the pod runs as a DaemonSet, one per node); without it, the
	// hostPorts are dropped.
	hostPorts bool
	// readyHostPort gives the `metrics` port (8002, Envoy's /ready) a hostPort too (with hostPorts): a load balancer
	// in front of the nodes checks it there.
	readyHostPort bool
	// noManager removes Contour's manager: its shutdown-manager container and Envoy's preStop hook that calls it.
	noManager bool
}

// contourDaemonSet returns Contour's Envoy DaemonSet as its module ships it, and the document it came from.
func contourDaemonSet(t *testing.T) (*appsv1.DaemonSet, string) {
	t.Helper()
	for _, w := range peers.Of(t, "contour") {
		if w.Kind == "DaemonSet" && w.Name == "envoy" && strings.Contains(w.Source, contourSource) {
			ds := &appsv1.DaemonSet{}
			if err := yaml.UnmarshalStrict(w.YAML, ds); err != nil {
				t.Fatalf("%s: %v", w.Source, err)
			}
			return ds, w.Source
		}
	}
	t.Fatalf("no DaemonSet envoy in %s@%s/%s", peers.ContourModule, peers.ContourVersion, contourSource)
	return nil, ""
}

// contourDeployment returns Contour's Envoy DaemonSet's pod template under a Deployment of 3 replicas, edited as
// the file's comment says.
func contourDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	ds, source := contourDaemonSet(t)
	spec := ds.Spec.Template.Spec.DeepCopy()
	if err := contourEdits(spec, contourShape{}); err != nil {
		t.Fatalf("%s: %v: update test/e2e/contour_test.go", source, err)
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name, Labels: ds.Labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(3)),
			Selector: ds.Spec.Selector,
			Template: corev1.PodTemplateSpec{ObjectMeta: ds.Spec.Template.ObjectMeta, Spec: *spec},
		},
	}
}

// contourEdits makes the edits the file's comment lists, and shape's; each must find what it changes.
func contourEdits(spec *corev1.PodSpec, shape contourShape) error {
	find := func(cs []corev1.Container, n string) (*corev1.Container, error) {
		i := slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("no container %q", n)
		}
		return &cs[i], nil
	}
	mgr, err := find(spec.Containers, "shutdown-manager")
	if err != nil {
		return err
	}
	envoy, err := find(spec.Containers, "envoy")
	if err != nil {
		return err
	}
	if !strings.HasPrefix(mgr.Image, "ghcr.io/projectcontour/contour:") || !strings.Contains(envoy.Image, "envoyproxy/envoy:") {
		return fmt.Errorf("images %q and %q are not Contour's and Envoy's", mgr.Image, envoy.Image)
	}
	mgr.Image, envoy.Image = ContourImage, EnvoyImage
	hostPorts := 0
	for i := range envoy.Ports {
		if envoy.Ports[i].HostPort != 0 {
			hostPorts++
			if !shape.hostPorts {
				envoy.Ports[i].HostPort = 0
			}
		}
	}
	if hostPorts == 0 {
		return fmt.Errorf("Envoy has no hostPort")
	}
	if shape.hostPorts && shape.readyHostPort {
		// The one port added: the load balancer outside health-checks each node's Envoy readiness, which Contour
		// serves on the `metrics` port (8002, the stats listener's /ready, what its readinessProbe calls). Contour
		// gives that port no hostPort (kubelet's probe reaches the pod's own address); a load balancer in front of
		// the nodes needs one.
		i := slices.IndexFunc(envoy.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" })
		if i < 0 || envoy.Ports[i].ContainerPort != 8002 || envoy.Ports[i].HostPort != 0 {
			return fmt.Errorf("Envoy has no port metrics 8002 without a hostPort: %v", envoy.Ports)
		}
		envoy.Ports[i].HostPort = 8002
	}
	if shape.noManager {
		n := len(spec.Containers)
		spec.Containers = slices.DeleteFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "shutdown-manager" })
		if len(spec.Containers) == n {
			return fmt.Errorf("no container shutdown-manager")
		}
		envoy, err = find(spec.Containers, "envoy") // the slice moved
		if err != nil {
			return err
		}
		hook := envoy.Lifecycle
		if hook == nil || hook.PreStop == nil || hook.PreStop.HTTPGet == nil || hook.PreStop.HTTPGet.Path != "/shutdown" {
			return fmt.Errorf("Envoy has no preStop httpGet /shutdown (Contour's manager): %+v", hook)
		}
		hook.PreStop = nil
		if *hook == (corev1.Lifecycle{}) {
			envoy.Lifecycle = nil
		}
	}
	n := len(spec.InitContainers)
	spec.InitContainers = slices.DeleteFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == "envoy-initconfig" })
	if len(spec.InitContainers) == n {
		return fmt.Errorf("no init container envoy-initconfig")
	}
	config := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "envoy-config" })
	if config < 0 || spec.Volumes[config].EmptyDir == nil {
		return fmt.Errorf("no emptyDir volume envoy-config")
	}
	spec.Volumes[config].VolumeSource = corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: contourBootstrapConfigMap}}}
	n = len(spec.Volumes)
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "envoycert" })
	m := len(envoy.VolumeMounts)
	envoy.VolumeMounts = slices.DeleteFunc(envoy.VolumeMounts, func(v corev1.VolumeMount) bool { return v.Name == "envoycert" })
	if len(spec.Volumes) == n || len(envoy.VolumeMounts) == m {
		return fmt.Errorf("no envoycert volume mounted in Envoy")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		return fmt.Errorf("automountServiceAccountToken is not false")
	}
	if shape.events {
		spec.AutomountServiceAccountToken = new(true)
	}
	return nil
}

// contourBootstrapConfigMap holds the bootstrap at envoy.json, the file Contour's Envoy reads (-c /config/envoy.json).
const contourBootstrapConfigMap = "envoy-bootstrap"

// contourAdminSocket is where `contour bootstrap` puts Envoy's admin API by default, and the takeover reads it.
const contourAdminSocket = "/admin/admin.sock"

// contourListeners are what Contour would serve its Envoy over xDS for one HTTPProxy route to the upstream
// (internal/envoy/v3 of Contour: the HTTP manager `ingress_http` with its default 60 s connection idle timeout, and
// the `stats-health` listener on 8002 routing GET /ready and /stats to the admin socket's cluster), plus the
// upstream's cluster. The route timeout is 60 s, as deploy/'s (Contour leaves Envoy's 15 s default; the e2e's long
// requests are 12 s).
const contourListeners = `
listeners:
- name: ingress_http
  address: {socket_address: {address: 0.0.0.0, port_value: 8080}}
  filter_chains:
  - filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: ingress_http
        common_http_protocol_options: {idle_timeout: 60s}
        http_protocol_options: {accept_http_10: true}
        use_remote_address: true
        normalize_path: true
        preserve_external_request_id: true
        route_config:
          name: ingress_http
          virtual_hosts:
          - name: echo
            domains: ["*"]
            routes:
            - match: {prefix: "/"}
              route: {cluster: echo, timeout: 60s}
        http_filters:
        - name: envoy.filters.http.router
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
- name: stats-health
  address: {socket_address: {address: 0.0.0.0, port_value: 8002}}
  ignore_global_conn_limit: true
  filter_chains:
  - filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: stats
        normalize_path: true
        route_config:
          virtual_hosts:
          - name: backend
            domains: ["*"]
            routes:
            - match: {prefix: /ready, headers: [{name: ":method", string_match: {exact: GET, ignore_case: true}}]}
              route: {cluster: envoy-admin}
            - match: {prefix: /stats, headers: [{name: ":method", string_match: {exact: GET, ignore_case: true}}]}
              route: {cluster: envoy-admin}
        http_filters:
        - name: envoy.filters.http.router
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
clusters:
- name: echo
  type: STATIC
  connect_timeout: 2s
  load_assignment:
    cluster_name: echo
    endpoints:
    - lb_endpoints:
      - endpoint: {address: {socket_address: {address: ` + UpstreamIP + `, port_value: 8080}}}
`

// contourBootstrap runs the real `contour bootstrap` (the init container's arguments without Contour's client
// certificates: no control plane runs) and replaces its xDS parts with contourListeners. It returns the bootstrap
// as JSON.
func contourBootstrap(ctx context.Context, bin, dir string) (string, error) {
	out := filepath.Join(dir, "contour-envoy.json")
	cmd := exec.CommandContext(ctx, bin, "bootstrap", out, "--xds-address=contour", "--xds-port=8001",
		"--xds-resource-version=v3", "--resources-dir="+filepath.Join(dir, "contour-resources"))
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("contour bootstrap: %w: %s", err, b)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return "", err
	}
	var boot map[string]any
	if err := json.Unmarshal(raw, &boot); err != nil {
		return "", fmt.Errorf("contour bootstrap wrote %s: %w", out, err)
	}
	// The admin socket the takeover reads from the pod (Contour's default) must be the one Envoy listens on.
	var admin struct {
		Admin struct {
			Address struct {
				Pipe struct{ Path string }
			}
		}
	}
	if err := json.Unmarshal(raw, &admin); err != nil || admin.Admin.Address.Pipe.Path != contourAdminSocket {
		return "", fmt.Errorf("contour bootstrap put the admin API at %q, not %s (%v)", admin.Admin.Address.Pipe.Path, contourAdminSocket, err)
	}
	if _, ok := boot["dynamic_resources"]; !ok {
		return "", fmt.Errorf("contour bootstrap wrote no dynamic_resources: has its bootstrap changed?")
	}
	delete(boot, "dynamic_resources")
	// The runtime's RTDS layer is xDS too (from the `contour` cluster): the admin layer stays.
	runtime, _ := boot["layered_runtime"].(map[string]any)
	layers, _ := runtime["layers"].([]any)
	keptLayers := slices.DeleteFunc(slices.Clone(layers), func(l any) bool {
		m, _ := l.(map[string]any)
		_, rtds := m["rtds_layer"]
		return rtds
	})
	if len(keptLayers) == len(layers) {
		return "", fmt.Errorf("contour bootstrap wrote no RTDS runtime layer: has its bootstrap changed?")
	}
	runtime["layers"] = keptLayers
	static, _ := boot["static_resources"].(map[string]any)
	clusters, _ := static["clusters"].([]any)
	kept := slices.DeleteFunc(slices.Clone(clusters), func(c any) bool {
		m, _ := c.(map[string]any)
		return m["name"] == "contour"
	})
	if len(kept) == len(clusters) || !slices.ContainsFunc(kept, func(c any) bool { m, _ := c.(map[string]any); return m["name"] == "envoy-admin" }) {
		return "", fmt.Errorf("contour bootstrap's clusters are not `contour` and `envoy-admin`: %v", clusters)
	}
	var add struct {
		Listeners []any `json:"listeners"`
		Clusters  []any `json:"clusters"`
	}
	if err := yaml.Unmarshal([]byte(contourListeners), &add); err != nil {
		return "", err
	}
	static["clusters"] = append(kept, add.Clusters...)
	static["listeners"] = add.Listeners
	b, err := json.MarshalIndent(boot, "", "  ")
	return string(b), err
}

// contourManifests returns the objects of one Contour scenario in namespace ns: the ServiceAccount (and, taken over,
// the chart's Events RBAC for ns), the bootstrap ConfigMap, a ClusterIP Service on Envoy's http port, and the Deployment, taken
// over by `shutdown-manager inject --takeover` when takeover.
func contourManifests(ctx context.Context, t *testing.T, root, manager, contour, dir, ns string, takeover bool) string {
	t.Helper()
	svc := `apiVersion: v1
kind: Service
metadata:
  name: envoy
spec:
  selector:
    app: envoy
  ports:
  - name: http
    port: 80
    targetPort: http
`
	var injectArgs []string
	if takeover {
		injectArgs = []string{"--takeover"}
	}
	text := svc + "\n---\n" + contourObjects(ctx, t, root, manager, contour, dir, contourDeployment(t), false, injectArgs)
	if takeover {
		text += "\n---\n" + chartEventsRBAC(ctx, t, root, ns)
	}
	return text
}

// chartEventsRBAC renders the chart's Events Role and RoleBinding for namespace ns as the migration pages install
// them (events.namespaces={ns}, events.allServiceAccounts=true: every ServiceAccount of ns may record Events).
func chartEventsRBAC(ctx context.Context, t *testing.T, root, ns string) string {
	t.Helper()
	helmDir, err := binDir("--print-dir", []string{"helm"}, "scripts/helm-binary.sh")
	if err != nil {
		unavailable(t, "%v", err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(helmDir, "helm"), "template", ChartRelease, filepath.Join(root, "charts/shutdown-manager"),
		"--namespace", ChartNamespace, "--show-only", "templates/events-rbac.yaml",
		"--set", "image.repository="+ManagerRepository, "--set", "image.tag="+ManagerVersion,
		"--set", "events.namespaces={"+ns+"}", "--set", "events.allServiceAccounts=true")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template events-rbac.yaml: %v: %s", err, stderr.String())
	}
	if !strings.Contains(string(out), "name: system:serviceaccounts:"+ns) {
		t.Fatalf("helm template events-rbac.yaml: no RoleBinding to the group of %s's ServiceAccounts:\n%s", ns, out)
	}
	return string(out)
}

// contourObjects returns the ServiceAccount (with events, the Events RBAC of deploy/ instead), the bootstrap
// ConfigMap and the workload, given to `shutdown-manager inject` with injectArgs unless they are nil.
func contourObjects(ctx context.Context, t *testing.T, root, manager, contour, dir string, workload any, events bool, injectArgs []string) string {
	t.Helper()
	boot, err := contourBootstrap(ctx, contour, dir)
	if err != nil {
		t.Fatal(err)
	}
	cm := corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: contourBootstrapConfigMap}, Data: map[string]string{"envoy.json": boot}}
	sa, err := edit("the ServiceAccount", "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: envoy\n", pullSecretEdits)
	if err != nil {
		t.Fatal(err)
	}
	if events {
		if sa, err = readEdited(root, "deploy/common/envoy-events-rbac.yaml", pullSecretEdits); err != nil {
			t.Fatal(err)
		}
	}
	w, err := yaml.Marshal(workload)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(injectArgs, "--takeover") {
		// Contour's init container that writes Envoy's -c file is replaced here by a ConfigMap, so the pod no
		// longer shows which admin Envoy uses and the takeover refuses without it (docs/migrate.md): give the
		// socket the real `contour bootstrap` put in that file (contourBootstrap checks it is this one).
		injectArgs = append(slices.Clip(injectArgs), "--admin-address=unix://"+contourAdminSocket)
	}
	if injectArgs != nil {
		// The image by name: the e2e's build is a development build, which has no default image.
		cmd := exec.CommandContext(ctx, manager, append(append([]string{"inject", "--image=" + ManagerImage}, injectArgs...), "-f", "-")...)
		cmd.Stdin = strings.NewReader(string(w))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if w, err = cmd.Output(); err != nil {
			t.Fatalf("shutdown-manager inject %s: %v: %s", strings.Join(injectArgs, " "), err, stderr.String())
		}
	}
	cmText, err := yaml.Marshal(cm)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join([]string{sa, string(cmText), string(w)}, "\n---\n")
}

// podContainers lists the containers (init containers first, marked init:) of the Envoy pods of ns, one line each.
func podContainers(ctx context.Context, t *testing.T, c *Cluster, ns string) []string {
	t.Helper()
	out := mustKubectl(ctx, t, c, "-n", ns, "get", "pods", "-l", "app=envoy", "-o",
		`go-template={{range .items}}{{range .spec.initContainers}}init:{{.name}} {{end}}{{range .spec.containers}}{{.name}} {{end}}{{"\n"}}{{end}}`)
	return slices.DeleteFunc(strings.Split(out, "\n"), func(s string) bool { return strings.TrimSpace(s) == "" })
}

// hookFailures returns the messages of the FailedPreStopHook Events about pod (kubelet's: the hook, the container
// and the error).
func hookFailures(ctx context.Context, t *testing.T, c *Cluster, ns, pod string) []string {
	t.Helper()
	out := mustKubectl(ctx, t, c, "-n", ns, "get", "events", "--field-selector", "involvedObject.name="+pod+",reason=FailedPreStopHook",
		"-o", `jsonpath={range .items[*]}{.message}{"\n"}{end}`)
	return slices.DeleteFunc(strings.Split(out, "\n"), func(s string) bool { return strings.TrimSpace(s) == "" })
}

// kubeletHookErrors returns, for each preStop hook of pod that kubelet logged as failed, the container and the
// error (the Event says only "PreStopHook failed": kubelet keeps the message out of it; an exec hook's output is
// not there either).
func kubeletHookErrors(c *Cluster, ns, pod string) []string {
	return kubeletHookErrorsIn(c.kubelet.LogPath, ns, pod)
}

// kubeletHookErrorsIn is kubeletHookErrors in the kubelet log at path (a fleet node's).
func kubeletHookErrorsIn(path, ns, pod string) []string {
	var out []string
	re := regexp.MustCompile(`err="((?:[^"\\]|\\.)*)".*containerName="([^"]*)"`)
	for _, l := range strings.Split(grepLines(path, 100, `"PreStop hook failed"`), "\n") {
		if !strings.Contains(l, `pod="`+ns+"/"+pod+`"`) {
			continue
		}
		if m := re.FindStringSubmatch(l); m != nil {
			out = append(out, m[2]+": "+strings.ReplaceAll(m[1], `\"`, `"`))
		}
	}
	return out
}

// runContourScenario runs one of contourScenarios (see the file's comment).
func runContourScenario(ctx context.Context, t *testing.T, c *Cluster, root, manager, contour string, s scenario) row {
	r := row{scenario: s}
	takeover := slices.Contains(s.inject, "--takeover")
	ns := "e2e-" + s.name
	dir := t.TempDir()
	text := contourManifests(ctx, t, root, manager, contour, dir, ns, takeover)
	mustKubectl(ctx, t, c, "create", "namespace", ns)
	createPullSecret(ctx, t, c, ns)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = c.kubectl(cctx, "delete", "namespace", ns, "--wait=false")
	})
	applyText(ctx, t, c, ns, text)
	mustKubectl(ctx, t, c, "-n", ns, "rollout", "status", "deployment/envoy", "--timeout=300s")
	containers := podContainers(ctx, t, c, ns)
	for _, p := range containers {
		// Contour's manager is there as shipped, gone when taken over (our install container in its place).
		if hasMgr := slices.Contains(strings.Fields(p), "shutdown-manager"); hasMgr == takeover {
			t.Fatalf("pod containers %q: Contour's shutdown-manager container there: %v, want %v", p, hasMgr, !takeover)
		}
	}
	if got := injectedPods(ctx, t, c, ns); got != takeover {
		t.Fatalf("Envoy pods injected: %v, want %v", got, takeover)
	}
	// Contour's pods keep automount off; taken over, they carry the manager's own token (and the shipped pods none).
	for _, p := range strings.Split(strings.TrimSpace(mustKubectl(ctx, t, c, "-n", ns, "get", "pods", "-l", "app=envoy", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.spec.automountServiceAccountToken} {range .spec.volumes[*]}{.name},{end}{"\n"}{end}`)), "\n") {
		f := strings.Fields(p)
		if len(f) != 3 || f[1] != "false" || strings.Contains(f[2], "shutdown-manager-api-access,") != takeover {
			t.Fatalf("pod %q: want automountServiceAccountToken false and the volume shutdown-manager-api-access only when taken over (%v)", p, takeover)
		}
	}
	ip := strings.TrimSpace(mustKubectl(ctx, t, c, "-n", ns, "get", "service", "envoy", "-o", "jsonpath={.spec.clusterIP}"))
	addr := ip + ":80"
	if err := waitOK(ctx, addr); err != nil {
		t.Fatal(err)
	}

	l := startLoads(ctx, t, addr)
	victims := envoyPods(ctx, t, c, ns)
	if s.action == "delete-pod" {
		victims = victims[:1]
	}
	logContainer := "shutdown-manager" // Contour's sidecar; its exec hook's output reaches only kubelet's log
	if takeover {
		logContainer = "envoy" // our hook's log
	}
	logs := map[string]*logFollower{}
	for _, p := range victims {
		logs[p] = followLogs(ctx, c, ns, p, logContainer)
	}
	if !wait(ctx, loadWarmUp) {
		t.Fatal("interrupted")
	}
	began := time.Now()
	switch s.action {
	case "delete-pod":
		mustKubectl(ctx, t, c, "-n", ns, "delete", "pod", victims[0], "--wait=false")
	case "rollout":
		mustKubectl(ctx, t, c, "-n", ns, "rollout", "restart", "deployment/envoy")
	}
	var gone []string
	for _, p := range victims {
		waitGone(ctx, t, c, ns, p)
		gone = append(gone, time.Since(began).Round(100*time.Millisecond).String())
	}
	r.gone = time.Since(began)
	if !wait(ctx, 2*time.Second) {
		t.Fatal("interrupted")
	}
	sum, lat := l.finish()
	r.sent, r.failed, r.errors, r.connectionShut = sum.Sent, sum.Failed, sum.Errors, sum.ConnectionClose
	r.idle = l.idle.Counts()
	r.p99 = percentile(lat, 0.99)

	var failedHooks []string
	missingEvents := 0
	for _, p := range victims {
		f := logs[p]
		select {
		case <-f.done:
		case <-time.After(10 * time.Second):
		}
		if takeover {
			res := f.drainResults()
			if len(res) == 0 {
				res = []string{"no drain logged"}
			}
			r.drain = append(r.drain, res...)
		}
		failed := hookFailures(ctx, t, c, ns, p)
		failedHooks = append(failedHooks, failed...)
		if why := kubeletHookErrors(c, ns, p); len(failed) > 0 {
			r.hooks = append(r.hooks, why...)
		}
		reasons := podEventReasons(ctx, t, c, ns, p)
		r.events = append(r.events, p+": "+strings.Join(reasons, ", "))
		if takeover && (!slices.Contains(reasons, "DrainStarted") || !slices.Contains(reasons, "Drained")) {
			missingEvents++
		}
	}
	if !takeover {
		r.drain = []string{"Contour's (no outcome it logs: see the hooks)"}
	}
	r.failedHooks = len(failedHooks)
	r.note = "old pods gone after " + strings.Join(gone, ", ")
	t.Logf("%s: sent=%d failed=%d errors=%v p99=%s pods gone after %v; drains: %v; FailedPreStopHook: %d (kubelet: %q); events: %q; idle pool: %s; containers: %q",
		s.name, r.sent, r.failed, r.errors, r.p99, gone, r.drain, len(failedHooks), r.hooks, r.events, r.idle, containers)
	switch {
	case ctx.Err() != nil:
		t.Fatal("interrupted")
	case !takeover:
		r.pass = true // the control: reported, not asserted (see REPORT.md)
	case r.failed > 0:
		t.Errorf("taken over: %d of %d requests failed: %v", r.failed, r.sent, r.errors)
	case len(failedHooks) > 0:
		t.Errorf("taken over: FailedPreStopHook: %q", failedHooks)
	case missingEvents > 0:
		t.Errorf("taken over: %d of %d pods without DrainStarted and Drained: %q", missingEvents, len(victims), r.events)
	default:
		r.pass = true
	}
	return r
}

// contourJobs imports the image Contour's pods run (its module's `contour` binary, built and cached) and returns
// its scenarios as jobs; none if that failed (the contour-image subtest says why).
func contourJobs(ctx context.Context, t *testing.T, c *Cluster, root, manager string) []job {
	var contour string
	if !t.Run("contour-image", func(t *testing.T) {
		contour = contourBinary(t) // skips (fails under CI=true) when it was not built
		importContourImage(ctx, t, c, contour)
	}) || contour == "" {
		return nil
	}
	var jobs []job
	for _, s := range contourScenarios {
		jobs = append(jobs, job{s: s, run: func(t *testing.T) row { return runContourScenario(ctx, t, c, root, manager, contour, s) }})
	}
	jobs = append(jobs, job{s: contourPageScenario, run: func(t *testing.T) row { return runContourPage(ctx, t, c, root, contour) }})
	jobs = append(jobs, job{s: contourWebhookPageScenario, run: func(t *testing.T) row { return runContourWebhookPage(ctx, t, c, root, manager, contour) }})
	return jobs
}

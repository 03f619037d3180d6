//go:build e2e && linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// UpstreamIP is the fixed ClusterIP of the upstream's Service. Envoy's bootstrap names this address (a STATIC
// cluster) where deploy/common/envoy-config.yaml names the Service "echo" (STRICT_DNS): the scenarios were written
// and measured before the cluster had a DNS (dns.go, which the Contour page's Envoy uses), and keep the address.
const UpstreamIP = "10.213.128.80"

// UpstreamNamespace holds the one upstream Deployment every scenario's Envoys send to.
const UpstreamNamespace = "e2e-upstream"

// replacement is one edit adaptManifest makes; each must apply, so that a change in deploy/ that breaks an
// assumption fails here instead of testing something else.
type replacement struct{ old, new string }

// Edits of deploy/ for this cluster: local image names, and the upstream by address instead of by DNS name.
var (
	upstreamEdits = []replacement{
		{"image: hashicorp/http-echo:1.0", "image: " + UpstreamImage},
		{"spec:\n  selector:\n    app: echo\n", "spec:\n  clusterIP: " + UpstreamIP + "\n  selector:\n    app: echo\n"},
		// A TCP echo port beside HTTP, for the long-lived TCP connection of the drain-deadline scenario.
		{"    port: 8080\n    targetPort: http\n", "    port: 8080\n    targetPort: http\n  - name: tcp\n    port: 9000\n    targetPort: 9000\n"},
	}
	configEdits = []replacement{
		{"type: STRICT_DNS", "type: STATIC"},
		// WebSockets through the ingress listener, for the WebSocket held past the drain deadline.
		{"              stat_prefix: ingress\n", "              stat_prefix: ingress\n              upgrade_configs: [{upgrade_type: websocket}]\n"},
		{"socket_address: {address: echo, port_value: 8080}", "socket_address: {address: " + UpstreamIP + ", port_value: 8080}"},
		// A TCP proxy listener on 9000 to the upstream's echo port: a connection through it is never drained by Envoy.
		{"      clusters:\n", `      - name: tcp
        address:
          socket_address: {address: 0.0.0.0, port_value: 9000}
        filter_chains:
        - filters:
          - name: envoy.filters.network.tcp_proxy
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
              stat_prefix: tcp
              cluster: echo_tcp
      clusters:
      - name: echo_tcp
        type: STATIC
        connect_timeout: 2s
        load_assignment:
          cluster_name: echo_tcp
          endpoints:
          - lb_endpoints:
            - endpoint:
                address:
                  socket_address: {address: ` + UpstreamIP + `, port_value: 9000}
`},
	}
	// The pods' ServiceAccount names the registry's pull Secret (createPullSecret): the ServiceAccount admission
	// plugin gives its imagePullSecrets to every pod that runs as it, injected containers and image volumes
	// included (docs/install.md).
	pullSecretEdits = []replacement{
		{"kind: ServiceAccount\nmetadata:\n  name: envoy\n", "kind: ServiceAccount\nimagePullSecrets:\n- name: " + PullSecret + "\nmetadata:\n  name: envoy\n"},
	}
	serviceEdits = []replacement{
		{"    port: 80\n    targetPort: http\n", "    port: 80\n    targetPort: http\n  - name: tcp\n    port: 9000\n    targetPort: 9000\n"},
	}
)

func edit(name, text string, edits []replacement) (string, error) {
	for _, e := range edits {
		if !strings.Contains(text, e.old) {
			return "", fmt.Errorf("%s no longer contains %q: update test/e2e/deploy.go", name, e.old)
		}
		text = strings.Replace(text, e.old, e.new, 1)
	}
	return text, nil
}

func readEdited(root, rel string, edits ...[]replacement) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return "", err
	}
	text := string(b)
	for _, e := range edits {
		if text, err = edit(rel, text, e); err != nil {
			return "", err
		}
	}
	return text, nil
}

// envoyManifests returns the objects of one Envoy deployment of deploy/: the bootstrap ConfigMap, the Service and
// the Deployment, the latter injected by `shutdown-manager inject` with injectArgs (nil: the plain Deployment,
// the negative control).
func envoyManifests(ctx context.Context, root, manager string, injectArgs []string) (string, error) {
	return envoyManifestsWith(ctx, root, manager, injectArgs, nil)
}

// envoyManifestsWith is envoyManifests with depEdits made to the Deployment before it is injected.
func envoyManifestsWith(ctx context.Context, root, manager string, injectArgs []string, depEdits []replacement) (string, error) {
	cfg, err := readEdited(root, "deploy/common/envoy-config.yaml", configEdits)
	if err != nil {
		return "", err
	}
	svc, err := readEdited(root, "deploy/common/envoy-service.yaml", serviceEdits)
	if err != nil {
		return "", err
	}
	// The pods run as the ServiceAccount envoy, which may record the managers' Events on them.
	rbac, err := readEdited(root, "deploy/common/envoy-events-rbac.yaml", pullSecretEdits)
	if err != nil {
		return "", err
	}
	pins, err := testbed.Pinned()
	if err != nil {
		return "", err
	}
	// deploy/'s Envoy is the newest pinned release (internal/testbed's TestPinsNamedElsewhere), as is the e2e image's.
	imageEdits := []replacement{{"image: envoyproxy/envoy:v" + pins[0].Version, "image: " + EnvoyImage}}
	dep, err := readEdited(root, "deploy/plain/envoy.yaml", imageEdits, depEdits)
	if err != nil {
		return "", err
	}
	dep = strings.Replace(dep, "        - name: ready\n          containerPort: 8081\n",
		"        - name: ready\n          containerPort: 8081\n        - name: tcp\n          containerPort: 9000\n", 1)
	if injectArgs != nil {
		// The image by name: the e2e's build is a development build, which has no default image. Pulled by
		// every pod, as the chart's injection does (installChart).
		cmd := exec.CommandContext(ctx, manager, append([]string{"inject", "--image=" + ManagerImage, "--image-pull-policy=Always"}, append(injectArgs, "-f", "-")...)...)
		cmd.Stdin = strings.NewReader(dep)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("shutdown-manager inject %s: %w: %s", strings.Join(injectArgs, " "), err, stderr.String())
		}
		dep = string(out)
	}
	return rbac + "\n---\n" + cfg + "\n---\n" + svc + "\n---\n" + dep, nil
}

// annotatedManifests returns the same objects as envoyManifests without injecting them: the Deployment's pod
// template carries the settings as shutdown-manager.io/ annotations (each --flag=value of injectArgs becomes
// shutdown-manager.io/flag: value), for the webhook to inject when the pods are created.
func annotatedManifests(root string, injectArgs []string) (string, error) {
	plain, err := envoyManifests(context.Background(), root, "", nil)
	if err != nil {
		return "", err
	}
	if len(injectArgs) == 0 {
		return plain, nil
	}
	var b strings.Builder
	b.WriteString("  template:\n    metadata:\n      annotations:\n")
	for _, a := range injectArgs {
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok {
			return "", fmt.Errorf("inject flag %q is not --name=value", a)
		}
		fmt.Fprintf(&b, "        %s%s: %q\n", inject.Prefix, k, v)
	}
	return edit("deploy/plain/envoy.yaml", plain, []replacement{{"  template:\n    metadata:\n", b.String()}})
}

// upstreamManifests returns deploy/common/echo.yaml for this cluster.
func upstreamManifests(root string) (string, error) {
	return readEdited(root, "deploy/common/echo.yaml", upstreamEdits)
}

// envoyBinary returns the newest Envoy test/envoy-versions.txt pins (make envoy installs it): the e2e image's.
func envoyBinary(root string) (testbed.Binary, error) {
	bins, err := testbed.FindBinaries()
	if err != nil {
		return testbed.Binary{}, err
	}
	return bins[0], nil // newest first
}

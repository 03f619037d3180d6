package docs

import (
	"regexp"
	"strings"
	"testing"
)

// TestLoadBalancerPage: every fenced block of docs/load-balancers.md is a run of consecutive lines of the HAProxy
// configurations the e2e runs (docs/examples/haproxy.cfg; docs/examples/haproxy-nodes.cfg and haproxy-nodeports.cfg,
// make e2e-fleet's), of the Envoy bootstrap of deploy/ (which test/integration's TestDeployBootstrap runs on real
// Envoy) or of the cloud examples TestCloudExamples checks, so the page cannot drift from what is tested; and the
// page states the check timing the file has.
func TestLoadBalancerPage(t *testing.T) {
	page := readRepo(t, "docs/load-balancers.md")
	var sources [][]string
	for _, f := range []string{"docs/examples/haproxy.cfg", "docs/examples/haproxy-nodes.cfg", "docs/examples/haproxy-nodeports.cfg", "deploy/common/envoy-config.yaml", awsExample, gkeExample} {
		sources = append(sources, strings.Split(readRepo(t, f), "\n"))
	}
	blocks := regexp.MustCompile("(?s)```[a-z]*\n(.*?)```").FindAllStringSubmatch(page, -1)
	if len(blocks) < 2 {
		t.Fatalf("docs/load-balancers.md has %d fenced blocks, want the HAProxy backend and Envoy's readiness manager", len(blocks))
	}
	for _, b := range blocks {
		// A block inside a list item ends with the item's indentation before its closing fence.
		if !isExcerpt(strings.TrimRight(b[1], " "), sources) {
			t.Errorf("a block of docs/load-balancers.md is not a run of lines of docs/examples/haproxy.cfg, haproxy-nodes.cfg, haproxy-nodeports.cfg, deploy/common/envoy-config.yaml, %s or %s:\n%s", awsExample, gkeExample, b[1])
		}
	}
	cfg := readRepo(t, "docs/examples/haproxy.cfg")
	for _, want := range []string{"inter 3s fall 3", "retries 0", "no option redispatch", "option httpchk GET /ready"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("docs/examples/haproxy.cfg no longer has %q, which docs/load-balancers.md explains: update both", want)
		}
	}
	// The cloud stand-in of make e2e-fleet's contour-lb scenarios: kube-proxy's healthCheckNodePort, the timing
	// the page's figures were measured with.
	nodePorts := readRepo(t, "docs/examples/haproxy-nodeports.cfg")
	for _, want := range []string{"inter 3s fall 3", "retries 0", "no option redispatch", "option httpchk GET /healthz"} {
		if !strings.Contains(nodePorts, want) {
			t.Errorf("docs/examples/haproxy-nodeports.cfg no longer has %q, which docs/load-balancers.md explains: update both", want)
		}
	}
}

//go:build e2e && linux

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The cluster's DNS: CoreDNS (scripts/coredns-binary.sh builds it from tools/coredns) on the node's address, port
// 53, answering for the cluster's Services and pods from the API server (its kubernetes plugin) as a cluster's
// kube-dns does; kubelet names that address as every pod's nameserver (clusterDNS), as NodeLocal DNSCache does with
// an address on the node. It runs beside the API server as the other control-plane processes do. No upstream is
// configured (no forward plugin): a name outside the cluster's domain is not resolved, so nothing a pod looks up
// leaves the cluster's networks.
const ClusterDomain = "cluster.local"

// corednsBinaries are built by scripts/coredns-binary.sh from tools/coredns (a package of the tools module).
var corednsBinaries = []string{"coredns"}

// corefile: the cluster's domain and the reverse zones, from the API server with the e2e's kubeconfig, on the
// node's address only (bind); health and readiness on loopback; a 30 s cache (kubeadm's default Corefile has it).
// It serves no other zone: a name outside them is REFUSED (a pod's resolver tries its search domains first, so
// "contour" is found as contour.NAMESPACE.svc.cluster.local).
const corefile = `%[4]s:53 in-addr.arpa:53 ip6.arpa:53 {
    bind %[1]s
    errors
    health 127.0.0.1:%[2]d
    ready 127.0.0.1:%[3]d
    cache 30
    kubernetes %[4]s in-addr.arpa ip6.arpa {
        kubeconfig %[5]s
        pods insecure
    }
}
`

// startDNS starts CoreDNS from the directory bin and waits (a minute at most) until its ready plugin says the
// kubernetes plugin has synced with the API server.
func (c *Cluster) startDNS(ctx context.Context, bin string) error {
	health, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	ready, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	conf := filepath.Join(c.Dir, "Corefile")
	if err := os.WriteFile(conf, fmt.Appendf(nil, corefile, NodeIP, health, ready, ClusterDomain, c.API.Kubeconfig), 0o644); err != nil {
		return err
	}
	c.dns, err = startProc("coredns", filepath.Join(c.LogDir, "coredns.log"), nil, filepath.Join(bin, "coredns"), "-conf", conf)
	if err != nil {
		return err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(ready) + "/ready"
	client := &http.Client{Timeout: 2 * time.Second} // each check; poll bounds them all
	if err := poll(ctx, time.Minute, func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("CoreDNS is not ready: %w\n%s", err, c.dns.LogEnd(20))
	}
	return nil
}

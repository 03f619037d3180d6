// Command coredns is CoreDNS with the plugins make e2e's cluster DNS uses (test/e2e/dns.go): bind, ready,
// health, errors, cache and kubernetes, answering for the cluster's Services and pods as a cluster's kube-dns does.
// CoreDNS's own main links every plugin it ships (the clouds' DNS services, etcd, dnstap, ...); this is the same
// server built with a plugin list of its own, as CoreDNS documents for custom builds, from the module version this
// go.mod requires. scripts/coredns-binary.sh builds it.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	// In the order of CoreDNS's plugin.cfg: a query passes errors, cache, then kubernetes.
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "cache", "kubernetes"}
	coremain.Run()
}

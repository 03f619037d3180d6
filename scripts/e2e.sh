#!/usr/bin/env bash
# make e2e: a real single-node Kubernetes cluster on this machine, injected Envoy pods ended under load (test/e2e).
# Installs what is missing (Debian packages: runc, the CNI plugins, iptables, nftables, conntrack, iproute2, haproxy, curl), builds
# the Kubernetes binaries, containerd 2, Contour's `contour` and Envoy Gateway's `envoy-gateway` into the versioned cache (scripts/kube-binaries.sh; minutes cold, nothing
# warm), Helm (scripts/helm-binary.sh), distribution's registry (scripts/registry-binary.sh), CoreDNS
# (scripts/coredns-binary.sh), the pinned Envoy releases (scripts/install-envoy.sh), then runs the test binary, which
# starts and tears down the cluster itself and installs the chart. Needs root. E2E_INJECT=cli injects with
# `shutdown-manager inject` instead of the chart's webhook. Writes test/e2e/results/REPORT.md (E2E_REPORT overrides; E2E_RUN selects scenarios,
# as -test.run does). E2E_FLEET=1 (make e2e-fleet) runs the multi-node scenarios instead and writes
# test/e2e/results/FLEET.md.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

if [ "$(id -u)" != 0 ]; then
  echo "e2e: needs root (kubelet, containerd and the bridge do)" >&2
  exit 1
fi
need=()
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
command -v nft >/dev/null || need+=(nftables)
command -v conntrack >/dev/null || need+=(conntrack)
command -v ip >/dev/null || need+=(iproute2)
command -v haproxy >/dev/null || need+=(haproxy) # the external load balancer of the lb-* scenarios
command -v curl >/dev/null || need+=(curl) # docs/migrate-contour.md's first command (contour-page)
if [ ${#need[@]} -gt 0 ]; then
  echo "e2e: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

./scripts/install-envoy.sh >/dev/null
KUBE_BINARIES="etcd kube-apiserver kubectl kubelet kube-proxy kube-controller-manager kube-scheduler" \
  ./scripts/kube-binaries.sh >/dev/null
./scripts/kube-binaries.sh --containerd >/dev/null
./scripts/kube-binaries.sh --contour >/dev/null # Contour's real shutdown manager, for the Contour scenarios
./scripts/helm-binary.sh >/dev/null # the chart (the webhook) is pushed and installed with it
./scripts/registry-binary.sh >/dev/null # the OCI registry our image and chart are pulled from
./scripts/coredns-binary.sh >/dev/null # the cluster's DNS
# Envoy Gateway's controller, for its migration page's row, which runs last: when it is not built yet, it builds
# in the background at the lowest priority while the scenarios before that row run (cold, about 400 CPU-s, mostly
# while the load-balancer rows leave the CPUs idle), and the row waits for it (kube-binaries.sh's lock). Its log is
# bin/envoy-gateway-build.log; make e2e-fleet does not run it.
mkdir -p bin
if [ "${E2E_FLEET:-}" != 1 ]; then
  setsid nice -n 19 ./scripts/kube-binaries.sh --envoy-gateway >bin/envoy-gateway-build.log 2>&1 &
  eg_build=$!
  trap 'kill -- -"$eg_build" 2>/dev/null || true' EXIT
fi
echo "e2e: binaries ready after $((SECONDS - start)) s" >&2

go test -c -race -tags e2e -o bin/e2e.test ./test/e2e
report=${E2E_REPORT:-$PWD/test/e2e/results/REPORT.md}
if [ "${E2E_FLEET:-}" = 1 ]; then
  # make e2e-fleet: the multi-node scenarios (test/e2e/fleet_test.go, contour_fleet_test.go) and their own report.
  export E2E_FLEET
  report=${E2E_REPORT:-$PWD/test/e2e/results/FLEET.md}
  E2E_RUN=${E2E_RUN:-'^TestFleet$'}
fi
# One cluster per host: two would share its bridge, address ranges and iptables chains. Another make e2e (or
# e2e-fleet) on this host waits here until the first has torn its cluster down.
mkdir -p /run/lock
exec 8>/run/lock/shutdown-manager-e2e.lock
if ! flock -n 8; then
  echo "e2e: waiting for another make e2e on this host to end" >&2
  flock 8
fi
# The test binary runs directly (not under `go test`), so that ^C reaches it and its teardown runs.
cd test/e2e
E2E_REPORT=$report ../../bin/e2e.test -test.v -test.count=1 -test.timeout=75m ${E2E_RUN:+-test.run "$E2E_RUN"}
echo "e2e: done in $((SECONDS - start)) s; report: $report" >&2

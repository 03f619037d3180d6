#!/usr/bin/env bash
# Builds the Kubernetes binaries the tests run from the Go module proxy (tools/go.mod pins every version), into a
# cache directory keyed by those versions, and prints that directory's bin/ on stdout. Does nothing but print it
# when every binary asked for is already there.
#
#   KUBE_BINARIES  which binaries (default: etcd kube-apiserver kubectl, enough for admission and dry-run tests).
#                  The full cluster adds kubelet kube-proxy kube-controller-manager kube-scheduler: each is a
#                  `tool` line of tools/go.mod already, so it is only a longer list here.
#   KUBE_CACHE_DIR where caches live (default: ${XDG_CACHE_HOME:-$HOME/.cache}/shutdown-manager/kube).
#   KUBE_LINE      newest (default: tools/go.mod, the e2e cluster and the API-server tiers) or oldest
#                  (tools/kube-oldest/go.mod: the oldest supported kube-apiserver, for the API-server tiers). The
#                  oldest line's bin/ holds its kube-apiserver and links to the newest line's etcd and kubectl.
#
# With --print-dir it only prints the bin/ directory, built or not: the test harness (internal/kubetest) asks it
# where the binaries are, so that the cache key is computed in this one place. The newest line's key is its
# versions and tools_key (below): Helm and the registry are in the same module, and raise some of the versions
# Kubernetes builds with; --tools-key prints it (scripts/tool-binary.sh keys Helm's and the registry's caches so),
# and --pin MODULE the version tools/go.mod requires a module at.
#
# With --containerd it builds containerd, containerd-shim-runc-v2 and ctr instead (the e2e cluster's runtime:
# Debian's containerd 1.6 cannot run image volumes) from their own tools module, tools/containerd/go.mod, into
# <cache>/containerd-<version>/bin; --print-containerd-dir prints that directory.
#
# With --contour it builds Contour's `contour` (its shutdown manager and `contour bootstrap`: the e2e's Contour
# scenarios and the bench's real Contour) from the oldest line's module, tools/kube-oldest/go.mod (it shares most
# of its packages with that kube-apiserver: the module's comment), with the same flags and under the same lock, into
# <cache>/contour-<version>-<key>/bin; --print-contour-dir prints that directory.
#
# With --envoy-gateway it builds Envoy Gateway's `envoy-gateway` (its controller, certgen and its own shutdown
# manager: the e2e's run of docs/migrate-envoy-gateway.md) from its own tools module, tools/envoy-gateway/go.mod
# (Envoy Gateway builds on other k8s.io/* versions than either Kubernetes line), into
# <cache>/envoy-gateway-<version>-<key>/bin; --print-envoy-gateway-dir prints that directory. Nothing in that row is
# timed: it is built as the oldest line is, without the compiler's optimizations (oldest_gcflags).
#
# Each build writes into a temporary directory beside bin/ and renames the finished binaries into bin/, so an
# interrupted build never leaves a half-written binary in the cache; a concurrent run waits on a lock instead of
# building the same thing twice. Cold, kube-apiserver + kubectl + etcd take minutes (see docs/development.md); warm, nothing.
set -euo pipefail

# Everything is in main, which bash parses whole before running it: a checkout that changes this file during a
# build does not change what the running build does.
main() {
  local root tools binaries k8s_version etcd_version cache dir bin todo b ldflags start out
  root=$(cd "$(dirname "$0")/.." && pwd)
  cache=${KUBE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shutdown-manager/kube}
  local containerd_version contour_version eg_version gcflags=-dwarf=false lockdir goenv=()
  case ${1:-} in
  --tools-key)
    tools_key "$root/tools"
    return
    ;;
  --pin) # --pin MODULE: the version tools/go.mod requires MODULE at (scripts/tool-binary.sh: Helm's, the registry's)
    required_version "$root/tools/go.mod" "$2"
    return
    ;;
  --contour | --print-contour-dir)
    tools=$root/tools/kube-oldest
    contour_version=$(required_version "$tools/go.mod" github.com/projectcontour/contour)
    if [ -z "$contour_version" ]; then
      echo "kube-binaries: no github.com/projectcontour/contour version in $tools/go.mod" >&2
      return 1
    fi
    binaries=contour
    dir=$cache/contour-$contour_version-$(tools_key "$tools")
    # The oldest line's flags and lock: the packages this build shares with its kube-apiserver are compiled once,
    # by whichever of the two builds first (two go commands compiling one package at the same time each compile it).
    gcflags=$oldest_gcflags
    lockdir=$(oldest_dir "$root" "$cache")
    # Contour's own Makefile stamps these (internal/build); `contour version` prints them.
    ldflags="-s -w -X github.com/projectcontour/contour/internal/build.Version=$contour_version"
    ;;
  --envoy-gateway | --print-envoy-gateway-dir)
    tools=$root/tools/envoy-gateway
    eg_version=$(required_version "$tools/go.mod" github.com/envoyproxy/gateway)
    if [ -z "$eg_version" ]; then
      echo "kube-binaries: no github.com/envoyproxy/gateway version in $tools/go.mod" >&2
      return 1
    fi
    binaries=envoy-gateway
    dir=$cache/envoy-gateway-$eg_version-$(tools_key "$tools")
    gcflags=$oldest_gcflags
    # Envoy Gateway needs a newer Go than this project's go line (its go.mod: go 1.26.7), which CI's setup-go
    # installs with GOTOOLCHAIN=local: auto fetches that toolchain from the module proxy where the local Go is older.
    goenv=(GOTOOLCHAIN=auto)
    # Envoy Gateway's own Makefile stamps its version (internal/cmd/version); `envoy-gateway version` prints it.
    ldflags="-s -w -X github.com/envoyproxy/gateway/internal/cmd/version.envoyGatewayVersion=$eg_version"
    ;;
  --containerd | --print-containerd-dir)
    tools=$root/tools/containerd
    containerd_version=$(required_version "$tools/go.mod" github.com/containerd/containerd/v2)
    if [ -z "$containerd_version" ]; then
      echo "kube-binaries: no github.com/containerd/containerd/v2 version in $tools/go.mod" >&2
      return 1
    fi
    binaries="containerd containerd-shim-runc-v2 ctr"
    dir=$cache/containerd-$containerd_version
    ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version"
    ;;
  *)
    tools=$root/tools
    binaries=${KUBE_BINARIES:-etcd kube-apiserver kubectl}
    case ${KUBE_LINE:-newest} in
    newest) ;;
    oldest)
      oldest "$@"
      return
      ;;
    *)
      echo "kube-binaries: KUBE_LINE is newest or oldest, not ${KUBE_LINE}" >&2
      return 1
      ;;
    esac
    # The one place versions come from: tools/go.mod's require lines.
    k8s_version=$(required_version "$tools/go.mod" k8s.io/kubernetes)
    etcd_version=$(required_version "$tools/go.mod" go.etcd.io/etcd/server/v3)
    if [ -z "$k8s_version" ] || [ -z "$etcd_version" ]; then
      echo "kube-binaries: no k8s.io/kubernetes or go.etcd.io/etcd/server/v3 version in $tools/go.mod" >&2
      return 1
    fi
    dir=$cache/$k8s_version-etcd-$etcd_version-$(tools_key "$tools")
    ldflags=$(version_ldflags "$k8s_version")
    ;;
  esac
  bin=$dir/bin
  if [ "${1:-}" = --print-dir ] || [ "${1:-}" = --print-containerd-dir ] || [ "${1:-}" = --print-contour-dir ] || [ "${1:-}" = --print-envoy-gateway-dir ]; then
    echo "$bin"
    return 0
  fi

  if [ -z "$(missing "$bin" $binaries)" ]; then
    echo "$bin"
    return 0
  fi
  mkdir -p "$bin" "${lockdir:=$dir}"
  exec 9>"$lockdir/.lock"
  if command -v flock >/dev/null; then
    flock 9
  fi
  todo=$(missing "$bin" $binaries) # again: another run may have built them while we waited for the lock
  if [ -z "$todo" ]; then
    echo "$bin"
    return 0
  fi

  local pkgs=()
  for b in $todo; do
    pkgs+=("$(package_of "$b")")
  done

  tmp=$(mktemp -d "$dir/.build.XXXXXX") # global: the EXIT trap runs after main has returned
  trap 'rm -rf "$tmp"' EXIT
  trap 'exit 130' INT TERM # so that the EXIT trap runs on these too
  echo "kube-binaries: building" $todo "(${containerd_version:+containerd $containerd_version}${contour_version:+contour $contour_version}${eg_version:+envoy-gateway $eg_version}${k8s_version:+kubernetes $k8s_version, etcd $etcd_version}) into $bin" >&2
  start=$SECONDS
  # -dwarf=false: the compiler writes no debug information, which -s -w would strip from the binaries anyway; the
  # same binaries for 16% less CPU (k8s.io/apiserver/pkg/server cold: 426 -> 360 CPU-s, measured here). Cold, these
  # builds are most of make test's critical path (docs/development.md).
  (
    cd "$tools"
    env "${goenv[@]}" GOGC="$build_gogc" GOWORK=off CGO_ENABLED=0 go build -trimpath -gcflags=all="$gcflags" -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}"
  )
  for b in $todo; do
    out=$b
    # go build names a binary after its package path without the major version suffix: .../server/v3 is "server".
    [ "$b" = etcd ] && out=server
    mv "$tmp/$out" "$bin/$b"
  done
  echo "kube-binaries: built in $((SECONDS - start)) s" >&2
  echo "$bin"
}

# oldest [--print-dir] builds the oldest line's kube-apiserver (tools/kube-oldest) into <cache>/<version>/bin and
# links the newest line's etcd and kubectl beside it (the tiers run one etcd and kubectl; the API server is what
# differs), building those first when they are missing.
oldest() {
  local root version dir bin newest ldflags
  root=$(cd "$(dirname "$0")/.." && pwd)
  version=$(required_version "$root/tools/kube-oldest/go.mod" k8s.io/kubernetes)
  [ -n "$version" ] || { echo "kube-binaries: no k8s.io/kubernetes version in tools/kube-oldest/go.mod" >&2; return 1; }
  dir=$(oldest_dir "$root" "${KUBE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shutdown-manager/kube}")
  bin=$dir/bin
  if [ "${1:-}" = --print-dir ]; then
    echo "$bin"
    return 0
  fi
  newest=$(KUBE_LINE=newest KUBE_BINARIES="etcd kubectl" "$0")
  mkdir -p "$bin"
  ln -sfn "$newest/etcd" "$bin/etcd"
  ln -sfn "$newest/kubectl" "$bin/kubectl"
  if [ -x "$bin/kube-apiserver" ]; then
    echo "$bin"
    return 0
  fi
  exec 9>"$dir/.lock"
  command -v flock >/dev/null && flock 9
  if [ ! -x "$bin/kube-apiserver" ]; then
    ldflags=$(version_ldflags "$version")
    tmp=$(mktemp -d "$dir/.build.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    trap 'exit 130' INT TERM
    echo "kube-binaries: building kube-apiserver (kubernetes $version, the oldest line) into $bin" >&2
    start=$SECONDS
    (cd "$root/tools/kube-oldest" && GOGC=$build_gogc GOWORK=off CGO_ENABLED=0 go build -trimpath -gcflags=all="$oldest_gcflags" -ldflags "$ldflags" -o "$tmp/" k8s.io/kubernetes/cmd/kube-apiserver)
    mv "$tmp/kube-apiserver" "$bin/kube-apiserver"
    echo "kube-binaries: built in $((SECONDS - start)) s" >&2
  fi
  echo "$bin"
}

# oldest_gcflags: the oldest line's module is built without the compiler's optimizations (-N -l). Its kube-apiserver
# serves only the oldest line's API-server tiers, where nothing is timed or benchmarked (make bench and make e2e run
# the newest line's), and `contour` only runs Contour's shutdown manager and writes bootstraps; their cold builds
# are on the critical path of a cold make test: compiling k8s.io/apiserver/pkg/server took 26% less CPU so (380 s ->
# 281 s user+sys, measured here). -dwarf=false: as for the other binaries.
oldest_gcflags='-N -l -dwarf=false'

# build_gogc: the compiler and linker of these builds collect garbage at GOGC=400 (GOGC when it is set): the same
# binaries, byte for byte, for less CPU, at about half a gigabyte per compile process instead of a third. Measured
# here on an empty build cache: k8s.io/client-go/kubernetes and k8s.io/apiserver/pkg/server 451 and 410 CPU-s at
# GOGC=100, 404 and 377 at 400 (two runs each); the registry 123 CPU-s at 100, 95 at 400, the same sha256.
# scripts/tool-binary.sh builds Helm, the registry and CoreDNS so too.
build_gogc=${GOGC:-400}

# oldest_dir ROOT CACHE prints the oldest line's cache directory: its Kubernetes version and tools_key.
oldest_dir() {
  local version
  version=$(required_version "$1/tools/kube-oldest/go.mod" k8s.io/kubernetes)
  [ -n "$version" ] || { echo "kube-binaries: no k8s.io/kubernetes version in tools/kube-oldest/go.mod" >&2; return 1; }
  echo "$2/$version-$(tools_key "$1/tools/kube-oldest")"
}

# version_ldflags VERSION prints the linker flags that stamp a Kubernetes version into the binaries: without them
# they say v0.0.0-master and kubectl refuses the server's version.
version_ldflags() {
  local v=$1 major minor p flags="-s -w"
  minor=${v#v*.}
  minor=${minor%%.*}
  major=${v#v}
  major=${major%%.*}
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  echo "$flags"
}

# required_version GOMOD MODULE prints the version GOMOD requires MODULE at.
required_version() {
  awk -v mod="$2" '$1 == "require" { $1 = ""; $0 = $0 } $1 == mod && $2 ~ /^v/ { print $2; exit }' "$1"
}

# tools_key DIR prints a short hash of DIR/go.mod's lines (comments aside) and DIR/go.sum: the build list of every
# binary built from that module. A change of any version there (a tool added, a dependency raised) is a new cache
# directory, never binaries built from another list under the old key.
tools_key() {
  { grep -v '^[[:space:]]*//' "$1/go.mod"; cat "$1/go.sum"; } | sha256sum | cut -c1-12
}

# package_of BINARY prints the import path BINARY is built from.
package_of() {
  case $1 in
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    containerd | containerd-shim-runc-v2 | ctr) echo "github.com/containerd/containerd/v2/cmd/$1" ;;
    contour) echo github.com/projectcontour/contour/cmd/contour ;;
    envoy-gateway) echo github.com/envoyproxy/gateway/cmd/envoy-gateway ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kube-proxy | kubelet | kubectl)
      echo "k8s.io/kubernetes/cmd/$1" ;;
    *) echo "kube-binaries: unknown binary $1" >&2; return 1 ;;
  esac
}

# missing BIN NAME... prints each NAME that is not an executable in BIN.
missing() {
  local bin=$1 b
  shift
  for b in "$@"; do
    [ -x "$bin/$b" ] || echo "$b"
  done
}

main "$@"

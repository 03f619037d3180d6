#!/usr/bin/env bash
# Builds a tool of the tools module (tools/go.mod, the Kubernetes binaries' module) from the Go module proxy, at the
# version tools/go.mod requires, into a cache directory keyed by that version and the module's build list (tools_key
# in kube-binaries.sh), and prints that directory's bin/ on stdout; does nothing but print it when the binary is
# already there. The scheme of kube-binaries.sh: a versioned directory, a temporary build directory renamed into
# place, a lock against concurrent builds (a second run waits for the first). One module with Kubernetes, built with
# the same flags, so that the packages they share (k8s.io/*, grpc, otel, ...) are compiled once: see tools/go.mod.
#
# Usage: tool-binary.sh TOOL [--print-dir], TOOL one of:
#   helm      Helm, for the chart's tests and the e2e: scripts/helm-binary.sh
#   registry  distribution's registry (tools/registry/main.go: its registry command with filesystem storage and
#             htpasswd), the e2e's OCI registry: scripts/registry-binary.sh
#   coredns   CoreDNS (tools/coredns/main.go: the plugins a cluster's DNS uses), the e2e's cluster DNS:
#             scripts/coredns-binary.sh
# Environment: HELM_CACHE_DIR, REGISTRY_CACHE_DIR, COREDNS_CACHE_DIR: where each cache lives (default:
# ${XDG_CACHE_HOME:-$HOME/.cache}/shutdown-manager/TOOL). With --print-dir it only prints the bin/ directory, built
# or not, so that the cache key is computed in this one place.
set -euo pipefail

main() {
  local tool=$1 root mod module pkg ldflags version cache dir bin start
  shift
  root=$(cd "$(dirname "$0")/.." && pwd)
  case $tool in
  helm)
    module=helm.sh/helm/v4 pkg=helm.sh/helm/v4/cmd/helm
    cache=${HELM_CACHE_DIR:-}
    # Without the version stamp `helm version` says v4.3 and charts' kubeVersion checks see a guess.
    ldflags='-X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.gitTreeState=clean'
    ;;
  registry)
    module=github.com/distribution/distribution/v3 pkg=./registry
    cache=${REGISTRY_CACHE_DIR:-}
    # distribution's Makefile stamps the version (version.Version) that `registry --version` prints.
    ldflags='-X github.com/distribution/distribution/v3/version.version=$version'
    ;;
  coredns)
    module=github.com/coredns/coredns pkg=./coredns
    cache=${COREDNS_CACHE_DIR:-}
    ldflags='' # CoreDNS's version is a constant of its coremain package
    ;;
  *)
    echo "tool-binary: no tool $tool (helm, registry, coredns)" >&2
    return 2
    ;;
  esac

  mod=$root/tools
  # The one place the version comes from: tools/go.mod's require line, read by kube-binaries.sh as it reads its own.
  version=$("$root/scripts/kube-binaries.sh" --pin "$module")
  if [ -z "$version" ]; then
    echo "$tool-binary: no $module version in $mod/go.mod" >&2
    return 1
  fi
  ldflags="-s -w ${ldflags//'$version'/$version}"

  cache=${cache:-${XDG_CACHE_HOME:-$HOME/.cache}/shutdown-manager/$tool}
  dir=$cache/$version-$("$root/scripts/kube-binaries.sh" --tools-key)
  bin=$dir/bin
  if [ "${1:-}" = --print-dir ] || [ -x "$bin/$tool" ]; then
    echo "$bin"
    return 0
  fi
  mkdir -p "$bin"
  exec 9>"$dir/.lock"
  if command -v flock >/dev/null; then
    flock 9
  fi
  if [ -x "$bin/$tool" ]; then # another run may have built it while we waited for the lock
    echo "$bin"
    return 0
  fi
  # And the lock of the tools module's Kubernetes build (kube-binaries.sh takes it): two go commands compiling the
  # same package at the same time each compile it, so this build waits for one of Kubernetes' and then finds the
  # packages they share in Go's build cache (or Kubernetes' build waits for this one).
  kube=$(dirname "$("$root/scripts/kube-binaries.sh" --print-dir)")
  mkdir -p "$kube"
  exec 8>"$kube/.lock"
  if command -v flock >/dev/null; then
    if ! flock -n 8; then
      echo "$tool-binary: waiting for the Kubernetes build of the same module (its packages are shared)" >&2
      flock 8
    fi
  fi

  tmp=$(mktemp -d "$dir/.build.XXXXXX") # global: the EXIT trap runs after main has returned
  trap 'rm -rf "$tmp"' EXIT
  trap 'exit 130' INT TERM # so that the EXIT trap runs on these too
  echo "$tool-binary: building $tool $version into $bin" >&2
  start=$SECONDS
  (
    cd "$mod"
    # -dwarf=false: no debug information, which -s -w strips anyway; GOGC=400: less CPU for the same binary
    # (kube-binaries.sh says what each saves).
    GOGC=${GOGC:-400} GOWORK=off CGO_ENABLED=0 go build -trimpath -gcflags=all=-dwarf=false -ldflags "$ldflags" -o "$tmp/$tool" "$pkg"
  )
  mv "$tmp/$tool" "$bin/$tool"
  echo "$tool-binary: built in $((SECONDS - start)) s" >&2
  echo "$bin"
}

main "$@"

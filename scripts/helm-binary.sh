#!/usr/bin/env bash
# Builds Helm from the Go module proxy at the version tools/helm/go.mod pins, into a cache directory keyed by that
# version, and prints that directory's bin/ on stdout. Does nothing but print it when helm is already there.
# The sibling of kube-binaries.sh, with the same scheme (versioned directory, temporary build directory renamed
# into place, a lock against concurrent builds); a script of its own because Helm is a module of its own (see
# tools/helm/go.mod for why it cannot share tools/go.mod with Kubernetes).
#
#   HELM_CACHE_DIR where the cache lives (default: ${XDG_CACHE_HOME:-$HOME/.cache}/shutdown-manager/helm).
#
# With --print-dir it only prints the bin/ directory, built or not: the chart's tests ask it where helm is, so that
# the cache key is computed in this one place. Cold, the build takes minutes (see docs/development.md); warm, nothing.
set -euo pipefail

main() {
  local root mod version cache dir bin start
  root=$(cd "$(dirname "$0")/.." && pwd)
  mod=$root/tools/helm

  # The one place the version comes from: tools/helm/go.mod's require line.
  version=$(awk '$1 == "helm.sh/helm/v4" && $2 ~ /^v/ { print $2; exit }' "$mod/go.mod")
  if [ -z "$version" ]; then
    echo "helm-binary: no helm.sh/helm/v4 version in $mod/go.mod" >&2
    return 1
  fi

  cache=${HELM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shutdown-manager/helm}
  dir=$cache/$version
  bin=$dir/bin
  if [ "${1:-}" = --print-dir ] || [ -x "$bin/helm" ]; then
    echo "$bin"
    return 0
  fi
  mkdir -p "$bin"
  exec 9>"$dir/.lock"
  if command -v flock >/dev/null; then
    flock 9
  fi
  if [ -x "$bin/helm" ]; then # another run may have built it while we waited for the lock
    echo "$bin"
    return 0
  fi

  tmp=$(mktemp -d "$dir/.build.XXXXXX") # global: the EXIT trap runs after main has returned
  trap 'rm -rf "$tmp"' EXIT
  trap 'exit 130' INT TERM # so that the EXIT trap runs on these too
  echo "helm-binary: building helm $version into $bin" >&2
  start=$SECONDS
  (
    cd "$mod"
    # Without the version stamp `helm version` says v4.3 and charts' kubeVersion checks see a guess.
    GOWORK=off CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
      -o "$tmp/helm" helm.sh/helm/v4/cmd/helm
  )
  mv "$tmp/helm" "$bin/helm"
  echo "helm-binary: built in $((SECONDS - start)) s" >&2
  echo "$bin"
}

main "$@"

#!/usr/bin/env bash
# Builds distribution's registry (tools/registry/main.go: its registry command with filesystem storage and htpasswd; the OCI registry make e2e pushes the release's image index and the
# chart to, and the cluster pulls from) from the Go module proxy at the version tools/registry/go.mod pins, into a
# cache directory keyed by that version, and prints that directory's bin/ on stdout. Does nothing but print it when
# the registry is already there. The sibling of helm-binary.sh, with the same scheme (versioned directory, temporary
# build directory renamed into place, a lock against concurrent builds).
#
#   REGISTRY_CACHE_DIR where the cache lives (default: ${XDG_CACHE_HOME:-$HOME/.cache}/shutdown-manager/registry).
#
# With --print-dir it only prints the bin/ directory, built or not: the e2e asks it where the registry is, so that
# the cache key is computed in this one place. Cold, the build takes a minute or two; warm, nothing.
set -euo pipefail

main() {
  local root mod version cache dir bin start
  root=$(cd "$(dirname "$0")/.." && pwd)
  mod=$root/tools/registry

  # The one place the version comes from: tools/registry/go.mod's require line.
  version=$(awk '$1 == "github.com/distribution/distribution/v3" && $2 ~ /^v/ { print $2; exit }' "$mod/go.mod")
  if [ -z "$version" ]; then
    echo "registry-binary: no github.com/distribution/distribution/v3 version in $mod/go.mod" >&2
    return 1
  fi

  cache=${REGISTRY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shutdown-manager/registry}
  dir=$cache/$version
  bin=$dir/bin
  if [ "${1:-}" = --print-dir ] || [ -x "$bin/registry" ]; then
    echo "$bin"
    return 0
  fi
  mkdir -p "$bin"
  exec 9>"$dir/.lock"
  if command -v flock >/dev/null; then
    flock 9
  fi
  if [ -x "$bin/registry" ]; then # another run may have built it while we waited for the lock
    echo "$bin"
    return 0
  fi

  tmp=$(mktemp -d "$dir/.build.XXXXXX") # global: the EXIT trap runs after main has returned
  trap 'rm -rf "$tmp"' EXIT
  trap 'exit 130' INT TERM # so that the EXIT trap runs on these too
  echo "registry-binary: building registry $version into $bin" >&2
  start=$SECONDS
  (
    cd "$mod"
    # distribution's Makefile stamps the version (version.Version) that `registry --version` prints.
    GOWORK=off CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$version" \
      -o "$tmp/registry" .
  )
  mv "$tmp/registry" "$bin/registry"
  echo "registry-binary: built in $((SECONDS - start)) s" >&2
  echo "$bin"
}

main "$@"

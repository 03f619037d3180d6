#!/usr/bin/env bash
# make release VERSION=vX.Y.Z: everything a team needs to install this commit, written into DIST (default dist/,
# emptied first):
#
#   shutdown-manager-linux-{amd64,arm64}        the full CLI (every command), static, version and commit stamped
#   shutdown-manager-pod-linux-{amd64,arm64}    the pod binary (drain, serve, run, …), the pod image's
#   image-oci/                                  the multi-arch pod image (OCI layout, an index of both arches)
#   image-linux-{amd64,arm64}.tar               the same images as docker archives (docker load, ctr images import),
#                                               named ghcr.io/envoy-shutdown-manager/shutdown-manager:vX.Y.Z
#   cluster-image-oci/, cluster-image-linux-{amd64,arm64}.tar
#                                               the cluster image (the full CLI; the chart's webhook), the same way,
#                                               named ghcr.io/envoy-shutdown-manager/shutdown-manager-cluster:vX.Y.Z
#   shutdown-manager-X.Y.Z.tgz                  the Helm chart, version X.Y.Z, appVersion vX.Y.Z (the image's tag)
#   shutdown-manager-vX.Y.Z.spdx.json           the SPDX 2.3 SBOM of the four binaries (internal/release)
#   SHA256SUMS                                  every file above (sha256sum -c SHA256SUMS)
#
# Reproducible: every time inside comes from SOURCE_DATE_EPOCH, else the commit's time, so two runs on one commit
# with one Go toolchain write byte-identical files (test/release checks it). VERSION must be a semantic version
# (the commit's tag: git tag v0.1.0) with its section in CHANGELOG.md unless a pre-release, and the tree clean (tracked and untracked files), or the files would not be
# those of the commit; RELEASE_ALLOW_DIRTY=1 lets a test build a tree with changes.
set -euo pipefail

fail() { echo "make release: $*" >&2; exit 2; }

main() {
  local version=${1:-} root dist revision helm
  root=$(cd "$(dirname "$0")/.." && pwd)
  cd "$root"
  dist=${DIST:-dist}
  # SemVer 2.0.0 with a leading v, as Go modules and image tags spell it; pre-releases (v0.2.0-rc.1) allowed.
  if ! [[ $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
    fail "VERSION=${version:-<none>} is not a semantic version vX.Y.Z: tag the commit (git tag v0.1.0) or pass VERSION=vX.Y.Z"
  fi
  # A release (not a pre-release) has its section in the CHANGELOG: its notes are written before it is built.
  if [[ $version != *-* ]] && ! grep -q "^## \[${version#v}\] - " CHANGELOG.md; then
    fail "CHANGELOG.md has no section '## [${version#v}] - YYYY-MM-DD': write the release's notes first (docs/release.md)"
  fi
  if [ -n "$(git status --porcelain)" ] && [ "${RELEASE_ALLOW_DIRTY:-}" != 1 ]; then
    fail "the tree has changes (git status): commit them, or RELEASE_ALLOW_DIRTY=1 for a build that is not the commit's"
  fi
  revision=$(git rev-parse HEAD)
  export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}

  rm -rf "$dist"
  mkdir -p "$dist"
  # The images are named as the release workflow publishes them, the name the release's binary and chart default
  # to, so that an archive imported into a node without a registry (ctr images import) is the default image.
  go run ./internal/image/build -out "$dist" -release -version "$version" -revision "$revision" -created "$SOURCE_DATE_EPOCH" \
    -name "ghcr.io/envoy-shutdown-manager/shutdown-manager:$version"
  go run ./internal/image/build -main cluster -out "$dist" -release -version "$version" -revision "$revision" \
    -created "$SOURCE_DATE_EPOCH" -name "ghcr.io/envoy-shutdown-manager/shutdown-manager-cluster:$version"

  # The chart: Helm writes each file's modification time into the package, so package a copy whose times are
  # SOURCE_DATE_EPOCH. helm package sets version (SemVer without the v, as Helm repositories list it) and
  # appVersion (the image tag, with the v).
  helm=$(./scripts/helm-binary.sh)/helm
  tmp=$(mktemp -d) # global: the EXIT trap runs after main has returned
  trap 'rm -rf "$tmp"' EXIT
  cp -R charts/shutdown-manager "$tmp/shutdown-manager"
  find "$tmp/shutdown-manager" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  "$helm" package "$tmp/shutdown-manager" --version "${version#v}" --app-version "$version" --destination "$dist" >/dev/null
  echo "release: wrote $dist/shutdown-manager-${version#v}.tgz" >&2

  go run ./internal/release/build -dist "$dist" -version "$version" -revision "$revision" -created "$SOURCE_DATE_EPOCH"
  (cd "$dist" && sha256sum --quiet -c SHA256SUMS)
  echo "release: $version ($revision) in $dist" >&2
}

main "$@"

#!/usr/bin/env bash
# Pins a Kubernetes line for the tests: writes DIR/go.mod (a tools module of its own) requiring k8s.io/kubernetes at
# VERSION and etcd at ETCD (when given), with the replace lines Kubernetes needs outside its repository (one per
# "=> ./staging" line of its go.mod, to the published k8s.io/X v0.MINOR.PATCH), then runs go mod tidy.
#
#   scripts/kube-pin.sh tools v1.37.2 v3.7.0        the newest line: the e2e cluster and the API-server tiers
#   scripts/kube-pin.sh tools/kube-oldest v1.34.12  the oldest supported line: the API-server tiers only
#
# The tool lines of DIR/go.mod are kept (a new DIR gets kube-apiserver and kubectl). scripts/kube-binaries.sh reads
# the pins back; nothing else names a Kubernetes version.
set -euo pipefail
dir=$1 version=$2 etcd=${3:-}
gomod=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[ -n "$gomod" ] || { echo "kube-pin: k8s.io/kubernetes@$version is not on the module proxy" >&2; exit 1; }
staging=v0.${version#v1.}
mkdir -p "$dir"
tools=$(awk '/^tool [^(]/{print $2} /^tool \(/{on=1;next} on&&/^\)/{on=0} on{print $1}' "$dir/go.mod" 2>/dev/null || true)
[ -n "$tools" ] || tools="k8s.io/kubernetes/cmd/kube-apiserver
k8s.io/kubernetes/cmd/kubectl"
header=$(awk '/^module /{exit} {print}' "$dir/go.mod" 2>/dev/null || true)
# The other tools' pins are kept: the first require block's other lines (Helm's, in tools/) and each one-line
# require with the comment above it (distribution's registry, which tools/registry/main.go imports).
pins=$(awk '/^require \(/{on=1;next} on&&/^\)/{exit} on && $1 != "go.etcd.io/etcd/server/v3" && $1 != "k8s.io/kubernetes"' "$dir/go.mod" 2>/dev/null || true)
singles=$(awk '/^require [^(]/ && $2 != "go.etcd.io/etcd/server/v3" && $2 != "k8s.io/kubernetes" { if (prev ~ /^\/\//) print prev; print; print "" } {prev = $0}' "$dir/go.mod" 2>/dev/null || true)
module=$(awk '/^module /{print $2; exit}' "$dir/go.mod" 2>/dev/null || true)
[ -n "$module" ] || module=github.com/envoy-shutdown-manager/shutdown-manager/$dir
{
  [ -n "$header" ] && printf '%s\n' "$header"
  echo "module $module"
  echo
  echo "go 1.26.0"
  echo
  echo "// Kubernetes builds with go1.26's GODEBUG defaults (its own go.mod says so)."
  echo "godebug default=go1.26"
  echo
  echo "tool ("
  printf '\t%s\n' $tools
  echo ")"
  echo
  echo "// The pins, written by scripts/kube-pin.sh: the versions the binaries are built at and the key of their cache;"
  echo "// kube-pin.sh keeps the other tools' pins here and below."
  echo "require ("
  {
    if [ -n "$etcd" ]; then printf '\tgo.etcd.io/etcd/server/v3 %s\n' "$etcd"; fi
    printf '\tk8s.io/kubernetes %s\n' "$version"
    if [ -n "$pins" ]; then printf '%s\n' "$pins"; fi
  } | sort
  echo ")"
  if [ -n "$singles" ]; then printf '\n%s\n' "$singles"; fi
  echo
  echo "// k8s.io/kubernetes replaces its staging modules with ./staging/src/...; outside its repository they are the"
  echo "// published k8s.io/X $staging (one line for each \"=> ./staging\" line of kubernetes' go.mod at $version)."
  echo "replace ("
  awk -v v="$staging" '$2 == "=>" && $3 ~ /^\.\/staging/ { printf "\t%s => %s %s\n", $1, $1, v }' "$gomod"
  echo ")"
} >"$dir/go.mod.new"
mv "$dir/go.mod.new" "$dir/go.mod"
(cd "$dir" && GOWORK=off GOFLAGS=-mod=mod go mod tidy)
echo "kube-pin: $dir pins kubernetes $version${etcd:+, etcd $etcd}" >&2

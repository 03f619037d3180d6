#!/usr/bin/env bash
# Runs every fuzz target in the module for a short time each: scripts/fuzz.sh [DURATION].
# A target that fails writes its failing input to testdata/fuzz/<target>/ and fails the run. One failure is not
# the target's: Go's fuzzing coordinator can end a duration-bounded run with a bare "context deadline exceeded"
# when a starved worker misses its stop (go.dev/issue/75804), with no input written. That one is run again, once;
# a second such failure, or any other, fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-10s}
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    echo "fuzz $pkg $target ($time)"
    log=$(mktemp)
    for try in 1 2; do
      if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$time" "$pkg" >"$log" 2>&1; then
        break
      fi
      if [ "$try" = 1 ] && grep -q '^    context deadline exceeded$' "$log" && ! grep -q 'Failing input written to' "$log"; then
        echo "fuzz $pkg $target: the coordinator's deadline race (no input written); once more"
        continue
      fi
      cat "$log"; rm -f "$log"; exit 1
    done
    rm -f "$log"
  done
done

#!/usr/bin/env bash
# make test: every tier before the e2e, in four lanes run side by side, so that the slow cold builds run beside the
# tests that need none of them rather than before them:
#   newest  Kubernetes' newest line and Helm, then its API-server tiers: the critical path of a cold run;
#   oldest  the oldest supported line (its build waits for the newest line's etcd and kubectl), then its tiers;
#   pure    make vet unit fuzz: compiled and CPU-bound, under nice 5: it is done long before the builds and the
#           API-server tiers, so it yields the CPU to them and to the real-Envoy tier, whose drains are timed;
#   envoy   make integration: the real-Envoy, containerd and release tier, whose tests mostly wait on real drains.
# pure and envoy first share one race-mode build of the module (race_build, below).
# A test that needs a Kubernetes binary or Helm that a lane is still building waits for it (internal/kubetest and
# scripts/helm-binary.sh wait on the lock a build holds), so nothing is built twice and nothing is missed.
# Each lane writes bin/test/<lane>.log; the logs are printed when every lane has ended (a failed lane does not stop
# the others: one run reports every failure), then each lane's time and the CPU it spent, and how busy the machine's
# CPUs were meanwhile (scripts/cpu-busy.sh). Exit status 1 if any lane failed. Ctrl-C stops every lane.
set -uo pipefail
cd "$(dirname "$0")/.."
make envoy || exit 1
mkdir -p bin/test
build='./scripts/kube-binaries.sh >/dev/null && ./scripts/helm-binary.sh >/dev/null'
# race_build compiles every package of the module and its dependencies in race mode, the packages the lanes pure
# and envoy both compile first, once: two go commands compiling the same package at the same time each compile it
# (Go's build cache does not make one wait for the other). The first lane to get here compiles them; the other
# waits on the lock and finds them in the cache. Measured on an empty build cache, the two lanes' compile work side
# by side (vet, then each lane's test binaries): 457 CPU-s in 245 s without it and with plain vet, 313 CPU-s in
# 169 s with it and `make vet`'s -race. Its compiler runs at GOGC=400 (GOGC when set), as the builds of the other
# projects' binaries do (scripts/kube-binaries.sh): the same objects under the same cache keys (a go test -race
# after it compiles none of the module's packages again), for less CPU. Only a build: the go command passes GOGC
# to the test binaries it runs, so go test keeps the user's.
race_build() {
  if command -v flock >/dev/null; then
    GOGC=${GOGC:-400} flock bin/test/.race-build go build -race ./...
  else
    GOGC=${GOGC:-400} go build -race ./...
  fi
}
export -f race_build
declare -A run=(
  [newest]="$build && make apiserver BUILDS= KUBE_LINES=newest"
  [oldest]="KUBE_LINE=oldest $build && make apiserver BUILDS= KUBE_LINES=oldest"
  [pure]='race_build && nice -n 5 make vet unit fuzz'
  [envoy]='race_build && make integration BUILDS='
)
lanes=(newest oldest pure envoy)
# lane_end LANE RC prints a lane's last line: its exit status, its time, and the CPU-seconds (user + sys) its
# commands spent (bash's `times`, called in the lane's own shell: a subshell would count none of them).
lane_end() {
  local f
  f=$(mktemp)
  times >"$f"
  echo "=== lane $1: exit $2 after $SECONDS s, $(awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, t, "m"); sub("s", "", t[2]); s += 60 * t[1] + t[2] }; printf "%d", s }' "$f") CPU-s"
  rm -f "$f"
}
export -f lane_end
mark=$(./scripts/cpu-busy.sh)
declare -A pid
for lane in "${lanes[@]}"; do
  setsid bash -c "${run[$lane]}"'; rc=$?; lane_end '"$lane"' $rc; exit $rc' >"bin/test/$lane.log" 2>&1 &
  pid[$lane]=$!
done
trap 'for p in "${pid[@]}"; do kill -- -"$p" 2>/dev/null; done; exit 130' INT TERM
failed=()
for lane in "${lanes[@]}"; do
  wait "${pid[$lane]}" || failed+=("$lane")
done
for lane in "${lanes[@]}"; do
  echo "=== make test, lane $lane: ${run[$lane]}"
  cat "bin/test/$lane.log"
done
for lane in "${lanes[@]}"; do tail -n1 "bin/test/$lane.log"; done | sed 's/^=== /make test: /'
echo "make test: all lanes ended after $SECONDS s; $(./scripts/cpu-busy.sh $mark)"
[ ${#failed[@]} -eq 0 ] || { echo "make test: failed lanes: ${failed[*]}" >&2; exit 1; }

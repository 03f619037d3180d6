#!/usr/bin/env bash
# How busy the machine's CPUs were, for the timings make test and .ci/run print (docs/development.md's table).
#   scripts/cpu-busy.sh               prints a mark: the busy and total CPU ticks since boot (/proc/stat)
#   scripts/cpu-busy.sh BUSY TOTAL    prints what happened since that mark: "CPUs busy P% (N CPU-s of M on C cores)"
# Busy is every tick that is not idle or iowait, whoever spent it: the figure says whether a step had CPU to spare,
# not what it spent itself.
set -euo pipefail
read -r busy total < <(awk '$1 == "cpu" { t = 0; for (i = 2; i <= 9; i++) t += $i; print t - $5 - $6, t; exit }' /proc/stat)
if [ $# -eq 0 ]; then
  echo "$busy $total"
  exit 0
fi
hz=$(getconf CLK_TCK)
cores=$(nproc)
awk -v b="$((busy - $1))" -v t="$((total - $2))" -v hz="$hz" -v c="$cores" 'BEGIN {
  if (t <= 0) t = 1
  printf "CPUs busy %d%% (%d CPU-s of %d on %d cores)\n", 100 * b / t, b / hz, t / hz, c
}'

#!/usr/bin/env bash
# How fast this machine's CPU is right now, so that two runs' timings can be compared (docs/development.md): the
# CPU-seconds of a fixed single-threaded job, sha256 of 256 MiB of zeros. On a VM whose host is busy the same job
# takes more of the guest's CPU-seconds, and so does every build: two cold runs' figures compare only with their
# probes beside them. .ci/run prints it before make test and after make e2e.
set -euo pipefail
TIMEFORMAT=%U
t=$( { time head -c 256M /dev/zero | sha256sum >/dev/null; } 2>&1 )
echo "CPU speed probe: sha256 of 256 MiB in ${t} CPU-s"

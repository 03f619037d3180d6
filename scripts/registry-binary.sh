#!/usr/bin/env bash
# Builds distribution's registry (tools/registry/main.go: its registry command with filesystem storage and
# htpasswd; the OCI registry make e2e pushes the release's image index and the chart to, and the cluster pulls
# from) from the Go module proxy at the version tools/go.mod pins, into a cache directory keyed by that version and
# the tools module's build list, and prints that directory's bin/ on stdout. Does nothing but print it when
# the registry is already there: scripts/tool-binary.sh does it, as for Helm (versioned directory, temporary
# build directory renamed into place, a lock against concurrent builds).
#
#   REGISTRY_CACHE_DIR where the cache lives (default: ${XDG_CACHE_HOME:-$HOME/.cache}/shutdown-manager/registry).
#
# With --print-dir it only prints the bin/ directory, built or not: the e2e asks it where the registry is, so that
# the cache key is computed in this one place. Cold, the build takes a minute or two; warm, nothing.
set -euo pipefail
exec "$(dirname "$0")/tool-binary.sh" registry "$@"

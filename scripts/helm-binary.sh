#!/usr/bin/env bash
# Builds Helm from the Go module proxy at the version tools/go.mod pins, into a cache directory keyed by that version
# and the tools module's build list, and prints that directory's bin/ on stdout. Does nothing but print it when helm
# is already there. scripts/tool-binary.sh does it, as for the e2e's registry (the scheme of kube-binaries.sh:
# versioned directory, temporary build directory renamed into place, a lock against concurrent builds). Helm is a
# tool of the Kubernetes binaries' module, tools/go.mod, whose comment says why.
#
#   HELM_CACHE_DIR where the cache lives (default: ${XDG_CACHE_HOME:-$HOME/.cache}/shutdown-manager/helm).
#
# With --print-dir it only prints the bin/ directory, built or not: the chart's tests ask it where helm is, so that
# the cache key is computed in this one place. Cold, the build takes minutes (see docs/development.md); warm, nothing.
set -euo pipefail
exec "$(dirname "$0")/tool-binary.sh" helm "$@"

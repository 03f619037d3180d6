#!/usr/bin/env bash
# Builds CoreDNS (tools/coredns/main.go: CoreDNS with the plugins make e2e's cluster DNS uses) from the Go module
# proxy at the version tools/go.mod pins, into a cache directory keyed by that version and the tools module's build
# list, and prints that directory's bin/ on stdout; does nothing but print it when CoreDNS is already there
# (scripts/tool-binary.sh does it, as for Helm and the registry).
#
#   COREDNS_CACHE_DIR where the cache lives (default: ${XDG_CACHE_HOME:-$HOME/.cache}/shutdown-manager/coredns).
#
# With --print-dir it only prints the bin/ directory, built or not: the e2e asks it where CoreDNS is.
set -euo pipefail
exec "$(dirname "$0")/tool-binary.sh" coredns "$@"

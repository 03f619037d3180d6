# syntax=docker/dockerfile:1
# The pod image `make image` builds with Go (internal/image), for those who build with Docker (BuildKit): the pod
# binary (cmd/shutdown-manager-pod). The cluster image (the full CLI, for the chart's webhook) is built by
# `make image` only (dist/cluster-image*).
#
#   docker build --build-arg VERSION=$(git describe --tags --exact-match 2>/dev/null || echo dev) \
#     --build-arg REVISION=$(git rev-parse HEAD) --build-arg SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) \
#     --platform linux/amd64,linux/arm64 -t registry.example/shutdown-manager:TAG .
#
# Same layout and config: FROM scratch, one static binary at /shutdown-manager (mode 0555, owner 0:0), the
# entrypoint, run as UID 65532, the same OCI labels. The digest differs from the Go build's (Docker writes its
# own tar and manifest). internal/image's TestDockerfile checks that the two agree.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS TARGETARCH VERSION=dev REVISION=
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false \
    -ldflags "-s -w -X github.com/envoy-shutdown-manager/shutdown-manager/internal/cli.Version=${VERSION} -X github.com/envoy-shutdown-manager/shutdown-manager/internal/cli.Commit=${REVISION}" \
    -tags=nethttpomithttp2 -gcflags=github.com/...=-l -gcflags=google.golang.org/...=-l -gcflags=go.yaml.in/...=-l \
    -o /out/shutdown-manager ./cmd/shutdown-manager-pod

FROM scratch
ARG VERSION=dev REVISION=unknown
LABEL org.opencontainers.image.version=$VERSION \
      org.opencontainers.image.source=https://github.com/envoy-shutdown-manager/shutdown-manager \
      org.opencontainers.image.revision=$REVISION
COPY --from=build --chmod=0555 --chown=0:0 /out/shutdown-manager /shutdown-manager
USER 65532
ENTRYPOINT ["/shutdown-manager"]

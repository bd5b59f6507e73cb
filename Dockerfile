# syntax=docker/dockerfile:1
#
# The switchboard image: one static binary on distroless, run as a non-root user. The
# manager Deployment runs it with `manager ...`; stdio server pods run the same image as
# their init container with `install DEST` (controllers/mcpserver_workload.go), which
# the entrypoint below receives.
#
#   docker build -t <registry>/switchboard:<tag> .
#   docker buildx build --platform linux/amd64,linux/arm64 -t <registry>/switchboard:<tag> --push .

# Builder: the Go release go.mod asks for (go 1.26.x); cross-compiles on the build
# platform for each target platform instead of emulating it.
FROM --platform=$BUILDPLATFORM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src

# The sources the binary is built from (.dockerignore leaves out tests, docs, charts,
# manifests and tooling). Modules and the build cache live in cache mounts, so a rebuild
# downloads and compiles only what changed; go.mod's tool dependencies are never fetched.
COPY . .

# A static binary: no cgo, no libc; -trimpath keeps build paths out of it.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /out/switchboard ./cmd/switchboard

# Runtime: no shell, no package manager; nonroot is uid/gid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="switchboard" \
      org.opencontainers.image.description="Kubernetes operator for MCP server connections" \
      org.opencontainers.image.source="https://github.com/switchboard-mcp/switchboard"
COPY --from=builder /out/switchboard /switchboard
# Numeric, so that runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
ENTRYPOINT ["/switchboard"]
CMD ["manager"]

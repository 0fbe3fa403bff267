# egressd container image: a static binary on distroless, non-root by default.
#
#   deploy/image.sh [kind|k3d]     # ghcr.io/egressd/egressd:<VERSION>, the manifests' image
#   docker build -t egressd:dev .   # an unversioned local build
#   docker run --rm -p 127.0.0.1:3128:3128 egressd:dev          # proxy only: no capabilities
#
# Walls (nftables) and `egressd run` sandboxes need root in the container and
# NET_ADMIN (plus SYS_ADMIN for namespaces): see README "Deploying".

# Build on the build host's platform and cross-compile: no emulation needed.
FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
# deploy/image.sh passes the VERSION file's; `egressd version` shows it
ARG VERSION=devel
ENV CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=readonly
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download && go mod verify
COPY . .
RUN GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w -X github.com/egressd/egressd/daemon.version=${VERSION}" -o /out/egressd ./cmd/egressd
# The image's config is the default policy listening on all the container's
# addresses (the published ports decide what the host exposes). The state
# directory (egressd's CA) must exist and belong to the runtime user:
# distroless has no shell to create it later.
RUN mkdir -p /out/state \
 && sed 's/127\.0\.0\.1:/0.0.0.0:/' configs/default.yaml > /out/egressd.yaml

# distroless/static: CA roots, /etc/passwd with nonroot (65532), tzdata, no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/egressd /egressd
COPY --from=build /out/egressd.yaml /etc/egressd/egressd.yaml
COPY --from=build --chown=65532:65532 /out/state /var/lib/egressd
VOLUME ["/var/lib/egressd"]
# Proxy-only mode needs no privilege. Walls and sandboxes override this with
# `--user 0` and the capabilities they need.
USER 65532:65532
# 3128 proxy, 9090 admin (/metrics /healthz /readyz); DNS on 5353/udp+tcp.
EXPOSE 3128 9090 5353/udp 5353/tcp
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["/egressd", "healthcheck", "--timeout", "4s", "http://127.0.0.1:9090/readyz"]
ENTRYPOINT ["/egressd"]
CMD ["serve", "--config", "/etc/egressd/egressd.yaml", "--state-dir", "/var/lib/egressd"]

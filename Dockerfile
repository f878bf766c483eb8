# Outpost's container images, from two static binaries (outpost, and
# outpost-operator, the Kubernetes operator that `outpost operator` runs):
#
#   docker build -t outpost .                          # the server (default target)
#   docker build --target worker -t outpost-worker .   # a worker: git, ssh, ffmpeg
#
# Both run as the non-root user outpost (uid 10001) with `outpost` as the
# entrypoint. docs/production.md ("Containers") says how to run them.
#
# Build arguments:
#   BASE             the runtime base, a Debian-like image (debian:bookworm-slim)
#   GO_IMAGE         the image the binary is built in (golang:1.26-bookworm)
#   BINARY           build: build the binary from this tree in GO_IMAGE (default);
#                    context: take OUTPOST_BINARY and OUTPOST_OPERATOR_BINARY from the
#                    build context, static binaries built outside (CGO_ENABLED=0 make
#                    build), no Go image needed
#   OUTPOST_BINARY   that binary's path in the context (bin/outpost)
#   OUTPOST_OPERATOR_BINARY  the operator's (bin/outpost-operator)
#   VERSION          the version stamped into a binary built here (dev)
#   PACKAGES         Debian packages of both images (ca-certificates)
#   WORKER_PACKAGES  Debian packages the worker adds (git openssh-client ffmpeg);
#                    empty installs nothing (a base that has them already)

ARG BASE=debian:bookworm-slim
ARG GO_IMAGE=golang:1.26-bookworm
ARG BINARY=build

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X github.com/outpost-sh/outpost/internal/machine.Version=${VERSION}" \
      -o /out/outpost ./cmd/outpost && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/outpost-operator ./cmd/outpost-operator

FROM scratch AS context
ARG OUTPOST_BINARY=bin/outpost
ARG OUTPOST_OPERATOR_BINARY=bin/outpost-operator
COPY ${OUTPOST_BINARY} /out/outpost
COPY ${OUTPOST_OPERATOR_BINARY} /out/outpost-operator

FROM ${BINARY} AS binary

FROM ${BASE} AS server
ARG PACKAGES="ca-certificates"
RUN set -eu; \
    if [ -n "$PACKAGES" ]; then \
      apt-get update; \
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $PACKAGES; \
      rm -rf /var/lib/apt/lists/*; \
    fi; \
    echo 'outpost:x:10001:10001:Outpost:/home/outpost:/bin/sh' >> /etc/passwd; \
    echo 'outpost:x:10001:' >> /etc/group; \
    mkdir -p /home/outpost /var/lib/outpost; \
    chown 10001:10001 /home/outpost /var/lib/outpost; \
    chmod 700 /var/lib/outpost
COPY --from=binary /out/outpost /out/outpost-operator /usr/local/bin/
USER outpost
WORKDIR /home/outpost
ENV OUTPOST_DATA_DIR=/var/lib/outpost
VOLUME /var/lib/outpost
EXPOSE 7420
ENTRYPOINT ["outpost"]
CMD ["server", "--listen", "0.0.0.0:7420"]

FROM server AS worker
USER root
ARG WORKER_PACKAGES="git openssh-client ffmpeg"
RUN set -eu; \
    if [ -n "$WORKER_PACKAGES" ]; then \
      apt-get update; \
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $WORKER_PACKAGES; \
      rm -rf /var/lib/apt/lists/*; \
    fi; \
    mkdir -p /work; \
    chown 10001:10001 /work
USER outpost
WORKDIR /work
CMD ["worker", "start"]

FROM server

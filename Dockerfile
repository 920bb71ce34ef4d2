# The idem demo (cmd/idemdemo) and the ops CLI (cmd/idem) in a small static
# image. Built by docker-compose.yml; by hand: docker build -t idemdemo .
#
# Stage 1 builds static binaries (no cgo), stage 2 copies them onto a
# minimal runtime image and runs them as a non-root user (uid 65532,
# distroless's "nonroot").
#
# Both base images are build arguments, so that a machine without access to
# an image registry can use local ones (scripts/images.sh builds both from
# Debian packages; CI does):
#   GO_IMAGE       any image with Go >= the go.mod version on PATH and CA
#                  certificates (go mod download). Default: golang:1.26.
#   RUNTIME_IMAGE  any Linux image: the binaries are static and probe
#                  themselves (no shell, no curl needed). Default:
#                  gcr.io/distroless/static-debian12:nonroot (CA
#                  certificates and tzdata, no shell).

ARG GO_IMAGE=golang:1.26
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
# Each command is a module of its own; the image builds each from its
# go.mod alone, as `go install` would, not in the repository's workspace
# (go.work names integration/, which is not in the build context).
ENV GOWORK=off
# Dependencies first, so that a source change does not download them again:
# the go.mod files of the two commands and of the modules they use.
COPY go.mod go.sum ./
COPY mcphttp/go.mod mcphttp/go.sum mcphttp/
COPY idemotel/go.mod idemotel/go.sum idemotel/
COPY idemprom/go.mod idemprom/go.sum idemprom/
COPY cmd/idemdemo/go.mod cmd/idemdemo/go.sum cmd/idemdemo/
COPY cmd/idem/go.mod cmd/idem/go.sum cmd/idem/
RUN cd cmd/idemdemo && go mod download && cd ../idem && go mod download
COPY . .
ENV CGO_ENABLED=0
RUN cd cmd/idemdemo && go build -trimpath -ldflags="-s -w" -o /out/idemdemo . \
 && cd ../idem && go build -trimpath -ldflags="-s -w" -o /out/idem .

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/idemdemo /out/idem /usr/local/bin/
# Numeric, so that it works on any runtime image (distroless names it nonroot).
USER 65532:65532
EXPOSE 8080
# The demo announces the in-memory store loudly when DATABASE_URL is unset.
# Inside a container it must listen on every interface, not loopback.
ENTRYPOINT ["/usr/local/bin/idemdemo"]
CMD ["-addr", "0.0.0.0:8080"]
# No curl in the image: the demo probes itself.
HEALTHCHECK --interval=10s --timeout=6s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/idemdemo", "-probe", "http://127.0.0.1:8080/healthz"]

# The idem demo (cmd/idemdemo) and the ops CLI (cmd/idem) in a small static
# image. Built by docker-compose.yml; by hand: docker build -t idemdemo .
#
# Stage 1 builds static binaries (no cgo), stage 2 is distroless/static:
# no shell, no package manager, a non-root user, CA certificates and tzdata.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Dependencies first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags="-s -w" -o /out/idemdemo ./cmd/idemdemo \
 && go build -trimpath -ldflags="-s -w" -o /out/idem ./cmd/idem

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/idemdemo /out/idem /usr/local/bin/
USER nonroot:nonroot
EXPOSE 8080
# The demo announces the in-memory store loudly when DATABASE_URL is unset.
# Inside a container it must listen on every interface, not loopback.
ENTRYPOINT ["/usr/local/bin/idemdemo"]
CMD ["-addr", "0.0.0.0:8080"]
# No curl in the image: the demo probes itself.
HEALTHCHECK --interval=10s --timeout=6s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/idemdemo", "-probe", "http://127.0.0.1:8080/healthz"]

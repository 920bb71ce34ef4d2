#!/usr/bin/env bash
# Builds, from Debian packages only, the container images that the tests,
# docker-compose.yml and the Dockerfile need, for machines that cannot pull
# from an image registry (CI here). With a registry you need none of this:
# the defaults (postgres:17-alpine, golang, distroless) are pulled.
#
#   scripts/images.sh [base|postgres|go|all]...   (default: all)
#
# Images (names overridable by the environment variable in brackets):
#   idem-local/debian:bookworm   [IDEM_BASE_IMAGE]
#       debootstrap --variant=minbase bookworm with postgresql-15 and
#       ca-certificates, imported with `docker import`. The slow step
#       (about a minute); built once, reused while it exists.
#   idem-local/postgres:15       [IDEM_LOCAL_POSTGRES_IMAGE]
#       the base plus scripts/images/postgres: an entrypoint that behaves
#       like the official image (POSTGRES_USER, POSTGRES_PASSWORD,
#       POSTGRES_DB, /docker-entrypoint-initdb.d, the same readiness log
#       lines), so testcontainers' postgres module and docker-compose.yml
#       use it unchanged.
#   idem-local/go:VERSION        [IDEM_LOCAL_GO_IMAGE]
#       the base plus this machine's Go toolchain ($(go env GOROOT)) copied
#       in, with the host's CA bundle (to reach the Go module proxy as the
#       host does): the Dockerfile's builder stage (GO_IMAGE build argument).
#
# Prints `export NAME=image` lines for the images it built, so that
#   eval "$(scripts/images.sh)"
# points the tests (IDEM_TEST_POSTGRES_IMAGE), compose (IDEM_POSTGRES_IMAGE)
# and the Dockerfile (IDEM_GO_IMAGE, IDEM_RUNTIME_IMAGE) at them.
# Needs root (debootstrap), docker and debootstrap. DEBIAN_MIRROR overrides
# the mirror (default: http://deb.debian.org/debian).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BASE=${IDEM_BASE_IMAGE:-idem-local/debian:bookworm}
POSTGRES=${IDEM_LOCAL_POSTGRES_IMAGE:-idem-local/postgres:15}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

log() { printf '== images: %s\n' "$*" >&2; }
exists() { docker image inspect "$1" >/dev/null 2>&1; }

# The builders that make a temporary directory run in a subshell, whose EXIT
# trap removes it: a RETURN trap set in a function stays set after the
# function returns and fires again on the next function's return, where its
# local is gone (under set -u, an unbound variable that kills the script).
build_base() (
	if exists "$BASE"; then
		log "$BASE exists (docker rmi it to rebuild)"
		return
	fi
	command -v debootstrap >/dev/null || { echo "images: debootstrap is needed (apt-get install debootstrap)" >&2; exit 1; }
	local root
	root=$(mktemp -d /tmp/idem-rootfs.XXXXXX)
	trap 'rm -rf "$root" "$root.log"' EXIT
	log "debootstrap bookworm into $root (about a minute)"
	debootstrap --variant=minbase --include=postgresql-15,ca-certificates bookworm "$root" "$MIRROR" >"$root.log" 2>&1 \
		|| { tail -n 40 "$root.log" >&2; exit 1; }
	rm -f "$root.log"
	# Smaller image: no apt lists or package cache.
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
	log "docker import $BASE"
	tar -C "$root" -c . | docker import -c 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
)

build_postgres() {
	build_base
	log "docker build $POSTGRES"
	docker build -q --build-arg BASE="$BASE" -t "$POSTGRES" "$HERE/images/postgres" >/dev/null
	echo "export IDEM_TEST_POSTGRES_IMAGE=$POSTGRES IDEM_POSTGRES_IMAGE=$POSTGRES"
}

build_go() (
	build_base
	command -v go >/dev/null || { echo "images: go is needed: its toolchain is copied into the image" >&2; exit 1; }
	local version goroot image ctx
	version=$(go env GOVERSION)
	version=${version#go}
	goroot=$(go env GOROOT)
	image=${IDEM_LOCAL_GO_IMAGE:-idem-local/go:$version}
	if ! exists "$image"; then
		log "docker build $image from $goroot"
		ctx=$(mktemp -d /tmp/idem-goctx.XXXXXX)
		trap 'rm -rf "$ctx"' EXIT
		cp "$HERE/images/go/Dockerfile" "$ctx/"
		# The host's trust store, so that the builder reaches the Go module
		# proxy wherever the host does (through a TLS-inspecting proxy too).
		cp /etc/ssl/certs/ca-certificates.crt "$ctx/"
		# The toolchain without its tests and docs: what go build needs.
		tar -C "$goroot" --exclude=./test --exclude=./doc --exclude='*_test.go' -c . | (mkdir "$ctx/go" && tar -C "$ctx/go" -x)
		docker build -q --build-arg BASE="$BASE" -t "$image" "$ctx" >/dev/null
	else
		log "$image exists"
	fi
	echo "export IDEM_GO_IMAGE=$image IDEM_RUNTIME_IMAGE=$BASE"
)

[ $# -gt 0 ] || set -- all
for what in "$@"; do
	case $what in
	base) build_base ;;
	postgres) build_postgres ;;
	go) build_go ;;
	all) build_postgres; build_go ;;
	*) echo "usage: $0 [base|postgres|go|all]..." >&2; exit 2 ;;
	esac
done

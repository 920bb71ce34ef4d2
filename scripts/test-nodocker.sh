#!/usr/bin/env bash
# `make test-nodocker`: `make test` as a contributor without Docker runs it,
# on this machine made into theirs, both ways the README offers:
#
#   own-postgres  TEST_DATABASE_URL names a PostgreSQL (the one given):
#                 the tests that check containers skip, named and with the
#                 reason, and private servers are the system's binaries;
#   go-only       a laptop with only Go: no TEST_DATABASE_URL and no
#                 system PostgreSQL either; make test starts one of its own
#                 from the binaries `make test-pg-matrix` installed into
#                 .tools/ (npm's), and stops it at the end.
#
# Each runs in a mount namespace of its own (unshare) where Docker is not
# there: /run without docker.sock and containerd's files (what
# testcontainers-go and the docker CLI connect to), DOCKER_HOST unset, and
# a PATH without docker, dockerd or containerd. go-only also hides the
# system's PostgreSQL: /usr/lib/postgresql is empty there and no PostgreSQL
# program (pg_ctl, pg_config, psql, ...) is on PATH. Nothing is stopped or
# changed outside the namespace, so a running dockerd goes on serving
# everyone else.
#
# Both run with CI set (as in CI: a missing database fails, never skips),
# and each must pass, skip exactly the container tests with their reason,
# and (go-only) report the server it started from .tools and leave no
# server behind.
#
#   bash scripts/test-nodocker.sh URL     (as root: unshare and mount need it)
#
# URL is own-postgres's TEST_DATABASE_URL. NODOCKER_PKGS and NODOCKER_RUN
# choose the packages and tests (`make test`'s PKGS and -run); by default a
# subset that takes each path once (see SUBSET below); NODOCKER_PKGS=all
# runs the whole suite both ways (about ten minutes each).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
GO=${GO:-go}
TOOLS=$top/.tools

# SUBSET: what each way of getting a database touches, once. testdb's tests
# take the tests' shared database (TestSchemasAreIsolated) and a private
# server (TestServerStopsAndStarts, TestServerFromBinDir) from a binary
# with no container implementation (the root module's); integration/faults'
# TestDatabaseOutage takes both from a binary that has one
# (pgcontainer.Main), where choosing local binaries over containers is
# decided; pgcontainer's three tests are the ones that need containers and
# must skip. Every other test reaches PostgreSQL through the same
# testdb.URL and testdb.StartServer, so the rest of the suite adds time,
# not paths.
SUBSET_PKGS='./internal/testdb/ ./integration/internal/pgcontainer/ ./integration/faults/'
SUBSET_RUN='^(TestSchemasAreIsolated|TestServerStopsAndStarts|TestServerFromBinDir|TestContainersOff|TestOrphansAreRemoved|TestContainerOutlivesNothing|TestDatabaseOutage)$'
CONTAINER_SKIPS='3 × needs containers: containers off: TEST_DATABASE_URL is set: pgcontainer.TestContainerOutlivesNothing, pgcontainer.TestOrphansAreRemoved, pgcontainer.TestServerStopsAndStarts'

log() { printf '== test-nodocker [%ds]: %s\n' "$SECONDS" "$*" >&2; }

# inside MODE WORK: run in the new mount namespace; hides Docker (and for
# go-only the system's PostgreSQL), then runs make test.
inside() {
	local mode=$1 work=$2 entry name dir target
	# /run again, without Docker's entries: the real one stays reachable
	# under $work/run only until each kept entry is bound back.
	mkdir "$work/run"
	mount --bind /run "$work/run"
	mount -t tmpfs -o mode=755 tmpfs /run
	for entry in "$work"/run/* "$work"/run/.[!.]*; do
		[ -e "$entry" ] || [ -L "$entry" ] || continue
		name=${entry##*/}
		case $name in docker* | containerd*) continue ;; esac
		if [ -L "$entry" ]; then
			cp -P "$entry" "/run/$name"
		elif [ -d "$entry" ]; then
			mkdir -p "/run/$name" && mount --bind "$entry" "/run/$name"
		else
			touch "/run/$name" && mount --bind "$entry" "/run/$name"
		fi
	done
	umount "$work/run"
	unset DOCKER_HOST DOCKER_CONTEXT TEST_DATABASE_URL IDEM_TEST_POSTGRES_BIN IDEM_TEST_CONTAINERS
	if [ "$mode" = go-only ]; then
		if [ -d /usr/lib/postgresql ]; then mount -t tmpfs -o mode=755 tmpfs /usr/lib/postgresql; fi
	else
		export TEST_DATABASE_URL=$URL
	fi

	# PATH: every program of the current PATH (the first of each name),
	# linked from one directory, but Docker's (and PostgreSQL's for
	# go-only).
	mkdir "$work/bin"
	local IFS=:
	for dir in $PATH; do
		for entry in "$dir"/*; do
			name=${entry##*/}
			if [ ! -x "$entry" ] || [ -d "$entry" ] || [ -e "$work/bin/$name" ]; then continue; fi
			case $name in docker* | containerd* | ctr | runc) continue ;; esac
			if [ "$mode" = go-only ]; then
				case $name in
				pg_* | psql | postgres | postmaster | initdb | createdb | createuser | dropdb | dropuser | clusterdb | reindexdb | vacuumdb | vacuumlo | oid2name | pgbench) continue ;;
				esac
				target=$(readlink -f "$entry")
				case $target in /usr/lib/postgresql/* | /usr/share/postgresql-common/*) continue ;; esac
			fi
			ln -s "$entry" "$work/bin/$name"
		done
	done
	unset IFS
	export PATH=$work/bin

	# The simulation itself, checked.
	! command -v docker >/dev/null || { echo "FAIL: docker is still on PATH" >&2; return 1; }
	for entry in /var/run/docker.sock /run/docker.sock /run/containerd; do
		[ ! -e "$entry" ] || { echo "FAIL: $entry is still there" >&2; return 1; }
	done
	if [ "$mode" = go-only ]; then
		if command -v pg_ctl >/dev/null || command -v pg_config >/dev/null; then
			echo "FAIL: PostgreSQL is still on PATH" >&2
			return 1
		fi
		[ -z "$(ls -A /usr/lib/postgresql 2>/dev/null)" ] || { echo "FAIL: /usr/lib/postgresql is not empty" >&2; return 1; }
	fi

	GOTESTFLAGS=${RUN:+-run $RUN} make --no-print-directory test PKGS="$PKGS"
}

if [ "${1:-}" = --inside ]; then
	URL=$4 PKGS=$5 RUN=$6
	inside "$2" "$3"
	exit
fi

[ $# = 1 ] || { echo "usage: $0 TEST_DATABASE_URL" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "test-nodocker: needs root (unshare --mount)" >&2; exit 2; }
url=$1
pkgs=${NODOCKER_PKGS:-$SUBSET_PKGS} run=${NODOCKER_RUN:-}
if [ -z "${NODOCKER_PKGS:-}" ]; then
	run=${NODOCKER_RUN:-$SUBSET_RUN}
elif [ "$pkgs" = all ]; then
	pkgs=''
fi
work=$(mktemp -d /tmp/idem-nodocker.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work" # its bin/ is the PATH, the postgres user's too (runuser)

status=0
fail() {
	echo "FAIL: test-nodocker $mode: $*" >&2
	status=1
}
for mode in own-postgres go-only; do
	mkdir "$work/$mode"
	log "$mode: make test${pkgs:+ PKGS=\"$pkgs\"}${run:+ GOTESTFLAGS=\"-run $run\"}"
	start=$SECONDS
	rc=0
	CI=true unshare --mount --propagation private bash "$0" --inside "$mode" "$work/$mode" "$url" "$pkgs" "$run" 2>&1 |
		tee "$work/$mode.log" || rc=$?
	[ $rc = 0 ] || fail "make test exited with $rc"
	grep -qF "$CONTAINER_SKIPS" "$work/$mode.log" || fail "the container tests did not skip, by name, with the reason: $CONTAINER_SKIPS"
	if grep -q '× no PostgreSQL' "$work/$mode.log"; then fail "tests skipped for lack of PostgreSQL"; fi
	if [ -z "${NODOCKER_PKGS:-}" ]; then
		skipped=$(grep -oE '^SKIPPED [0-9]+ tests' "$work/$mode.log" || true)
		[ "$skipped" = "SKIPPED 3 tests" ] || fail "want exactly the 3 container tests skipped, got: ${skipped:-none}"
	fi
	if [ "$mode" = go-only ]; then
		# "PostgreSQL for every test: 18.4 from BIN, in ROOT, at URL"
		line=$(grep -E "^PostgreSQL for every test: [0-9.]+ from $TOOLS/postgres/[^ ]+, in [^ ]+, at " "$work/$mode.log" || true)
		if [ -z "$line" ]; then
			fail "make test did not start a PostgreSQL of its own from $TOOLS/postgres"
		else
			root=$(sed -E 's/.*, in ([^ ]+), at .*/\1/' <<<"$line")
			if pgrep -f "$root" >/dev/null; then fail "the run's PostgreSQL outlived it: $(pgrep -af "$root")"; fi
			[ ! -e "$root" ] || fail "the run left its server's directory $root"
		fi
	fi
	log "$mode: rc $rc in $((SECONDS - start))s"
done
[ $status = 0 ] && log "ok: make test passes without Docker, on TEST_DATABASE_URL and on a PostgreSQL of its own"
exit $status

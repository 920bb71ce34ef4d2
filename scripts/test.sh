#!/usr/bin/env bash
# `make test`: every test of every module of the workspace (go.work), with
# the race detector (pgstore's also in the exec and simple_protocol query
# exec modes, and the demo's telemetry test also in its build with -tags
# otlp), printed as plain `go test` would plus the skipped tests by
# reason, counted and named (internal/testsummary).
#
#   bash scripts/test.sh [PACKAGE...]
#
# PACKAGEs (./pgstore/, ./integration/faults/; `make test PKGS=...`) limit
# the run to those, with the same database; pgstore's extra query exec
# modes run when ./pgstore/ is one of them.
#
# The database (see internal/testdb), in this order:
#
#   1. TEST_DATABASE_URL when set: your own PostgreSQL, for every module.
#      No container is started and docker is not asked; private servers are
#      local PostgreSQL binaries (IDEM_TEST_POSTGRES_BIN, else found as
#      internal/testdb says), and the tests that check containers skip.
#   2. Else, when containers are enabled and a Docker engine answers: the
#      tests of every module but integration share one PostgreSQL container
#      that integration/cmd/testpostgres starts for this run and removes
#      afterwards (idem's root module requires no container library, so
#      its tests cannot start one themselves), and their private servers
#      are local PostgreSQL binaries; integration's test binaries start
#      their own containers (a PostgreSQL per binary, private servers as
#      containers too). The image is IDEM_TEST_POSTGRES_IMAGE, default
#      postgres:17-alpine. Every container of the run is labelled with its
#      IDEM_TEST_SESSION; afterwards any still there is removed and fails
#      the run: none may outlive the tests.
#   3. Else (no Docker engine, or IDEM_TEST_CONTAINERS=0): a PostgreSQL of
#      this run, for every module, from local binaries
#      (scripts/lib/postgres.sh: the system's, or those make test-pg-matrix
#      installed into .tools/; with none and npm on PATH, PostgreSQL
#      $PG_NEWEST installed there first), on a free port, stopped and
#      removed at the end; the private servers run the same binaries.
#      With no binaries at all the PostgreSQL tests skip (fail in CI).
#
# GOTESTFLAGS adds flags to every go test run (e.g. GOTESTFLAGS='-run X').
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
GO=${GO:-go}
export IDEM_TEST_SESSION=${IDEM_TEST_SESSION:-test-$$-$(date +%s)}
read -ra extra <<<"${GOTESTFLAGS:-}"
flags=(-race -count=1 -json "${extra[@]}")

TOOLS=$PWD/.tools
log() { printf '== make test: %s\n' "$*" >&2; }
# shellcheck source=scripts/lib/postgres.sh
. scripts/lib/postgres.sh

bin=$(mktemp -d)
pg_pid=
# stopPostgres ends testpostgres (its standard input closed) and waits for
# it to remove the container.
stopPostgres() {
	[ -n "$pg_pid" ] || return 0
	exec {pg_in}>&-
	wait "$pg_pid" || { echo "FAIL: testpostgres could not remove its container" >&2; return 1; }
	pg_pid=
}
trap 'stopPostgres; pg_stop; rm -rf "$bin"' EXIT
"$GO" build -o "$bin/testsummary" ./internal/testsummary || exit 1

# The packages: those given, else every module's; integration's run in its
# own directory (its module), the others from here. ./... alone is the
# root module's packages only, even in a workspace.
patterns=() integration=() pgstore_modes=false everything=false
if [ $# -gt 0 ]; then
	for p in "$@"; do
		case $p in
		./integration/*) integration+=("./${p#./integration/}") ;;
		*) patterns+=("$p") ;;
		esac
		case $p in ./pgstore | ./pgstore/ | ./pgstore/... | ./...) pgstore_modes=true ;; esac
	done
else
	while read -r dir; do
		rel=${dir#"$PWD"}
		[ "$rel" = /integration ] || patterns+=(".$rel/...")
	done < <("$GO" list -m -f '{{.Dir}}')
	integration=(./...) pgstore_modes=true everything=true
fi

status=0
db=() # the tests' environment outside integration/
containers=false
if [ -z "${TEST_DATABASE_URL:-}" ] && [ "${IDEM_TEST_CONTAINERS:-}" != 0 ]; then
	(cd integration && "$GO" build -o "$bin/testpostgres" ./cmd/testpostgres) || exit 1
	coproc PG { "$bin/testpostgres"; }
	# shellcheck disable=SC2153 # PG_PID is the coprocess's, set by coproc
	pg_pid=$PG_PID pg_in=${PG[1]}
	if read -r url <&"${PG[0]}"; then
		db=(TEST_DATABASE_URL="$url")
		containers=true
		echo "PostgreSQL for the tests outside integration/: a container of $IDEM_TEST_SESSION ($url)"
	else
		wait "$pg_pid"
		rc=$? pg_pid=
		# 3: no Docker engine (the reason is on stderr): a server of
		# our own below. Anything else is a container that did not start.
		[ $rc = 3 ] || { echo "FAIL: testpostgres exited with $rc" >&2; exit 1; }
	fi
fi
if [ -z "${TEST_DATABASE_URL:-}" ] && ! $containers; then
	if pgbin=$(pg_find_bindir) || { command -v npm >/dev/null && pgbin=$(pg_bindir "$PG_NEWEST"); }; then
		pg_start "$pgbin" "$(mktemp -d /tmp/idem-test-pg.XXXXXX)" || { echo "FAIL: could not start PostgreSQL from $pgbin" >&2; exit 1; }
		# Every module's tests, integration's too, and their private
		# servers from the same binaries.
		export TEST_DATABASE_URL=$PG_URL IDEM_TEST_POSTGRES_BIN=$PG_BIN
		echo "PostgreSQL for every test: $("$PG_BIN/postgres" --version | awk '{print $3}') from $pgbin, in $PG_ROOT, at $PG_URL (stopped and removed at the end)"
	else
		echo "No Docker engine and no PostgreSQL binaries: the tests that need PostgreSQL skip (fail in CI). Install PostgreSQL's server, or npm (make test then installs PostgreSQL $PG_NEWEST into .tools/), or set TEST_DATABASE_URL." >&2
	fi
fi

{
	failed=0
	if [ ${#patterns[@]} -gt 0 ]; then
		env "${db[@]}" "$GO" test "${flags[@]}" "${patterns[@]}" || failed=1
	fi
	if $pgstore_modes; then
		# pgstore again in the query exec modes poolers in transaction
		# mode need (parameters sent with types guessed from Go, or
		# interpolated).
		env "${db[@]}" TEST_QUERY_EXEC_MODE=exec "$GO" test "${flags[@]}" ./pgstore/ || failed=1
		env "${db[@]}" TEST_QUERY_EXEC_MODE=simple_protocol "$GO" test "${flags[@]}" ./pgstore/ || failed=1
	fi
	if $everything; then
		# The demo's OTLP exporters, in its build with -tags otlp only.
		env "${db[@]}" "$GO" test "${flags[@]}" -tags otlp -run '^TestTelemetryConfig$' ./cmd/idemdemo/ || failed=1
	fi
	if [ ${#integration[@]} -gt 0 ]; then
		(cd integration && "$GO" test "${flags[@]}" "${integration[@]}") || failed=1
	fi
	exit $failed
} | "$bin/testsummary" || status=1
stopPostgres || status=1

# Only a run with containers asks docker for those left behind.
if $containers; then
	mapfile -t left < <(docker ps -aq --filter "label=io.idemkit.testdb.session=$IDEM_TEST_SESSION")
	if [ ${#left[@]} -gt 0 ]; then
		echo "FAIL: ${#left[@]} PostgreSQL container(s) outlived the tests; removing them:" >&2
		docker rm -fv "${left[@]}" >&2
		status=1
	fi
fi
exit $status

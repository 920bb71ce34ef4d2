#!/usr/bin/env bash
# `make test`: every test of every module of the workspace (go.work), with
# the race detector (pgstore's also in the exec and simple_protocol query
# exec modes), printed as plain `go test` would plus one line counting
# skipped tests by reason (internal/testsummary).
#
# The database (see internal/testdb): TEST_DATABASE_URL when set. Else,
# when containers are enabled, the tests of every module but integration
# share one PostgreSQL container that integration/cmd/testpostgres starts
# for this run and removes afterwards (idem's root module requires no
# container library, so its tests cannot start one themselves), and their
# private servers are local PostgreSQL binaries; integration's test
# binaries start their own containers (a PostgreSQL per binary, private
# servers as containers too). The image is IDEM_TEST_POSTGRES_IMAGE,
# default postgres:17-alpine. With no Docker engine the PostgreSQL tests
# skip (and fail when CI is set).
#
# Every container of the run is labelled with its IDEM_TEST_SESSION;
# afterwards any still there is removed and fails the run: none may
# outlive the tests. With IDEM_TEST_CONTAINERS=0 none is started, and
# docker is not asked.
#
# GOTESTFLAGS adds flags to every go test run (e.g. GOTESTFLAGS='-run X').
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
GO=${GO:-go}
export IDEM_TEST_SESSION=${IDEM_TEST_SESSION:-test-$$-$(date +%s)}
read -ra extra <<<"${GOTESTFLAGS:-}"
flags=(-race -count=1 -json "${extra[@]}")

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
trap 'stopPostgres; rm -rf "$bin"' EXIT
"$GO" build -o "$bin/testsummary" ./internal/testsummary || exit 1

# The package patterns of every module but integration: ./... alone is the
# root module's packages only, even in a workspace.
patterns=()
while read -r dir; do
	rel=${dir#"$PWD"}
	[ "$rel" = /integration ] || patterns+=(".$rel/...")
done < <("$GO" list -m -f '{{.Dir}}')

status=0
db=()
if [ -z "${TEST_DATABASE_URL:-}" ] && [ "${IDEM_TEST_CONTAINERS:-}" != 0 ]; then
	(cd integration && "$GO" build -o "$bin/testpostgres" ./cmd/testpostgres) || exit 1
	coproc PG { "$bin/testpostgres"; }
	# shellcheck disable=SC2153 # PG_PID is the coprocess's, set by coproc
	pg_pid=$PG_PID pg_in=${PG[1]}
	if read -r url <&"${PG[0]}"; then
		db=(TEST_DATABASE_URL="$url")
		echo "PostgreSQL for the tests outside integration/: a container of $IDEM_TEST_SESSION ($url)"
	else
		wait "$pg_pid"
		rc=$? pg_pid=
		# 3: no Docker engine (the reason is on stderr); the tests skip,
		# or fail in CI. Anything else is a container that did not start.
		[ $rc = 3 ] || { echo "FAIL: testpostgres exited with $rc" >&2; exit 1; }
	fi
fi

{
	failed=0
	env "${db[@]}" "$GO" test "${flags[@]}" "${patterns[@]}" || failed=1
	# pgstore again in the query exec modes poolers in transaction mode
	# need (parameters sent with types guessed from Go, or interpolated).
	env "${db[@]}" TEST_QUERY_EXEC_MODE=exec "$GO" test "${flags[@]}" ./pgstore/ || failed=1
	env "${db[@]}" TEST_QUERY_EXEC_MODE=simple_protocol "$GO" test "${flags[@]}" ./pgstore/ || failed=1
	(cd integration && "$GO" test "${flags[@]}" ./...) || failed=1
	exit $failed
} | "$bin/testsummary" || status=1
stopPostgres || status=1

# With containers disabled no test started one: do not ask docker.
if [ "${IDEM_TEST_CONTAINERS:-}" != 0 ] && command -v docker >/dev/null && docker info >/dev/null 2>&1; then
	mapfile -t left < <(docker ps -aq --filter "label=io.idemkit.testdb.session=$IDEM_TEST_SESSION")
	if [ ${#left[@]} -gt 0 ]; then
		echo "FAIL: ${#left[@]} PostgreSQL container(s) outlived the tests; removing them:" >&2
		docker rm -fv "${left[@]}" >&2
		status=1
	fi
fi
exit $status

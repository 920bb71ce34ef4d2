#!/usr/bin/env bash
# Runs scripts/test.sh with go and docker replaced by stubs that record what
# they were asked, and checks that:
#   - with containers disabled (IDEM_TEST_CONTAINERS=0) it never asks
#     docker anything and starts no testpostgres;
#   - with them enabled and TEST_DATABASE_URL unset it starts testpostgres,
#     gives its URL to the tests of every module but integration (and not
#     to integration's), ends it afterwards, and looks for containers the
#     tests left behind;
#   - with TEST_DATABASE_URL set it starts no testpostgres.
#
#   bash scripts/check/test-sh.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"

# go: "build -o X" makes X a filter that passes its input through, or for
# testpostgres a program that prints a URL and waits for the end of its
# input, then (a second later, as a container's removal takes time) notes
# that it ended; "list -m" names two modules, the root
# and integration; "test" succeeds and prints nothing. Every call is logged
# with the TEST_DATABASE_URL it saw and the directory it ran in.
cat >"$work/bin/go" <<'STUB'
#!/usr/bin/env bash
echo "go[${TEST_DATABASE_URL:-}] ${PWD#"$STUB_ROOT"} $*" >>"$STUB_LOG"
case "$1 ${2:-}" in
"build -o")
	if [ "${3##*/}" = testpostgres ]; then
		printf '#!/bin/sh\necho postgres://stub\ncat >/dev/null\nsleep 1\necho ended >>"%s"\n' "$STUB_LOG.testpostgres" >"$3"
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
chmod +x "$work/bin/go" "$work/bin/docker"

export STUB_LOG=$work/log STUB_ROOT=$here
fail=0
failf() {
	echo "FAIL: $*" >&2
	fail=1
}
run() {
	: >"$STUB_LOG"
	rm -f "$STUB_LOG.testpostgres"
	if ! env -u TEST_DATABASE_URL "$@" PATH="$work/bin:$PATH" GO="$work/bin/go" bash "$here/scripts/test.sh" >"$work/out" 2>&1; then
		failf "scripts/test.sh with $*:"
		cat "$work/out" >&2
	fi
}

run IDEM_TEST_CONTAINERS=0
grep -q '^docker' "$STUB_LOG" && failf "scripts/test.sh ran docker with IDEM_TEST_CONTAINERS=0: $(grep '^docker' "$STUB_LOG")"
grep -q 'testpostgres' "$STUB_LOG" && failf "scripts/test.sh built testpostgres with IDEM_TEST_CONTAINERS=0"

run IDEM_TEST_CONTAINERS=
grep -q '^docker ps' "$STUB_LOG" || failf "scripts/test.sh did not look for leftover containers with containers enabled"
grep -q '^go\[\] /integration build -o .*/testpostgres ./cmd/testpostgres' "$STUB_LOG" || failf "scripts/test.sh did not build testpostgres in integration/"
grep -q '^go\[postgres://stub\]  test .* \./\.\.\.$' "$STUB_LOG" || failf "the root module's go test did not get testpostgres's URL: $(grep ' test ' "$STUB_LOG")"
grep -q '^go\[postgres://stub\] /integration' "$STUB_LOG" && failf "integration's go test got testpostgres's URL (its binaries start their own containers)"
grep -q '^go\[\] /integration test ' "$STUB_LOG" || failf "scripts/test.sh did not run integration's tests"
[ "$(cat "$STUB_LOG.testpostgres" 2>/dev/null)" = ended ] || failf "testpostgres was not ended (its input closed) by the end of scripts/test.sh"

run TEST_DATABASE_URL=postgres://given
grep -q 'testpostgres' "$STUB_LOG" && failf "scripts/test.sh built testpostgres with TEST_DATABASE_URL set"
grep -q '^go\[postgres://given\]  test ' "$STUB_LOG" || failf "the root module's go test did not get the given TEST_DATABASE_URL"

[ $fail = 0 ] && echo "ok: scripts/test.sh asks docker only when containers are enabled, and starts one container for the tests outside integration/ only without TEST_DATABASE_URL"
exit $fail

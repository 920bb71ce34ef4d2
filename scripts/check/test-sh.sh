#!/usr/bin/env bash
# Runs scripts/test.sh with go and docker replaced by stubs that record what
# they were asked, and checks that with containers disabled
# (IDEM_TEST_CONTAINERS=0) it never asks docker anything, and that with
# them enabled it looks for containers the tests left behind.
#
#   bash scripts/check/test-sh.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"

# go: "build -o X" makes X a filter that passes its input through; "test"
# succeeds and prints nothing.
cat >"$work/bin/go" <<'STUB'
#!/usr/bin/env bash
echo "go $*" >>"$STUB_LOG"
if [ "$1" = build ]; then
	printf '#!/bin/sh\ncat\n' >"$3"
	chmod +x "$3"
fi
STUB
# docker: an engine that answers and has no containers.
cat >"$work/bin/docker" <<'STUB'
#!/usr/bin/env bash
echo "docker $*" >>"$STUB_LOG"
STUB
chmod +x "$work/bin/go" "$work/bin/docker"

export STUB_LOG=$work/log
fail=0
run() {
	: >"$STUB_LOG"
	if ! env "$@" PATH="$work/bin:$PATH" GO="$work/bin/go" bash "$here/scripts/test.sh" >"$work/out" 2>&1; then
		echo "FAIL: scripts/test.sh with $*:" >&2
		cat "$work/out" >&2
		fail=1
	fi
}
run IDEM_TEST_CONTAINERS=0
if grep -q '^docker' "$STUB_LOG"; then
	echo "FAIL: scripts/test.sh ran docker with IDEM_TEST_CONTAINERS=0:" >&2
	grep '^docker' "$STUB_LOG" >&2
	fail=1
fi
run IDEM_TEST_CONTAINERS=
if ! grep -q '^docker ps' "$STUB_LOG"; then
	echo "FAIL: scripts/test.sh did not look for leftover containers with containers enabled" >&2
	fail=1
fi
[ $fail = 0 ] && echo "ok: scripts/test.sh asks docker only when containers are enabled"
exit $fail

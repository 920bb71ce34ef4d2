#!/usr/bin/env bash
# Runs scripts/images.sh on a machine that has none of its images, with
# docker and debootstrap replaced by stubs that record what they were asked,
# and checks that every builder ran and every export was printed. A cold
# machine is the case a warm one never exercises: the base image is built
# (and its temporary directory removed) in the same run that then builds
# the PostgreSQL and Go images.
#
#   bash scripts/check/images.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"

# docker: no image exists; import and build succeed and are logged.
cat >"$work/bin/docker" <<'STUB'
#!/usr/bin/env bash
echo "docker $*" >>"$STUB_LOG"
case $1 in
image) exit 1 ;;
import | build) cat >/dev/null 2>&1 || true ;;
esac
STUB
# debootstrap: makes the root it was given.
cat >"$work/bin/debootstrap" <<'STUB'
#!/usr/bin/env bash
echo "debootstrap $*" >>"$STUB_LOG"
mkdir -p "$4/etc"
STUB
chmod +x "$work/bin/docker" "$work/bin/debootstrap"

export STUB_LOG=$work/log
if ! out=$(PATH="$work/bin:$PATH" bash "$here/scripts/images.sh" 2>"$work/stderr"); then
	echo "FAIL: scripts/images.sh on a cold machine:" >&2
	cat "$work/stderr" >&2
	exit 1
fi
fail=0
for want in IDEM_TEST_POSTGRES_IMAGE IDEM_POSTGRES_IMAGE IDEM_GO_IMAGE IDEM_RUNTIME_IMAGE; do
	grep -q "$want=" <<<"$out" || { echo "FAIL: scripts/images.sh printed no $want" >&2; fail=1; }
done
for want in 'debootstrap --variant=minbase' 'docker import' 'docker build'; do
	grep -q -- "$want" "$STUB_LOG" || { echo "FAIL: scripts/images.sh never ran $want" >&2; fail=1; }
done
root=$(awk '$1 == "debootstrap" { print $5 }' "$STUB_LOG")
[ ! -e "$root" ] || { echo "FAIL: scripts/images.sh left $root behind" >&2; rm -rf "$root"; fail=1; }
[ $fail -eq 0 ] && echo "ok: scripts/images.sh on a cold machine built base, postgres and go and printed their exports"
exit $fail

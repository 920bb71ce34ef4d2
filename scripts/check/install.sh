#!/usr/bin/env bash
# Runs the README's Install block as written, in a new module next to a
# clone of this repository, and builds the quickstart there: with the
# block's `replace`, and again with the workspace (go work init) it offers
# instead. The clone is of this checkout's HEAD: `git clone` of the
# README's URL is redirected here (url.insteadOf), so nothing is fetched
# from GitHub; modules come from the module cache or proxy as usual.
#
#   bash scripts/check/install.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# The sh block under "## Install".
block=$(awk '/^## Install/ {on = 1} on && /^```sh$/ {inblock = 1; next} inblock && /^```$/ {exit} inblock' "$here/README.md")
if [ -z "$block" ]; then
	echo "FAIL: no sh block under ## Install in README.md" >&2
	exit 1
fi

export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0="url.$here/.insteadOf" GIT_CONFIG_VALUE_0=https://github.com/idemkit/idem.git
export GOBIN=$work/bin GOFLAGS=-mod=mod GOWORK=off
newModule() {
	rm -rf "$work/shop" "$work/idem"
	mkdir "$work/shop"
	cp "$here/examples/quickstart/main.go" "$work/shop/"
	(cd "$work/shop" && go mod init example.com/shop >/dev/null 2>&1)
}

newModule
if ! (cd "$work/shop" && set -x && eval "$block") >"$work/log" 2>&1; then
	echo "FAIL: the README's Install block:" >&2
	cat "$work/log" >&2
	exit 1
fi
(cd "$work/shop" && go build -o /dev/null . && go vet .) || { echo "FAIL: the quickstart does not build with the replace" >&2; exit 1; }
[ -x "$work/bin/idem" ] || { echo "FAIL: the block did not install the idem CLI" >&2; exit 1; }
"$work/bin/idem" --help >/dev/null

# The workspace instead of the replace.
newModule
(
	cd "$work/shop"
	git clone -q https://github.com/idemkit/idem.git ../idem
	go work init . ../idem
	GOWORK='' GOFLAGS='' go build -o /dev/null .
) >"$work/log" 2>&1 || { echo "FAIL: the quickstart does not build in a workspace:" >&2; cat "$work/log" >&2; exit 1; }
echo "ok: the README's Install block works in a new module, with replace and with a workspace"

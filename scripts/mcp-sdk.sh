#!/usr/bin/env bash
# Runs the TypeScript SDK interop test (integration/mcpsdk): the official
# MCP TypeScript SDK's Client and StreamableHTTPClientTransport against the
# demo's /mcp, at 2025-11-25 (@modelcontextprotocol/sdk) and 2026-07-28
# (@modelcontextprotocol/client), with the in-memory store and PostgreSQL.
#
# Installs what it needs into $REPO/.tools when missing, from the npm
# registry only: Node 22 (scripts/lib/node.sh) and exactly the packages
# integration/mcpsdk/client/package-lock.json pins (npm ci), in
# .tools/mcp-sdk.
#
# Environment: TEST_DATABASE_URL as for every test (else a PostgreSQL
# container, see internal/testdb); GOTESTFLAGS adds go test flags.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
TOOLS="$REPO/.tools"
SRC="$REPO/integration/mcpsdk/client"
DIR="$TOOLS/mcp-sdk"

log() { printf '== %s\n' "$*" >&2; }

# shellcheck disable=SC1091 # scripts/lib/node.sh, linted on its own
. "$REPO/scripts/lib/node.sh"
ensure_node "$TOOLS"

if ! cmp -s "$SRC/package-lock.json" "$DIR/package-lock.json" || [ ! -d "$DIR/node_modules" ]; then
	log "installing the TypeScript SDK pinned by $SRC/package-lock.json into $DIR"
	mkdir -p "$DIR"
	cp "$SRC/package.json" "$SRC/package-lock.json" "$DIR/"
	(cd "$DIR" && npm ci --silent --no-audit --no-fund >&2)
fi
log "$(cd "$DIR" && "$NODE" -p 'const l = require("./package-lock.json").packages; ["@modelcontextprotocol/sdk", "@modelcontextprotocol/client"].map((p) => p + "@" + l["node_modules/" + p].version).join(", ")')"

start=$SECONDS
# shellcheck disable=SC2086 # GOTESTFLAGS is a list of flags
(cd "$REPO/integration" && MCP_SDK_DIR="$DIR" MCP_SDK_REQUIRED=1 NODE="$NODE" \
	go test -count=1 -run '^TestTypeScriptSDK$' ${GOTESTFLAGS:-} ./mcpsdk/)
log "TypeScript SDK interop: ok in $((SECONDS - start))s"

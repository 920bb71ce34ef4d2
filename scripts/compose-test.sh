#!/usr/bin/env bash
# `make compose-test`: docker-compose.yml and the Dockerfile, exercised.
# Brings the stack up (the demo image built from this checkout), checks
# /healthz, posts an invoice twice with one Idempotency-Key (one invoice,
# the second answer replayed), restarts the demo container, replays once
# more, and brings the stack down with its volume.
#
# Uses `docker compose` if present, else `docker-compose` (1.29). Runs as
# its own compose project on free ports, so it does not collide with
# `make db` or another run. Images come from the environment as in
# docker-compose.yml (IDEM_POSTGRES_IMAGE, IDEM_GO_IMAGE,
# IDEM_RUNTIME_IMAGE; `eval "$(scripts/images.sh)"` sets them to local ones).
# Needs curl.
set -euo pipefail
cd "$(dirname "$0")/.."

if docker compose version >/dev/null 2>&1; then
	compose=(docker compose)
else
	compose=(docker-compose)
fi
project=idem-compose-test-$$
compose+=(-p "$project")

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export IDEM_POSTGRES_PORT=${IDEM_POSTGRES_PORT:-$(free_port)}
export IDEM_DEMO_PORT=${IDEM_DEMO_PORT:-$(free_port)}
base=http://127.0.0.1:$IDEM_DEMO_PORT

out=$(mktemp) # compose's own output, shown when something fails
log() { printf '== compose-test [%ss]: %s\n' "$SECONDS" "$*" >&2; }
fail() {
	printf 'FAIL compose-test: %s\n' "$*" >&2
	tail -n 40 "$out" >&2
	"${compose[@]}" logs --no-color --tail 50 >&2 || true
	exit 1
}
down() {
	"${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
	rm -f "$out"
}
trap down EXIT

# wait_healthy SERVICE: until Docker's health check passes (3 minutes).
wait_healthy() {
	local id status
	id=$("${compose[@]}" ps -q "$1")
	[ -n "$id" ] || fail "no container for $1"
	for _ in $(seq 1 180); do
		status=$(docker inspect -f '{{.State.Health.Status}}' "$id")
		[ "$status" = healthy ] && return 0
		sleep 1
	done
	fail "$1 is $status after 3 minutes"
}

# post KEY BODY: POST /invoices; sets status, replayed, body.
post() {
	local headers
	headers=$(mktemp)
	body=$(curl -sS -D "$headers" -o - -X POST "$base/invoices" \
		-H 'Content-Type: application/json' -H "Idempotency-Key: $1" -d "$2") || fail "POST /invoices"
	status=$(awk 'NR == 1 {print $2}' "$headers")
	replayed=$(tr -d '\r' <"$headers" | awk -F': ' 'tolower($1) == "idempotent-replayed" {print $2}')
	rm -f "$headers"
}

log "${compose[*]} up (postgres :$IDEM_POSTGRES_PORT, demo :$IDEM_DEMO_PORT)"
"${compose[@]}" up -d --build >"$out" 2>&1 || fail "compose up"
wait_healthy postgres
wait_healthy demo

health=$(curl -sS -o /dev/null -w '%{http_code}' "$base/healthz") || fail "GET /healthz"
[ "$health" = 200 ] || fail "GET /healthz: $health"
log "/healthz 200"

key=compose-test-$(date +%s)-$$
customer=$key
payload="{\"customer\": \"$customer\", \"amount_cents\": 4200}"
post "$key" "$payload"
[ "$status" = 201 ] || fail "first POST: $status $body"
first=$body
# The last answer was a replay of the first.
replayed_first() { [ "$status" = 201 ] && [ "$replayed" = true ] && [ "$body" = "$first" ]; }
post "$key" "$payload"
replayed_first || fail "retry: $status, Idempotent-Replayed: '$replayed', body $body (first: $first)"
log "retry replayed: $body"

log "restarting the demo container"
"${compose[@]}" restart demo >>"$out" 2>&1 || fail "compose restart demo"
wait_healthy demo
post "$key" "$payload"
replayed_first || fail "retry after restart: $status, Idempotent-Replayed: '$replayed', body $body (first: $first)"
log "retry after the restart replayed from PostgreSQL"

n=$(curl -sS "$base/invoices" | python3 -c 'import json, sys; print(sum(1 for i in json.load(sys.stdin) if i["customer"] == sys.argv[1]))' "$customer") ||
	fail "GET /invoices"
[ "$n" = 1 ] || fail "$n invoices for $customer, want 1"
log "one invoice; ok"

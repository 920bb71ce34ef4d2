#!/usr/bin/env bash
# Measure idem's SQL against a peer protocol and against the invoice alone,
# server side only, with pgbench: the statements of a new key on the
# one-commit path (scripts/pgbench/onecommit.sql), on the two-phase path
# (twophase.sql), both generated from pgstore's statements
# (TestPgbenchScriptsMatchTheStatements), the bare minimum of any durable
# dedupe, the invoice and its key's row with its answer in one commit
# (minimum.sql), by hand with the plainest SQL (onecommit-floor.sql), the
# peer protocol (peer.sql) and the invoice without idempotency
# (insert.sql). Each runs in a schema of its own (idem's table migrated by
# cmd/idem), in ROUNDS turns of SECONDS_PER_SCRIPT/ROUNDS seconds, the scripts taking
# turns, at each number of clients. A transaction that fails with a
# serialization error is tried again (pgbench --max-tries), as the peer
# protocol's SERIALIZABLE transactions need; the retries count in the
# time, not in the transactions.
#
#   scripts/pgbench.sh DSN [CLIENTS ...]      (default clients: 1 16 64)
#
# SECONDS_PER_SCRIPT (default 15) and ROUNDS (default 3) set the time per script and
# the turns. DSN is a postgres:// URL of a role that may create a schema.
# Prints transactions per second per script and clients, and the ratios
# docs/performance.md reports. Needs pgbench and psql (PostgreSQL 14 or
# later, for pipelines) and go.
set -euo pipefail

[[ $# -ge 1 ]] || { echo "usage: $0 DSN [CLIENTS ...]" >&2; exit 2; }
dsn=$1
shift
clients=("$@")
[[ ${#clients[@]} -gt 0 ]] || clients=(1 16 64)
seconds=${SECONDS_PER_SCRIPT:-${SECONDS_TOTAL:-15}}
rounds=${ROUNDS:-3}
scripts=(insert minimum onecommit-floor onecommit twophase peer)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

schema=pgbench_idem_$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
sep='?'
[[ $dsn == *\?* ]] && sep='&'
url="${dsn}${sep}options=-csearch_path%3D${schema}"
psql -qX "$dsn" -c "CREATE SCHEMA $schema"
trap 'psql -qX "$dsn" -c "SET client_min_messages = warning" -c "DROP SCHEMA $schema CASCADE"' EXIT
(cd "$root" && go run ./cmd/idem --database-url "$url" migrate up >/dev/null)
psql -qX "$url" -f "$here/pgbench/setup.sql"

declare -A txs secs
slice=$((seconds / rounds))
[[ $slice -ge 1 ]] || slice=1
for c in "${clients[@]}"; do
	j=$((c < 2 ? c : 2))
	for ((r = 1; r <= rounds; r++)); do
		for s in "${scripts[@]}"; do
			out=$(pgbench -n -M prepared --max-tries=100 -c "$c" -j "$j" -T "$slice" -f "$here/pgbench/$s.sql" "$url" 2>&1) || { echo "$out" >&2; exit 1; }
			n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
			failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' <<<"$out")
			[[ ${failed:-0} == 0 ]] || { echo "$s at $c clients: $failed failed transactions" >&2; echo "$out" >&2; exit 1; }
			txs[$s,$c]=$((${txs[$s,$c]:-0} + n))
			secs[$s,$c]=$((${secs[$s,$c]:-0} + slice))
		done
	done
done

tps() { awk -v n="${txs[$1,$2]}" -v s="${secs[$1,$2]}" 'BEGIN { printf "%.0f", n / s }'; }
ratio() { awk -v a="$(tps "$1" "$3")" -v b="$(tps "$2" "$3")" 'BEGIN { printf "%.2f", a / b }'; }
printf '%-8s' clients
for s in "${scripts[@]}"; do printf ' %16s' "$s"; done
printf ' %18s %18s %18s %18s %18s\n' onecommit/peer twophase/peer onecommit/insert onecommit/floor onecommit/minimum
for c in "${clients[@]}"; do
	printf '%-8s' "$c"
	for s in "${scripts[@]}"; do printf ' %16s' "$(tps "$s" "$c")"; done
	printf ' %18s %18s %18s %18s %18s\n' "$(ratio onecommit peer "$c")" "$(ratio twophase peer "$c")" \
		"$(ratio onecommit insert "$c")" "$(ratio onecommit onecommit-floor "$c")" "$(ratio onecommit minimum "$c")"
done

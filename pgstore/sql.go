package pgstore

import (
	"strings"

	"github.com/idemkit/idem/migrations"
)

// statements holds the SQL of every operation, with the table's object
// names filled in (they are validated identifiers; see migrations.ObjectsFor).
//
// Parameters common to all: scope is bytea (the exact bytes of the Go
// string), key is text, and $now is a nullable timestamptz: null means the
// database clock, statement_timestamp().
type statements struct {
	claim, complete, renew, release, sweep, waitCheck, pollCheck, inspect, forget, stats, channel, heartbeat string
	// forgetQuiet is forget without its NOTIFY, for Options.NoListen:
	// nobody LISTENs, and the engine may have no pg_notify.
	forgetQuiet string
}

// nowSQL is "now" in every statement.
const nowSQL = `coalesce(%NOW%::timestamptz, statement_timestamp())`

// payloadSQL is the NOTIFY payload for the row's (scope, key); it must match
// notifyPayload and the completion function in the migration.
const payloadSQL = `md5(scope || '\x00'::bytea || convert_to(key, 'UTF8'))`

func buildStatements(o migrations.Objects) statements {
	r := func(sql, now string) string {
		return strings.NewReplacer(
			"%NOW%", now,
			"{T}", o.Table,
			"{SEQ}", o.Sequence,
			"{FN}", o.CompleteFunc,
			"{CH}", o.ChannelSQL,
			"{PAYLOAD}", payloadSQL,
		).Replace(strings.ReplaceAll(sql, "{NOW}", nowSQL))
	}
	st := statements{
		// Claim: read the row; if it holds a live claim or a retained
		// result, answer from it without writing (a replay or a duplicate
		// takes no lock and writes no WAL). Otherwise insert, or take over a
		// row whose claim's lease or whose result's retention ran out.
		//
		// The read sees the statement's snapshot. If the INSERT conflicts
		// with a row that committed after the snapshot (a concurrent first
		// claim), the statement returns either no row or a row by which the
		// claim should have succeeded; Claim detects both and runs the
		// statement again, on a newer snapshot. A generation is drawn only
		// when inserting or taking over; an attempt that conflicts wastes
		// one, which is harmless (gaps are allowed, reuse is impossible).
		claim: r(`
WITH cur AS (
    SELECT state, generation, fingerprint, lease_end, expires_at, result
      FROM {T} WHERE scope = $1 AND key = $2
), ins AS (
    INSERT INTO {T} AS t (scope, key, generation, state, fingerprint, owner, takeover, lease_end, created_at)
    SELECT $1::bytea, $2::text, nextval('{SEQ}'), 'claimed', $3::text, $4::text, false,
           {NOW} + $5::bigint * interval '1 microsecond', {NOW}
     WHERE NOT EXISTS (
           SELECT FROM cur
            WHERE (state = 'claimed' AND lease_end > {NOW})
               OR (state = 'completed' AND (expires_at IS NULL OR expires_at > {NOW})))
    ON CONFLICT (scope, key) DO UPDATE
       SET generation = excluded.generation,
           state = 'claimed',
           fingerprint = excluded.fingerprint,
           owner = excluded.owner,
           takeover = (t.state = 'claimed'),
           lease_end = excluded.lease_end,
           result = NULL,
           waited = false,
           created_at = excluded.created_at,
           completed_at = NULL,
           expires_at = NULL
     WHERE (t.state = 'claimed' AND t.lease_end <= excluded.created_at)
        OR (t.state = 'completed' AND t.expires_at <= excluded.created_at)
    RETURNING t.generation, t.lease_end, t.takeover
)
SELECT true, generation, lease_end, takeover, '', '', NULL::timestamptz, NULL::jsonb, {NOW} FROM ins
UNION ALL
SELECT false, generation, lease_end, false, state, fingerprint, expires_at, result, {NOW}
  FROM cur WHERE NOT EXISTS (SELECT FROM ins)`, "$6"),

		// Complete: the completion function of the migration, which raises
		// SQLSTATE migrations.StaleClaimSQLState for a stale generation
		// (aborting a caller's transaction) and notifies waiters.
		//
		// The result's JSON is built here, not in Go: $4 is the result
		// without its body (status, header, unreplayable: small JSON, sent
		// as text), $7 the body as bytea, $8 whether the body is text
		// (idem.IsText). The body is then sent as it is, in one parameter,
		// instead of being escaped into a second copy in Go; and no
		// parameter is a []byte meant as jsonb, which pgx would send as
		// bytea in the exec and simple-protocol modes. The JSON is the
		// shape idem.Result reads: "body" as a string, or "body_base64"
		// (PostgreSQL's base64 breaks lines, which are removed).
		complete: r(`
SELECT {FN}($1, $2, $3,
       $4::jsonb || CASE WHEN coalesce(length($7::bytea), 0) = 0 THEN '{}'::jsonb
                         WHEN $8::boolean THEN jsonb_build_object('body', convert_from($7::bytea, 'UTF8'))
                         ELSE jsonb_build_object('body_base64', translate(encode($7::bytea, 'base64'), E'\n', ''))
                    END,
       $5, $6::timestamptz)`, "$6"),

		// Renew: the new lease end, or null and the current generation.
		renew: r(`
WITH upd AS (
    UPDATE {T} SET lease_end = {NOW} + $4::bigint * interval '1 microsecond'
     WHERE scope = $1 AND key = $2 AND generation = $3 AND state = 'claimed'
    RETURNING lease_end
)
SELECT (SELECT lease_end FROM upd), (SELECT generation FROM {T} WHERE scope = $1 AND key = $2)`, "$5"),

		// Release: delete (notifying if a waiter marked the row), or
		// report the current generation. The last column, the count of
		// notifications, is there to make the n CTE run.
		release: r(`
WITH del AS (
    DELETE FROM {T} WHERE scope = $1 AND key = $2 AND generation = $3 AND state = 'claimed'
    RETURNING scope, key, waited
), n AS (
    SELECT pg_notify({CH}, {PAYLOAD}) FROM del WHERE waited
)
SELECT (SELECT count(*) FROM del), (SELECT generation FROM {T} WHERE scope = $1 AND key = $2), (SELECT count(*) FROM n)`, "$3"),

		// Sweep: abandoned claims first, then expired results, {BATCH}
		// rows at most, each scan on its partial index. FOR UPDATE
		// re-checks the condition on the latest row version (a claim
		// renewed or taken over meanwhile is left alone); SKIP LOCKED lets
		// sweepers in several instances share the work without waiting or
		// deleting a row twice. Waiters of abandoned claims are notified, if
		// any marked the row.
		//
		// The cost of a batch must not grow with the table. {BATCH} is the
		// batch size written in as an integer literal by Sweep, so that the
		// planner knows how few rows the scans return (with a parameter or
		// an expression it guesses a tenth of the table). And the DELETE
		// finds the doomed rows by their ctid (stable: they are locked
		// until the statement's transaction ends), a TID scan, rather than
		// by joining on (scope, key), which the planner answered with a
		// hash of the whole table (of every partition, on a partitioned
		// table): a batch of 1000 took seconds on a million-row backlog. On
		// a partitioned table the ctids are looked up in every partition
		// and the (scope, key) check keeps the rows that were chosen, so a
		// batch costs batch × partitions row lookups, never a table scan.
		// The rows of abandoned and expired are locked as doomed reads
		// them, so expired locks only the rows that fill the batch.
		sweep: r(`
WITH abandoned AS (
    SELECT ctid, scope, key FROM {T}
     WHERE state = 'claimed' AND lease_end <= {NOW}
     ORDER BY lease_end LIMIT {BATCH}
       FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT ctid, scope, key FROM {T}
     WHERE state = 'completed' AND expires_at <= {NOW}
     ORDER BY expires_at LIMIT {BATCH}
       FOR UPDATE SKIP LOCKED
), doomed AS (
    (SELECT ctid, scope, key FROM abandoned
     UNION ALL
     SELECT ctid, scope, key FROM expired)
    LIMIT {BATCH}
), del AS (
    DELETE FROM {T} t
     WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM doomed))
       AND (t.scope, t.key) IN (SELECT scope, key FROM doomed)
    RETURNING t.scope, t.key, t.waited, t.state = 'claimed' AS abandoned
), n AS (
    SELECT pg_notify({CH}, {PAYLOAD}) FROM del WHERE abandoned AND waited
)
SELECT (SELECT count(*) FROM del WHERE abandoned), (SELECT count(*) FROM del WHERE NOT abandoned),
       (SELECT count(*) FROM n)`, "$1"),

		// Wait's look at the key before it blocks on a notification,
		// which also marks a live claim as waited on, so that its
		// completion, release or sweep notifies: the channel the
		// statements notify on (so that a LISTEN on the channel of a
		// dropped table is noticed), and the microseconds left on the claim's lease, null if the key is not
		// (or, as far as this statement can tell, no longer) held by a live
		// claim, no row if absent.
		//
		// The mark is written only if the statement's snapshot shows the
		// claim live and unmarked: the replay path and further waiters of a
		// marked claim write nothing. The UPDATE takes the row lock, so it
		// is ordered against the completer's UPDATE (or release's DELETE):
		//   - the mark commits first: the completer's UPDATE, even one whose
		//     snapshot is older, re-reads the row's latest version
		//     (READ COMMITTED), sees waited and notifies at its commit;
		//   - the completer's UPDATE comes first: the mark waits for the
		//     completer's transaction (CompleteTx: the caller's commit) and
		//     then re-checks the latest version: completed (or gone) means
		//     no row is updated and the waiter does not block; rolled back
		//     means the claim is still live and is marked.
		// An UPDATE that matched nothing although the snapshot showed a live
		// unmarked claim therefore means the row changed under us
		// (completed, released, taken over, or marked by another waiter):
		// null, Wait returns, and the caller looks again. A mark seen in the
		// snapshot is for the current claim (every new claim resets it), and
		// a completion after the snapshot updates that marked version, so
		// skipping the write is safe.
		waitCheck: r(`
WITH cur AS (
    SELECT state, lease_end, waited FROM {T} WHERE scope = $1 AND key = $2
), mark AS (
    UPDATE {T} SET waited = true
     WHERE scope = $1 AND key = $2 AND state = 'claimed' AND lease_end > {NOW} AND NOT waited
       AND EXISTS (SELECT FROM cur WHERE state = 'claimed' AND lease_end > {NOW} AND NOT waited)
    RETURNING lease_end
)
SELECT {CH}, (extract(epoch FROM
          CASE WHEN state = 'claimed' AND lease_end > {NOW} AND waited THEN lease_end
               ELSE (SELECT lease_end FROM mark) END - {NOW}) * 1000000)::bigint
  FROM cur`, "$3"),

		// A polling Wait's look at the key (no LISTEN in effect, or
		// NoListen): the same, without the mark, since nobody will hear a
		// notification for it.
		pollCheck: r(`
SELECT {CH}, CASE WHEN state = 'claimed' AND lease_end > {NOW}
                  THEN (extract(epoch FROM lease_end - {NOW}) * 1000000)::bigint END
  FROM {T} WHERE scope = $1 AND key = $2`, "$3"),

		inspect: r(`
SELECT state, generation, fingerprint, owner, created_at, lease_end, completed_at, expires_at, result
  FROM {T} WHERE scope = $1 AND key = $2`, "NULL"),

		// Forget: delete unless a live claim and not forced; tell apart
		// "absent" from "refused".
		forget: r(`
WITH del AS (
    DELETE FROM {T}
     WHERE scope = $1 AND key = $2
       AND ($3 OR state <> 'claimed' OR lease_end <= {NOW})
    RETURNING scope, key
), n AS (
    SELECT pg_notify({CH}, {PAYLOAD}) FROM del
)
SELECT (SELECT count(*) FROM n), EXISTS (SELECT FROM {T} WHERE scope = $1 AND key = $2)`, "$4"),

		channel: r(`SELECT {CH}`, ""),

		// The LISTEN connection's heartbeat, sent through the pool on
		// the statements' channel.
		heartbeat: r(`SELECT pg_notify({CH}, $1)`, ""),

		stats: r(`
SELECT count(*) FILTER (WHERE state = 'claimed' AND lease_end > {NOW}),
       count(*) FILTER (WHERE state = 'claimed' AND lease_end <= {NOW}),
       count(*) FILTER (WHERE state = 'completed' AND (expires_at IS NULL OR expires_at > {NOW})),
       count(*) FILTER (WHERE state = 'completed' AND expires_at <= {NOW}),
       min(created_at) FILTER (WHERE state = 'claimed' AND lease_end > {NOW}),
       min(lease_end) FILTER (WHERE state = 'claimed' AND lease_end <= {NOW}),
       pg_total_relation_size('{T}')
  FROM {T}`, "$1"),
	}
	notify := r(`SELECT pg_notify({CH}, {PAYLOAD}) FROM del`, "")
	st.forgetQuiet = strings.Replace(st.forget, notify, `SELECT FROM del`, 1)
	if strings.Contains(st.forgetQuiet, "pg_notify") {
		panic("pgstore: the forget statement's NOTIFY was not found")
	}
	return st
}

package pgstore

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
)

// TestRowsDecodeAsPgxScans: the look's row and the lock's, decoded by
// their ScanRow, equal what pgx scans into their targets, for a key
// without a row, with a live claim, with a result and with a result whose
// retention ran out; and in pgx's default mode the look's row is decoded,
// not handed back to pgx.
func TestRowsDecodeAsPgxScans(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	clock := time.Date(2026, 12, 2, 17, 0, 0, 123456000, time.UTC)
	pool, s := migratedStore(t, ctx, Options{Retention: time.Hour})
	s.now = func() time.Time { return clock }
	key := func(k string) idem.Key { return idem.KeyFromRequestID(idem.StringRequestID(k)) }
	claim := func(k string) idem.Claim {
		c, err := s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key(k), Fingerprint: "fp"})
		if err != nil || c.Status != idem.Acquired {
			t.Fatalf("claim %s: %v, %v", k, c.Status, err)
		}
		return c
	}
	claim("claimed")
	done := claim("completed")
	if err := s.Complete(ctx, done.Token, idem.Result{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":1}`)}); err != nil {
		t.Fatal(err)
	}
	old := claim("expired")
	if err := s.Complete(ctx, old.Token, idem.Result{Status: 200}); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * time.Hour) // the expired key's retention ran out; the live claim's lease too

	for _, k := range []string{"none", "claimed", "completed", "expired"} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := s.sql.txLimits.exec(ctx, tx, txLimitsParams{lockTimeout: 1000, idleTimeout: 60000}); err != nil {
				return err
			}
			lock := txLockParams{lockKey: lockKey("s", key(k).String())}
			var decodedLock, scannedLock txLockRow
			if err := tx.QueryRow(ctx, s.sql.txLock.sql, lock.args()...).Scan(&decodedLock); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, s.sql.txLock.sql, lock.args()...).Scan(scannedLock.appendTargets(nil)...); err != nil {
				return err
			}
			if decodedLock != scannedLock {
				t.Errorf("%s: lock row decoded %+v, scanned %+v", k, decodedLock, scannedLock)
			}
			look := txClaimParams{scope: []byte("s"), key: key(k).String(), now: s.nowArg(), statementTimeout: 5000}
			var decoded, scanned txClaimRow
			if err := tx.QueryRow(ctx, s.sql.txClaim.sql, look.args()...).Scan(&decoded); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, s.sql.txClaim.sql, look.args()...).Scan(scanned.appendTargets(nil)...); err != nil {
				return err
			}
			// Each look draws a generation of its own, if it draws one.
			if decoded.next.valid != scanned.next.valid {
				t.Errorf("%s: generation drawn %v decoded, %v scanned", k, decoded.next.valid, scanned.next.valid)
			}
			decoded.next, scanned.next = int8Column{}, int8Column{}
			if !reflect.DeepEqual(decoded, scanned) {
				t.Errorf("%s: look row decoded\n%+v\nscanned\n%+v", k, decoded, scanned)
			}
			rows, err := tx.Query(ctx, s.sql.txClaim.sql, look.args()...)
			if err != nil {
				return err
			}
			defer rows.Close()
			if !rows.Next() {
				return rows.Err()
			}
			var r txClaimRow
			if mode := rows.Conn().Config().DefaultQueryExecMode; mode == pgx.QueryExecModeCacheStatement &&
				!r.decode(rows.Conn(), rows.FieldDescriptions(), rows.RawValues()) {
				t.Errorf("%s: in pgx's default mode the look's row is handed back to pgx, not decoded", k)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
}

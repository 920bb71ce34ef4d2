package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
)

// TestNewKeyRowRefusesATakeover: sql/tx_complete.sql without .Takeover, a
// new key's plain INSERT, sent with the generation of a row to take over
// (which Commit never does: it sends .Takeover then) raises the stale-claim
// error, so the transaction cannot commit without the key's row; sent as
// Commit sends it, it inserts the row.
func TestNewKeyRowRefusesATakeover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pool, s := migratedStore(t, ctx, Options{})
	tok := idem.Token{Key: idem.KeyFromRequestID(idem.StringRequestID("k")), Generation: 42}
	params := func(takenOver int64) txCompleteParams {
		return txCompleteParams{completeParams: s.completeParams(tok, []byte("s"), `{"status":201}`),
			fingerprint: "fp", owner: "test", createdAt: time.Now(), takenOver: takenOver}
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := s.sql.txComplete.exec(ctx, tx, params(7))
		return err
	})
	if _, ok := staleFrom(err, tok); !ok {
		t.Fatalf("a new key's row sent with a generation to take over: %v, want the stale-claim error", err)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_keys`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("rows after the refused insert: %d, %v; want none", rows, err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := s.sql.txComplete.exec(ctx, tx, params(0))
		return err
	}); err != nil {
		t.Fatalf("a new key's row: %v", err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_keys`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("rows after the insert: %d, %v; want one", rows, err)
	}
}

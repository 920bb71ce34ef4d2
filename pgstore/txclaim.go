package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
)

// ErrTxOwned is returned by Commit and Rollback of the transaction a claim
// was taken in ([TxFrom]) when the work calls them: the transaction belongs
// to the claim, and is committed with the recorded result (or rolled back)
// by whoever took it, the adapter or [Store.BeginClaim]'s caller. Nothing
// happens. A savepoint (Begin on the transaction) is the work's to commit
// or roll back.
var ErrTxOwned = errors.New("pgstore: the claim's transaction is committed or rolled back by its owner, not the work")

// claimTx is the transaction of a claim BeginClaim took: the
// [idem.TxClaim] its owner ends, and the [pgx.Tx] its work writes in
// (view).
type claimTx struct {
	s    *Store
	conn *pgxpool.Conn
	tx   pgx.Tx // pgx's transaction on conn
	tok  idem.Token
	view *txView
	// state is txOpen until Commit or Rollback ended the transaction and
	// gave the connection back to the pool: the work's view refuses to
	// touch it from then on.
	state atomic.Int32
	// mu is held by each call of the work's view, from its check that the
	// transaction is open until it returns (its statement sent, and for
	// Exec answered), and by Commit and Rollback: a statement runs inside
	// the transaction, and commits or rolls back with it, or is refused;
	// it never runs after the end, on the connection the pool took back,
	// where it would commit on its own, outside the claim. The work may
	// run on a goroutine of its own (a go-sdk tool, on its session's
	// context), so the end waits for a statement in progress.
	mu sync.Mutex
}

// The states of a claimTx.
const (
	txOpen int32 = iota
	txCommitted
	txRolledBack
)

var _ idem.TxClaim = (*claimTx)(nil)

// txKey is the context key of the work's view of a claim's transaction.
type txKey struct{}

// Context implements [idem.TxClaim]: ctx with the transaction, which
// [TxFrom] finds.
func (c *claimTx) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, c.view)
}

// TxFrom returns the transaction a claim was taken in, when ctx is the
// context of work run under such a claim (an adapter's InTransaction
// option, or [idem.TxClaim].Context); nil otherwise. Write the work's rows
// through it: they commit together with the claim and its recorded result,
// or not at all. Its Commit and Rollback return [ErrTxOwned] and do
// nothing; Begin makes a savepoint, which the work may commit or roll back.
// Once the claim's transaction ended, every call returns
// [pgx.ErrTxClosed]; a call in progress when its owner ends it finishes
// inside it first (the end waits), so a statement of work still running
// (a go-sdk tool after its call was answered) never runs outside the
// claim. Like any pgx.Tx it is not safe for concurrent use; its Conn
// bypasses all of this.
func TxFrom(ctx context.Context) pgx.Tx {
	v, _ := ctx.Value(txKey{}).(*txView)
	if v == nil {
		return nil
	}
	return v
}

// Commit implements [idem.TxClaim]. For a result under 64 KiB the
// completion (sql/complete.sql with .Tx, which raises the stale-claim error
// itself if it matched nothing) and the COMMIT go in one round trip; a
// larger body is completed as CompleteTx completes it, then committed. Any
// error rolls the transaction back.
func (c *claimTx) Commit(ctx context.Context, res idem.Result) error {
	c.lock()
	defer c.mu.Unlock()
	switch c.state.Load() {
	case txCommitted:
		return nil
	case txRolledBack:
		return &idem.StaleClaimError{Token: c.tok}
	}
	err := c.commit(ctx, res)
	c.end(err == nil)
	return err
}

func (c *claimTx) commit(ctx context.Context, res idem.Result) error {
	if len(res.Body) >= largeBody {
		if err := c.s.complete(ctx, c.tx, "complete", c.tok, res); err != nil {
			return err
		}
		if err := c.tx.Commit(ctx); err != nil {
			return unavailable("complete", err)
		}
		return nil
	}
	js, err := res.MarshalJSON()
	if err != nil {
		return fmt.Errorf("pgstore: encoding result: %w", err)
	}
	batch := &pgx.Batch{}
	c.s.sql.txComplete.queue(batch, c.s.completeParams(c.tok, string(js)))
	batch.Queue("commit")
	br := c.conn.SendBatch(ctx, batch)
	tag, err := br.Exec()
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("the completion answered %d rows", tag.RowsAffected())
	}
	if err == nil {
		if tag, err = br.Exec(); err == nil && tag.String() != "COMMIT" {
			// The transaction had failed before (a statement of the work
			// raised an error): COMMIT rolled it back.
			err = pgx.ErrTxCommitRollback
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if se, ok := staleFrom(err, c.tok); ok {
		return se
	}
	if err != nil {
		return unavailable("complete", err)
	}
	return nil
}

// Rollback implements [idem.TxClaim].
func (c *claimTx) Rollback(ctx context.Context) error {
	c.lock()
	defer c.mu.Unlock()
	if c.state.Load() != txOpen {
		return nil
	}
	err := c.rollback(ctx)
	c.end(false)
	return err
}

func (c *claimTx) rollback(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), staleTimeout)
	defer cancel()
	if err := c.tx.Rollback(rctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return unavailable("release", err)
	}
	return nil
}

// lock takes the transaction from the work for its end, waiting for a
// statement of the work in progress.
func (c *claimTx) lock() {
	if c.mu.TryLock() {
		return
	}
	if c.s.txEndWaits != nil {
		c.s.txEndWaits()
	}
	c.mu.Lock()
}

// end gives the connection back to the pool, rolling back first whatever
// is still open (after a failed completion), so that the pool takes it
// back. The work's view refuses to touch it from then on.
func (c *claimTx) end(committed bool) {
	if committed {
		c.state.Store(txCommitted)
	} else {
		c.state.Store(txRolledBack)
	}
	if c.conn.Conn().PgConn().TxStatus() != 'I' {
		_ = c.rollback(context.Background())
	}
	c.conn.Release()
}

// txView is the work's view of a claim's transaction (top), or of a
// savepoint in it: a pgx.Tx that refuses to be used once the claim's
// transaction ended, and whose top level the work cannot end. Each call
// holds the claim's mu while it runs (see claimTx.mu). Conn and
// LargeObjects are pgx's, unguarded.
type txView struct {
	pgx.Tx
	claim *claimTx
	top   bool
}

// enter takes the transaction for one call of the work: false, with
// nothing held, if it ended. leave gives it back.
func (v *txView) enter() bool {
	v.claim.mu.Lock()
	if v.claim.state.Load() != txOpen {
		v.claim.mu.Unlock()
		return false
	}
	return true
}

func (v *txView) leave() { v.claim.mu.Unlock() }

func (v *txView) Begin(ctx context.Context) (pgx.Tx, error) {
	if !v.enter() {
		return nil, pgx.ErrTxClosed
	}
	defer v.leave()
	sp, err := v.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &txView{Tx: sp, claim: v.claim}, nil
}

func (v *txView) Commit(ctx context.Context) error {
	switch {
	case v.top:
		return ErrTxOwned
	case !v.enter():
		return pgx.ErrTxClosed
	}
	defer v.leave()
	return v.Tx.Commit(ctx)
}

func (v *txView) Rollback(ctx context.Context) error {
	switch {
	case v.top:
		return ErrTxOwned
	case !v.enter():
		return pgx.ErrTxClosed
	}
	defer v.leave()
	return v.Tx.Rollback(ctx)
}

func (v *txView) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !v.enter() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	defer v.leave()
	return v.Tx.Exec(ctx, sql, args...)
}

func (v *txView) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !v.enter() {
		return nil, pgx.ErrTxClosed
	}
	defer v.leave()
	return v.Tx.Query(ctx, sql, args...)
}

func (v *txView) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !v.enter() {
		return errRow{pgx.ErrTxClosed}
	}
	defer v.leave()
	return v.Tx.QueryRow(ctx, sql, args...)
}

func (v *txView) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if !v.enter() {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	defer v.leave()
	return v.Tx.SendBatch(ctx, b)
}

func (v *txView) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if !v.enter() {
		return 0, pgx.ErrTxClosed
	}
	defer v.leave()
	return v.Tx.CopyFrom(ctx, table, columns, src)
}

func (v *txView) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if !v.enter() {
		return nil, pgx.ErrTxClosed
	}
	defer v.leave()
	return v.Tx.Prepare(ctx, name, sql)
}

// errRow is a pgx.Row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

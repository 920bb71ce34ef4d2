package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/ctxvalue"
	"github.com/idemkit/idem/internal/jsonb"
)

// ErrTxOwned is returned by Commit and Rollback of the transaction a claim
// was taken in ([TxFrom], [SQLTxFrom]) when the work calls them: the transaction belongs
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
	row  txRow
	view *txView // &topView
	// topView is the work's view of the whole transaction, kept in the
	// claim so that a claim is one allocation, not two.
	topView txView
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

	// The bounds PostgreSQL holds the transaction to (sql/tx_limits.sql,
	// sql/tx_claim.sql), for the error that says which one it met:
	// idle_in_transaction_session_timeout, and the work's
	// statement_timeout (zero: none) and whether it is the session's.
	idle                    time.Duration
	statementTimeout        time.Duration
	sessionStatementTimeout bool
	// limit is the first bound a statement of the work met (see note).
	limit atomic.Pointer[idem.TxLimitError]
	// sql is the work's database/sql view of the transaction (SQLTxFrom).
	sql claimSQL
	// begin is the claim that began the transaction (BeginClaim), held
	// here so that one allocation holds both; its batch is the commit's
	// too, sent with completion, the completion's parameters.
	begin      txBegin
	completion txCompleteParams
	// ctx is the first context Context made; ctxTaken says it is.
	ctx      ctxvalue.Ctx[txKey, *txView]
	ctxTaken atomic.Bool
}

// SQLSTATEs of PostgreSQL ending a transaction, or cancelling one of its
// statements, at one of its bounds.
const (
	idleInTransactionTimeout = "25P03" // idle_in_transaction_session_timeout: the session ends
	queryCanceled            = "57014" // statement_timeout (or a cancel request)
)

// uniqueViolation is the SQLSTATE of a new key's row meeting one already
// there (sql/tx_complete.sql without .Takeover).
const uniqueViolation = "23505"

// limitOf returns the bound err, an error of a statement of the
// transaction sent with ctx, says PostgreSQL met: the idle timeout, or the
// statement timeout (a cancelled statement while ctx is live and a
// statement_timeout is in force; an operator's pg_cancel_backend reads the
// same); nil for any other error.
func (c *claimTx) limitOf(ctx context.Context, err error) *idem.TxLimitError {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok {
		return nil
	}
	switch {
	case pgErr.Code == idleInTransactionTimeout:
		return &idem.TxLimitError{Limit: idem.TxIdle, Setting: "idle_in_transaction_session_timeout", Bound: c.idle, Err: pgErr}
	case pgErr.Code == queryCanceled && c.statementTimeout > 0 && ctx.Err() == nil:
		return &idem.TxLimitError{Limit: idem.TxStatement, Setting: "statement_timeout", Bound: c.statementTimeout,
			Session: c.sessionStatementTimeout, Err: pgErr}
	}
	return nil
}

// note remembers the first bound a statement of the work met, from the
// error err of a statement sent with ctx: the work sees the error, and
// answers what it answers; the claim's owner learns from Commit or
// Rollback why the transaction failed.
func (c *claimTx) note(ctx context.Context, err error) {
	if le := c.limitOf(ctx, err); le != nil {
		c.limit.CompareAndSwap(nil, le)
	}
}

// cause is the bound that failed the transaction, as noted from the work's
// statements: the idle timeout (which ended the session), or a cancelled
// statement the transaction did not get over (it is still failed, not
// back at a savepoint the work rolled back to); nil if none did.
func (c *claimTx) cause() *idem.TxLimitError {
	le := c.limit.Load()
	if le != nil && le.Limit == idem.TxStatement && c.conn.Conn().PgConn().TxStatus() != 'E' {
		return nil
	}
	return le
}

// txRow is what the completion writes the key's row with, besides the
// result (sql/tx_complete.sql).
type txRow struct {
	fingerprint, owner string
	// takeover: the row taken over is a two-phase claim whose lease ran
	// out.
	takeover  bool
	createdAt time.Time   // the claim's clock
	takenOver int64       // the generation of the row taken over; zero if none
	labels    idem.Labels // the request's, clipped
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
// [TxFrom] finds. The first context made (the work's, which the engine
// makes for every claim) lives in the claim: one allocation fewer.
func (c *claimTx) Context(ctx context.Context) context.Context {
	if c.ctxTaken.CompareAndSwap(false, true) {
		c.ctx = ctxvalue.Ctx[txKey, *txView]{Context: ctx, Val: c.view}
		return &c.ctx
	}
	return &ctxvalue.Ctx[txKey, *txView]{Context: ctx, Val: c.view}
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

// Commit implements [idem.TxClaim]: the key's row is inserted in its final
// state, with res (sql/tx_complete.sql, which raises the stale-claim error
// itself if the row it takes over changed since the claim), and the
// transaction commits. For a result under 64 KiB the two go in one round
// trip; a larger body is sent as CompleteTx sends it, then committed. Any
// error rolls the transaction back; it is an [*idem.TxLimitError] when
// PostgreSQL had ended the transaction, or cancelled a statement of the
// work, at one of its bounds, or ends it now (the work paused longer than
// the idle bound before it returned).
func (c *claimTx) Commit(ctx context.Context, res idem.Result) error {
	c.closeSQL()
	c.lock()
	defer c.mu.Unlock()
	switch c.state.Load() {
	case txCommitted:
		return nil
	case txRolledBack:
		return &idem.StaleClaimError{Token: c.tok}
	}
	cause := c.cause()
	err := c.commit(ctx, res)
	if err != nil && !errors.Is(err, idem.ErrStaleClaim) {
		if le := c.limitOf(ctx, err); le != nil {
			cause = le
		}
		if cause != nil {
			err = cause
		}
	}
	c.end(err == nil)
	return err
}

func (c *claimTx) commit(ctx context.Context, res idem.Result) error {
	p := txCompleteParams{completeParams: c.s.completeParams(c.tok, c.begin.look.scope, ""), fingerprint: c.row.fingerprint,
		owner: c.row.owner, takeover: c.row.takeover, createdAt: c.row.createdAt, takenOver: c.row.takenOver,
		method: c.row.labels.Method, route: c.row.labels.Route, caller: c.row.labels.Caller}
	if len(res.Body) >= largeBody {
		// The body as its own parameter, as Complete sends it.
		body := res.Body
		res.Body = nil
		meta, err := res.MarshalJSON()
		if err != nil {
			return fmt.Errorf("pgstore: encoding result: %w", err)
		}
		p.result = string(meta)
		q := c.s.sql.txCompleteLarge
		if p.takenOver != 0 {
			q = c.s.sql.txTakeoverLarge
		}
		_, err = execLarge(ctx, c.tx, q, txCompleteLargeParams{p, body, jsonb.IsText(body)})
		err = c.rowRefused(err)
		if err == nil {
			err = c.tx.Commit(ctx)
		}
		return c.completed(err)
	}
	js, err := res.MarshalJSON()
	if err != nil {
		return fmt.Errorf("pgstore: encoding result: %w", err)
	}
	p.result = string(js)
	c.completion = p
	batch := &c.begin.batch
	batch.reset()
	q := c.s.sql.txComplete
	if p.takenOver != 0 {
		q = c.s.sql.txTakeover
	}
	queueHeld(batch, q, &c.completion)
	batch.add("commit", nil)
	br := c.conn.SendBatch(ctx, &batch.Batch)
	_, err = br.Exec()
	err = c.rowRefused(err)
	if err == nil {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err == nil && tag.String() != "COMMIT" {
			// The transaction had failed before (a statement of the work
			// raised an error): COMMIT rolled it back.
			err = pgx.ErrTxCommitRollback
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return c.completed(err)
}

// rowRefused maps err, the error of the statement that writes the key's
// row (not of the COMMIT after it, where a deferred unique constraint of
// the work's tables fails with the same code): a new key's row that met
// one written without the key's lock (see sql/tx_complete.sql), refused by
// the primary key (the table's, or a partition's), is a stale claim.
func (c *claimTx) rowRefused(err error) error {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == uniqueViolation {
		return &idem.StaleClaimError{Token: c.tok}
	}
	return err
}

// completed is the error of the completion and commit, err.
func (c *claimTx) completed(err error) error {
	if se, ok := staleFrom(err, c.tok); ok {
		return se
	}
	if errors.Is(err, idem.ErrStaleClaim) {
		return err // rowRefused's
	}
	if err != nil {
		return unavailable("complete", err)
	}
	return nil
}

// Rollback implements [idem.TxClaim]. It returns an [*idem.TxLimitError]
// when PostgreSQL had ended the transaction, or cancelled a statement of
// the work it did not get over, at one of its bounds.
func (c *claimTx) Rollback(ctx context.Context) error {
	c.closeSQL()
	c.lock()
	defer c.mu.Unlock()
	if c.state.Load() != txOpen {
		return nil
	}
	cause := c.cause()
	err := c.rollback(ctx)
	c.end(false)
	if cause != nil {
		return cause
	}
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
// transaction ended, whose top level the work cannot end, and whose
// statements' errors are noted (claimTx.note), so that the claim's owner
// learns when PostgreSQL ended the transaction at one of its bounds. Each
// call holds the claim's mu while it runs (see claimTx.mu). Conn and
// LargeObjects are pgx's, unguarded (statements sent through Conn, which
// leads outside the view, are not seen).
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
		v.claim.note(ctx, err)
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
	err := v.Tx.Commit(ctx)
	v.claim.note(ctx, err)
	return err
}

func (v *txView) Rollback(ctx context.Context) error {
	switch {
	case v.top:
		return ErrTxOwned
	case !v.enter():
		return pgx.ErrTxClosed
	}
	defer v.leave()
	err := v.Tx.Rollback(ctx)
	v.claim.note(ctx, err)
	return err
}

func (v *txView) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !v.enter() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	defer v.leave()
	tag, err := v.Tx.Exec(ctx, sql, args...)
	v.claim.note(ctx, err)
	return tag, err
}

func (v *txView) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !v.enter() {
		return nil, pgx.ErrTxClosed
	}
	defer v.leave()
	rows, err := v.Tx.Query(ctx, sql, args...)
	if err != nil {
		v.claim.note(ctx, err)
		return rows, err
	}
	return &watchedRows{Rows: rows, ctx: ctx, claim: v.claim}, nil
}

func (v *txView) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !v.enter() {
		return errRow{pgx.ErrTxClosed}
	}
	defer v.leave()
	return watchedRow{Row: v.Tx.QueryRow(ctx, sql, args...), ctx: ctx, claim: v.claim}
}

func (v *txView) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if !v.enter() {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	defer v.leave()
	return &watchedBatch{BatchResults: v.Tx.SendBatch(ctx, b), ctx: ctx, claim: v.claim}
}

func (v *txView) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if !v.enter() {
		return 0, pgx.ErrTxClosed
	}
	defer v.leave()
	n, err := v.Tx.CopyFrom(ctx, table, columns, src)
	v.claim.note(ctx, err)
	return n, err
}

func (v *txView) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if !v.enter() {
		return nil, pgx.ErrTxClosed
	}
	defer v.leave()
	d, err := v.Tx.Prepare(ctx, name, sql)
	v.claim.note(ctx, err)
	return d, err
}

// watchedRows, watchedRow and watchedBatch are the answers of the work's
// statements, whose errors are noted as the work reads them.
type watchedRows struct {
	pgx.Rows
	ctx   context.Context
	claim *claimTx
}

func (r *watchedRows) Err() error {
	err := r.Rows.Err()
	r.claim.note(r.ctx, err)
	return err
}

func (r *watchedRows) Close() {
	r.Rows.Close()
	r.claim.note(r.ctx, r.Rows.Err())
}

type watchedRow struct {
	pgx.Row
	ctx   context.Context
	claim *claimTx
}

func (r watchedRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	r.claim.note(r.ctx, err)
	return err
}

type watchedBatch struct {
	pgx.BatchResults
	ctx   context.Context
	claim *claimTx
}

func (b *watchedBatch) Exec() (pgconn.CommandTag, error) {
	tag, err := b.BatchResults.Exec()
	b.claim.note(b.ctx, err)
	return tag, err
}

func (b *watchedBatch) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	if err != nil {
		b.claim.note(b.ctx, err)
		return rows, err
	}
	return &watchedRows{Rows: rows, ctx: b.ctx, claim: b.claim}, nil
}

func (b *watchedBatch) QueryRow() pgx.Row {
	return watchedRow{Row: b.BatchResults.QueryRow(), ctx: b.ctx, claim: b.claim}
}

func (b *watchedBatch) Close() error {
	err := b.BatchResults.Close()
	b.claim.note(b.ctx, err)
	return err
}

// errRow is a pgx.Row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

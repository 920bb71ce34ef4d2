package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
)

var _ idem.TxStore = (*Store)(nil)

// ErrTxOwned is returned by Commit and Rollback of the transaction a claim
// was taken in ([TxFrom]) when the work calls them: the transaction belongs
// to the claim, and is committed with the recorded result (or rolled back)
// by whoever took it, the adapter or [Store.BeginClaim]'s caller. Nothing
// happens. A savepoint (Begin on the transaction) is the work's to commit
// or roll back.
var ErrTxOwned = errors.New("pgstore: the claim's transaction is committed or rolled back by its owner, not the work")

// lockNotAvailable is SQLSTATE 55P03: a lock wait ran past lock_timeout.
const lockNotAvailable = "55P03"

// BeginClaim implements [idem.TxStore]: it begins a transaction on a
// connection of the pool and claims req in it. The BEGIN, the transaction's
// bounds (sql/tx_limits.sql), the claim (sql/claim.sql) and the statement
// that puts the session's lock_timeout back (sql/tx_restore.sql) go in one
// round trip; a new key costs nothing more until the completion, which
// goes in one round trip with its COMMIT ([idem.TxClaim].Commit).
//
// The transaction begins with Options.TxOptions. limits.Idle and
// limits.Execution become its idle_in_transaction_session_timeout and
// statement_timeout (sql/tx_limits.sql). A key inserted by another
// transaction still open is waited for in PostgreSQL, on the primary key:
// the INSERT waits for that transaction to end, up to limits.Wait
// (lock_timeout). If it committed, the claim looks again on a newer
// snapshot, in the same transaction (READ COMMITTED) or in a new one (the
// stricter levels, where the INSERT fails with a serialization error
// instead), and finds its result; if it rolled back, the INSERT goes
// ahead. Every answer but Acquired rolls the transaction back before it
// returns. The transaction's work finds it with [TxFrom].
func (s *Store) BeginClaim(ctx context.Context, req idem.ClaimRequest, limits idem.TxLimits) (idem.Claim, idem.TxClaim, error) {
	if err := validate(req.Scope, req.Key); err != nil {
		return idem.Claim{}, nil, err
	}
	if err := s.checkEncoding(ctx); err != nil {
		return idem.Claim{}, nil, err
	}
	rc, c, ok, err := s.startClaim(req)
	if ok {
		return c, nil, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return idem.Claim{}, nil, unavailable("claim", err)
	}
	b := &txBegin{s: s, conn: conn, req: req, lease: s.leaseOf(req.Lease).Microseconds()}
	statement := "0"
	if limits.Execution > 0 {
		statement = millis(limits.Execution)
	}
	b.limits = []any{millis(limits.Wait), millis(cmp0(limits.Idle, s.leaseOf(req.Lease))), statement}
	c, tx, err := b.claim(ctx, rc)
	if tx == nil {
		conn.Release()
	}
	return c, tx, err
}

// millis renders d as a whole number of milliseconds, at least one, for a
// timeout setting (where zero would mean none).
func millis(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10)
}

func cmp0(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// txBegin is one BeginClaim in progress.
type txBegin struct {
	s      *Store
	conn   *pgxpool.Conn
	req    idem.ClaimRequest
	lease  int64 // microseconds
	limits []any // sql/tx_limits.sql's parameters
	tx     pgx.Tx
	// waited: the last claim statement returned no row, having waited for
	// a transaction that inserted the key and committed after the
	// statement's snapshot. The next look will most likely find what that
	// transaction recorded, so it goes with a ROLLBACK.
	waited bool
}

// claim runs the claim loop of BeginClaim; a nil tx means the transaction
// is over (rolled back, or never begun).
func (b *txBegin) claim(ctx context.Context, rc claimCache) (idem.Claim, idem.TxClaim, error) {
	serializationFailures := 0
	for range maxClaimAttempts {
		rc.ticket()
		var row claimRow
		err := b.send(ctx, b.s.sql.claim, func(r pgx.Row) (err error) {
			row, err = scanClaim(r)
			return err
		})
		if err == nil && row.superseded() {
			// The claim's lease or the result's retention ran out: take
			// the row over, in this transaction.
			var (
				c  idem.Claim
				ok bool
			)
			if c, ok, err = b.takeOver(ctx, row.generation); ok {
				return c, b.claimed(c.Token), nil
			}
			if err == nil {
				continue // the row changed since: look again
			}
		}
		if b.tx == nil && err == nil && !row.superseded() {
			// The look that went with a ROLLBACK found the key absent
			// (the other transaction rolled back) and inserted it; the
			// ROLLBACK took it back. Begin again.
			if row.inserted {
				continue
			}
			c, err := b.s.answer(rc, b.req, row)
			return c, nil, err
		}
		b.waited = errors.Is(err, pgx.ErrNoRows)
		switch {
		case b.waited:
			// The row was inserted by a transaction that committed
			// after the statement's snapshot (the statement waited for
			// it): look again on a newer one, in this transaction, or
			// in a new one if this one ended.
			continue
		case isLockTimeout(err):
			// Another transaction still holds the key after the wait.
			b.rollback(ctx)
			return idem.Claim{Status: idem.InFlight}, nil, nil
		case retryable(err) && serializationFailures < maxSerializationAttempts:
			// The same race at REPEATABLE READ or SERIALIZABLE: the
			// transaction cannot see the row. Begin a new one.
			b.rollback(ctx)
			serializationFailures++
			if pauseBeforeRetry(ctx, serializationFailures) {
				continue
			}
			return idem.Claim{}, nil, unavailable("claim", err)
		case err != nil:
			b.rollback(ctx)
			return idem.Claim{}, nil, unavailable("claim", err)
		case row.inserted:
			c := row.acquired(b.req)
			return c, b.claimed(c.Token), nil
		}
		b.rollback(ctx)
		c, err := b.s.answer(rc, b.req, row)
		return c, nil, err
	}
	b.rollback(ctx)
	return idem.Claim{}, nil, unavailable("claim", fmt.Errorf("undecided after %d attempts under contention", maxClaimAttempts))
}

// send sends one claim statement (sql/claim.sql or sql/takeover.sql, with
// args after the claim's) between the transaction's bounds and the
// restore, in one round trip, preceded by the BEGIN if no transaction is
// open. scan reads the statement's row; pgx.ErrNoRows from it is returned
// as it is.
func (b *txBegin) send(ctx context.Context, sql string, scan func(pgx.Row) error, args ...any) error {
	batch := &pgx.Batch{}
	begin := b.tx == nil
	if begin {
		batch.BeginTx(b.s.txOptions)
	}
	batch.Queue(b.s.sql.txLimits, b.limits...)
	batch.Queue(sql, append(b.s.claimArgs(b.req, b.lease), args...)...)
	batch.Queue(b.s.sql.txRestore)
	// A look after a wait will most likely find the other transaction's
	// result, and this transaction then ends: the ROLLBACK goes with it,
	// saving the round trip after the wake. (If the look finds the key
	// absent and takes it, the ROLLBACK takes it back, and BeginClaim
	// begins again.)
	rollback := !begin && b.waited
	if rollback {
		batch.Queue("rollback")
	}
	br := b.conn.SendBatch(ctx, batch)
	if begin {
		b.tx = br.Tx()
	}
	var err error
	if begin {
		_, err = br.Exec()
	}
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = scan(br.QueryRow())
	}
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		if _, rerr := br.Exec(); rerr != nil {
			err = rerr
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if rollback && b.conn.Conn().PgConn().TxStatus() == 'I' {
		b.tx = nil
	}
	return err
}

// takeOver takes over the row of generation gen, which the claim
// statement found with its lease or retention run out; ok is false, with
// no error, if the row changed since.
func (b *txBegin) takeOver(ctx context.Context, gen int64) (c idem.Claim, ok bool, err error) {
	err = b.send(ctx, b.s.sql.takeover, func(row pgx.Row) (err error) {
		c, ok, err = scanTakeover(b.req, row)
		return err
	}, gen)
	return c, ok, err
}

// rollback ends the transaction, if one is open. It runs even if ctx is
// done (bounded by staleTimeout); if it fails, pgx closes the connection,
// and the pool does not take it back.
func (b *txBegin) rollback(ctx context.Context) {
	if b.tx == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), staleTimeout)
	defer cancel()
	_ = b.tx.Rollback(rctx)
	b.tx = nil
}

// claimed hands the open transaction over to a claim.
func (b *txBegin) claimed(tok idem.Token) *claimTx {
	c := &claimTx{s: b.s, conn: b.conn, tx: b.tx, tok: tok}
	c.view = &txView{Tx: b.tx, claim: c, top: true}
	return c
}

func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable
}

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
// Like any pgx.Tx it is not safe for concurrent use, and it must not be
// used after the work returned.
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
	scope, key := []byte(c.tok.Scope), c.tok.Key.String()
	batch := &pgx.Batch{}
	batch.Queue(c.s.sql.txComplete, scope, key, c.tok.Generation, string(js), c.s.retentionMicros(), c.s.nowArg())
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
// transaction ended, and whose top level the work cannot end.
type txView struct {
	pgx.Tx
	claim *claimTx
	top   bool
}

func (v *txView) closed() bool { return v.claim.state.Load() != txOpen }

func (v *txView) Begin(ctx context.Context) (pgx.Tx, error) {
	if v.closed() {
		return nil, pgx.ErrTxClosed
	}
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
	case v.closed():
		return pgx.ErrTxClosed
	}
	return v.Tx.Commit(ctx)
}

func (v *txView) Rollback(ctx context.Context) error {
	switch {
	case v.top:
		return ErrTxOwned
	case v.closed():
		return pgx.ErrTxClosed
	}
	return v.Tx.Rollback(ctx)
}

func (v *txView) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if v.closed() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return v.Tx.Exec(ctx, sql, args...)
}

func (v *txView) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if v.closed() {
		return nil, pgx.ErrTxClosed
	}
	return v.Tx.Query(ctx, sql, args...)
}

func (v *txView) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if v.closed() {
		return errRow{pgx.ErrTxClosed}
	}
	return v.Tx.QueryRow(ctx, sql, args...)
}

func (v *txView) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if v.closed() {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	return v.Tx.SendBatch(ctx, b)
}

func (v *txView) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if v.closed() {
		return 0, pgx.ErrTxClosed
	}
	return v.Tx.CopyFrom(ctx, table, columns, src)
}

func (v *txView) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if v.closed() {
		return nil, pgx.ErrTxClosed
	}
	return v.Tx.Prepare(ctx, name, sql)
}

// errRow is a pgx.Row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

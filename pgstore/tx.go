package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
)

var _ idem.TxStore = (*Store)(nil)

// lockNotAvailable is SQLSTATE 55P03: a lock wait ran past lock_timeout.
const lockNotAvailable = "55P03"

// BeginClaim implements [idem.TxStore]: it begins a transaction on a
// connection of the pool and claims req in it. The BEGIN, the claim
// statement's bounds (sql/tx_limits.sql), the claim (sql/claim.sql) and the
// statement that sets the bounds of the work's statements
// (sql/tx_restore.sql) go in one round trip; a new key costs nothing more
// until the completion, which goes in one round trip with its COMMIT
// ([idem.TxClaim].Commit).
//
// The transaction begins with Options.TxOptions. limits.Idle becomes its
// idle_in_transaction_session_timeout, and limits.Execution the
// statement_timeout of the work's statements, unless the session has one
// (sql/tx_limits.sql, sql/tx_restore.sql). A key inserted by another
// transaction still open is waited for in PostgreSQL, on the primary key:
// the INSERT waits for that transaction to end, up to limits.Wait
// (lock_timeout, the only bound of the claim statement: its
// statement_timeout is off). If it committed, the claim looks again on a newer
// snapshot, in the same transaction (READ COMMITTED) or in a new one (the
// stricter levels, where the INSERT fails with a serialization error
// instead), and finds its result; if it rolled back, the INSERT goes
// ahead. Every answer but Acquired rolls the transaction back before it
// returns. The transaction's work finds it with [TxFrom].
func (s *Store) BeginClaim(ctx context.Context, req idem.ClaimRequest, limits idem.TxLimits) (idem.Claim, idem.TxClaim, error) {
	if err := req.Validate(); err != nil {
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
	b := &txBegin{s: s, conn: conn, req: req, lease: s.leaseOf(req.Lease).Microseconds(), wait: limits.Wait}
	b.idle = max(cmp0(limits.Idle, s.leaseOf(req.Lease)).Truncate(time.Millisecond), time.Millisecond)
	b.limits = txLimitsParams{lockTimeout: millis(limits.Wait), idleTimeout: millis(b.idle)}
	b.restore = txRestoreParams{statementTimeout: "0"}
	if limits.Execution > 0 {
		b.restore.statementTimeout = millis(limits.Execution)
	}
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
	s       *Store
	conn    *pgxpool.Conn
	req     idem.ClaimRequest
	lease   int64           // microseconds
	wait    time.Duration   // TxLimits.Wait
	limits  txLimitsParams  // sql/tx_limits.sql's parameters
	restore txRestoreParams // sql/tx_restore.sql's
	idle    time.Duration   // the transaction's idle_in_transaction_session_timeout
	// bounds is what sql/tx_restore.sql answered: the statement_timeout
	// of the work's statements.
	bounds txRestoreRow
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
		row, err := sendInTx(ctx, b, b.s.sql.claim, b.s.claimParams(b.req, b.lease, b.wait))
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
			if pauseBeforeSerializationRetry(ctx, serializationFailures) {
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

// sendInTx sends one claim statement q (sql/claim.sql or
// sql/takeover.sql) with p between the transaction's bounds and the
// restore, in one round trip, preceded by the BEGIN if no transaction is
// open, and reads its row; pgx.ErrNoRows is returned as it is.
func sendInTx[P params, R any, PR row[R]](ctx context.Context, b *txBegin, q rowQuery[P, R, PR], p P) (R, error) {
	batch := &pgx.Batch{}
	begin := b.tx == nil
	if begin {
		batch.BeginTx(b.s.txOptions)
	}
	b.s.sql.txLimits.queue(batch, b.limits)
	q.queue(batch, p)
	b.s.sql.txRestore.queue(batch, b.restore)
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
	var (
		r   R
		err error
	)
	if begin {
		_, err = br.Exec()
	}
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		r, err = q.scan(br.QueryRow())
	}
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		var rerr error
		if b.bounds, rerr = b.s.sql.txRestore.scan(br.QueryRow()); rerr != nil {
			err = rerr
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if rollback && b.conn.Conn().PgConn().TxStatus() == 'I' {
		b.tx = nil
	}
	return r, err
}

// takeOver takes over the row of generation gen, which the claim
// statement found with its lease or retention run out; ok is false, with
// no error, if the row changed since.
func (b *txBegin) takeOver(ctx context.Context, gen int64) (c idem.Claim, ok bool, err error) {
	r, err := sendInTx(ctx, b, b.s.sql.takeover, takeoverParams{b.s.claimParams(b.req, b.lease, b.wait), gen})
	return takenOver(b.req, r, err)
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
	c := &claimTx{s: b.s, conn: b.conn, tx: b.tx, tok: tok, idle: b.idle,
		statementTimeout: time.Duration(b.bounds.statementTimeoutMillis) * time.Millisecond, sessionStatementTimeout: b.bounds.sessions}
	c.view = &txView{Tx: b.tx, claim: c, top: true}
	return c
}

func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable
}

package pgstore

import (
	"context"
	"errors"
	"fmt"
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
// connection of the pool and claims req in it. The claim is the key's
// advisory lock, taken for the transaction, and a look at the key's row;
// nothing is written until the completion, which inserts the key's row in
// its final state, with its result, together with the COMMIT
// ([idem.TxClaim].Commit), and a rollback or a crash leaves nothing. The
// BEGIN, the claim statement's bounds (sql/tx_limits.sql), the lock
// (sql/tx_lock.sql) and the look (sql/tx_claim.sql, which also sets the
// bounds of the work's statements) go in one round trip; a new key
// costs nothing more until the completion, which goes in one round trip
// with its COMMIT.
//
// The transaction begins with Options.TxOptions. limits.Idle becomes its
// idle_in_transaction_session_timeout, and limits.Execution the
// statement_timeout of the work's statements, unless the session has one
// (sql/tx_limits.sql, sql/tx_claim.sql). A key held by another
// transaction still open is waited for in PostgreSQL, on its lock, up to
// limits.Wait (lock_timeout, the only bound of the claim statement: its
// statement_timeout is off); a key held by a two-phase claim that is
// inserting it, for that statement's end. Then the look, on a snapshot
// taken after the wait (at READ COMMITTED; at the stricter levels the
// transaction's snapshot is older than the wait, and a claim that waited
// and finds the key free begins again in a new transaction), finds the
// result the holder committed, or no row if it rolled back, and the key is
// taken. Every
// answer but Acquired rolls the transaction back before it returns. The
// transaction's work finds it with [TxFrom].
func (s *Store) BeginClaim(ctx context.Context, req idem.ClaimRequest, limits idem.TxLimits) (idem.Claim, idem.TxClaim, error) {
	if err := req.Validate(); err != nil {
		return idem.Claim{}, nil, err
	}
	if err := s.checkEncoding(ctx); err != nil {
		return idem.Claim{}, nil, err
	}
	rc, cached, ok, err := s.startClaim(req)
	if ok {
		return cached, nil, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return idem.Claim{}, nil, unavailable("claim", err)
	}
	k := req.Key.String()
	// The claim's transaction is allocated before it is begun: the claim
	// in progress, its batches and its rows live in it, one allocation
	// for all of them.
	ct := &claimTx{s: s, conn: conn}
	b := &ct.begin
	*b = txBegin{s: s, conn: conn, req: req, lease: s.leaseOf(req.Lease), claimTx: ct}
	b.idle = max(cmp0(limits.Idle, s.leaseOf(req.Lease)).Truncate(time.Millisecond), time.Millisecond)
	b.limits = txLimitsParams{lockTimeout: millis(limits.Wait), idleTimeout: millis(b.idle)}
	b.lock = txLockParams{lockKey: lockKey(req.Scope, k)}
	b.look = txClaimParams{scope: []byte(req.Scope), key: k, now: s.nowArg()}
	if limits.Execution > 0 {
		b.look.statementTimeout = millis(limits.Execution)
	}
	claim, tx, err := b.claim(ctx, rc)
	if tx == nil {
		conn.Release()
	}
	return claim, tx, err
}

// millis is d as a whole number of milliseconds, at least one, for a
// timeout setting (where zero would mean none).
func millis(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

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
	lease  time.Duration
	limits txLimitsParams // sql/tx_limits.sql's parameters
	lock   txLockParams   // sql/tx_lock.sql's
	look   txClaimParams  // sql/tx_claim.sql's
	idle   time.Duration  // the transaction's idle_in_transaction_session_timeout
	tx     pgx.Tx
	// claimTx is the claim's transaction this begins, which holds it.
	claimTx *claimTx
	// batch, waited and found are the claim's batch and the rows it
	// reads, with room for their scan targets, held here so that a claim
	// allocates none of them.
	batch   heldBatch
	waited  txLockRow
	found   txClaimRow
	targets [12]any
}

// claim runs the claim loop of BeginClaim; a nil tx means the transaction
// is over (rolled back, or never begun).
func (b *txBegin) claim(ctx context.Context, rc claimCache) (idem.Claim, idem.TxClaim, error) {
	serializationFailures, freeAfterWait := 0, 0
	for range maxClaimAttempts {
		rc.ticket()
		row, waited, err := b.send(ctx)
		switch {
		case isLockTimeout(err):
			// Another transaction still holds the key after the wait.
			b.rollback(ctx)
			return heldInTx, nil, nil
		case retryable(err) && serializationFailures < maxSerializationAttempts:
			b.rollback(ctx)
			serializationFailures++
			if pauseBeforeSerializationRetry(ctx, serializationFailures) {
				continue
			}
			return idem.Claim{}, nil, unavailable("claim", err)
		case err != nil:
			b.rollback(ctx)
			return idem.Claim{}, nil, unavailable("claim", err)
		case waited && row.next.valid:
			// The claim waited, and holds the key's lock shared only,
			// but found the key free: the holder rolled back, or, at
			// the stricter levels, committed after the transaction's
			// snapshot, which cannot see it. Begin again. Claims that
			// waited together begin again together, and each one's
			// exclusive try fails while another's shared hold lasts:
			// from the second time on, a short random pause breaks the
			// step. (pgx queues a batch's BEGIN first, so the ROLLBACK
			// takes a round trip of its own: this is the rare case.) A
			// claim that waited and found a result answers it: that
			// result was there when its snapshot was taken.
			b.rollback(ctx)
			freeAfterWait++
			if freeAfterWait > 1 && !pauseBeforeClaimRetry(ctx, freeAfterWait-1) {
				return idem.Claim{}, nil, unavailable("claim", ctx.Err())
			}
			continue
		case row.next.valid:
			// The key is free, or its row may be taken over.
			c := idem.Claim{
				Status:   idem.Acquired,
				Token:    idem.Token{Scope: b.req.Scope, Key: b.req.Key, Generation: row.next.v},
				LeaseEnd: row.now.Add(b.lease),
				Takeover: row.state == "claimed",
			}
			return c, b.claimed(c.Token, row), nil
		}
		b.rollback(ctx)
		c, err := b.s.answer(rc, b.req, row.claimRow)
		return c, nil, err
	}
	b.rollback(ctx)
	return idem.Claim{}, nil, unavailable("claim", fmt.Errorf("undecided after %d attempts under contention", maxClaimAttempts))
}

// send begins the transaction and sends the claim: its bounds, the key's
// lock, and the look at the key's row, in one round trip. waited says
// whether the claim waited for the lock.
func (b *txBegin) send(ctx context.Context) (row *txClaimRow, waited bool, err error) {
	b.batch.reset()
	b.batch.BeginTx(b.s.txOptions)
	queueHeld(&b.batch, b.s.sql.txLimits, &b.limits)
	queueHeldRow(&b.batch, b.s.sql.txLock, &b.lock)
	queueHeldRow(&b.batch, b.s.sql.txClaim, &b.look)
	br := b.conn.SendBatch(ctx, &b.batch.Batch)
	b.tx = br.Tx()
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = b.s.sql.txLock.scanInto(br.QueryRow(), &b.waited, b.targets[:])
	}
	if err == nil {
		err = b.s.sql.txClaim.scanInto(br.QueryRow(), &b.found, b.targets[:])
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return &b.found, b.waited.waited, err
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

// claimed hands the open transaction over to a claim of tok, whose look found
// the key's row found (with an empty state if the key has none).
func (b *txBegin) claimed(tok idem.Token, found *txClaimRow) *claimTx {
	c := b.claimTx
	c.tx, c.tok, c.idle = b.tx, tok, b.idle
	c.row = txRow{fingerprint: b.req.Fingerprint, owner: b.req.Owner, takeover: found.state == "claimed",
		createdAt: found.now, takenOver: found.generation, labels: b.req.Labels.Clip()}
	c.statementTimeout = time.Duration(found.statementTimeoutMillis) * time.Millisecond
	c.sessionStatementTimeout = found.sessions
	c.topView = txView{Tx: b.tx, claim: c, top: true}
	c.view = &c.topView
	return c
}

func isLockTimeout(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == lockNotAvailable
}

package idem

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// TxStore is a [Store] that can also take a claim inside a transaction of the
// database it keeps its claims in, for work whose side effects are writes to
// that database: the claim, the work's writes and the recorded result then
// commit together, in one commit, or not at all (pgstore.Store is one).
//
// Compared with a claim committed on its own (the two-phase path of
// [Store.Claim], then [Store.Complete]):
//
//   - until the transaction commits, the claim is invisible to everyone
//     else; a duplicate waits in the database for the transaction to end,
//     then finds the recorded result (or, after a rollback, the key
//     absent);
//   - a rollback, for whatever reason (an error, a panic, a crash of the
//     process, a lost connection), leaves nothing behind: no claim to wait
//     out, nothing to sweep, and a retry runs at once;
//   - there is no lease to renew: the transaction's bounds ([TxLimits])
//     take its place.
//
// Keys claimed or completed through [Store.Claim] are answered as Claim
// answers them, and the two paths never hold one key at once.
type TxStore interface {
	Store

	// BeginClaim begins a transaction and claims req.Key in it, as
	// [Store.Claim] would, with these differences. Acquired comes with
	// the transaction, tx, which the caller ends with [TxClaim.Commit] or
	// [TxClaim.Rollback]; for every other outcome tx is nil and the
	// transaction is over. A key held by another open transaction is
	// waited for in the database, up to limits.Wait: if that transaction
	// commits, the claim finds what it recorded; if it rolls back, the
	// claim is taken; if it is still open when the wait runs out, the
	// claim is InFlight with a zero LeaseEnd. A key held by a claim
	// committed on its own (live lease) is InFlight with its lease end,
	// at once: the caller waits for it with [Store.Wait] and begins
	// again.
	BeginClaim(ctx context.Context, req ClaimRequest, limits TxLimits) (c Claim, tx TxClaim, err error)
}

// TxLimits bound a transaction [TxStore.BeginClaim] begins.
type TxLimits struct {
	// Wait bounds how long the claim waits for another transaction that
	// holds the key. Zero or negative means as short a wait as the store
	// can make (a millisecond for pgstore).
	Wait time.Duration
	// Idle bounds how long the transaction may stay idle, no statement
	// running: a store ends (rolls back) a transaction idle that long, so
	// that a frozen or partitioned process, whose statements stopped,
	// cannot hold a key for longer. Zero means the request's lease
	// ([ClaimRequest].Lease, or the store's default).
	Idle time.Duration
	// Execution bounds how long one statement of the transaction may run,
	// on the server. Zero or negative means no bound of the store's.
	Execution time.Duration
}

// TxClaim is a claim held inside a transaction [TxStore.BeginClaim] began.
// The transaction belongs to the claim: the work writes in it, but only
// Commit and Rollback end it. Call one of them, once; after a Commit that
// succeeded, another Commit returns nil, and after a Rollback (or a failed
// Commit) a Commit returns a [*StaleClaimError]; a Rollback after either
// does nothing.
type TxClaim interface {
	// Context returns ctx carrying the transaction, for the work: the
	// store's package has the accessor that finds it there
	// (pgstore.TxFrom).
	Context(ctx context.Context) context.Context

	// Commit records res as the claim's result in the transaction and
	// commits the transaction: the work's writes and the result become
	// visible together. An error means the transaction rolled back and
	// nothing is recorded, unless the database committed it and only the
	// answer was lost (the key is then completed, and a retry finds the
	// result): a caller that answers an error must not claim success. It
	// is a [*TxLimitError] when the database had ended the transaction,
	// or cancelled a statement of it, at one of its bounds.
	Commit(ctx context.Context, res Result) error

	// Rollback rolls the transaction back: the claim and the work's writes
	// are gone, and the key is absent again. It returns a [*TxLimitError]
	// when the database had ended the transaction, or cancelled a
	// statement of it, at one of its bounds: the transaction is over all
	// the same, and that error says why the work failed.
	Rollback(ctx context.Context) error
}

// ErrTxLimit: the database ended a claim's transaction, or cancelled a
// statement of it, at one of the bounds on it ([TxLimits], or one of the
// database's own, such as a role's statement timeout), so nothing of it
// committed. A retry runs the work again, and meets the same bound if the
// work takes as long again: the bound, or the work, must change.
// [*TxLimitError] matches it and says which bound.
var ErrTxLimit = errors.New("idem: the database ended the claim's transaction at one of its bounds")

// TxLimit is a bound on a claim's transaction that the database enforces.
type TxLimit int

const (
	// TxIdle: the transaction stayed idle, no statement running, longer
	// than [TxLimits].Idle, and the database ended it (pgstore:
	// idle_in_transaction_session_timeout, SQLSTATE 25P03, which also
	// closes the connection).
	TxIdle TxLimit = iota + 1
	// TxStatement: a statement of the transaction ran longer than its
	// bound ([TxLimits].Execution, or the database session's own if it
	// has one) and the database cancelled it (pgstore: statement_timeout,
	// SQLSTATE 57014); the transaction can no longer commit.
	TxStatement
)

func (l TxLimit) String() string {
	switch l {
	case TxIdle:
		return "idle"
	case TxStatement:
		return "statement"
	}
	return fmt.Sprintf("TxLimit(%d)", int(l))
}

// TxLimitError reports the bound at which the database ended a claim's
// transaction, or cancelled a statement of it. It matches [ErrTxLimit] and
// unwraps to the database's error.
type TxLimitError struct {
	Limit TxLimit
	// Setting names the database setting that held the bound (pgstore:
	// idle_in_transaction_session_timeout, statement_timeout).
	Setting string
	// Bound is the bound's value, as the database applied it; zero when
	// the store does not know it.
	Bound time.Duration
	// Session reports that the bound was the database session's own (a
	// statement timeout set for the role, the database or the
	// connection, which the store keeps), not the one [TxLimits] asked
	// for.
	Session bool
	// Err is the database's error.
	Err error
}

func (e *TxLimitError) Error() string {
	what := "ended the claim's transaction, idle for longer than"
	if e.Limit == TxStatement {
		what = "cancelled a statement of the claim's transaction that ran longer than"
	}
	whose := ""
	if e.Session {
		whose = " (the session's)"
	}
	return fmt.Sprintf("idem: the database %s %s = %v%s: %v", what, e.Setting, e.Bound, whose, e.Err)
}

// Is reports whether target is [ErrTxLimit].
func (e *TxLimitError) Is(target error) bool { return target == ErrTxLimit }

// Unwrap returns the database's error.
func (e *TxLimitError) Unwrap() error { return e.Err }

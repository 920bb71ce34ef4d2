package pgstore

import (
	"time"

	"github.com/idemkit/idem"
)

// The parameters and rows of the statements of sql/, file by file, in the
// order of their placeholders and columns (see scan.go). A change of a
// statement's parameters or columns is made here and in its file;
// TestStatementsMatchTheirTypes fails until both agree with each other and
// with the table.
//
// now is every statement's clock parameter: nil means the database clock
// (see Store.nowArg). scope is bytea, the exact bytes of the Go string.

// noParams are the parameters of a statement that has none.
type noParams struct{}

func (noParams) args() []any { return nil }

// keyParams are sql/inspect.sql's: the key.
type keyParams struct {
	scope []byte
	key   string
}

func (p keyParams) args() []any { return []any{p.scope, p.key} }

// clockParams are sql/stats.sql's and sql/sweep.sql's: the clock alone.
type clockParams struct{ now *time.Time }

func (p clockParams) args() []any { return []any{p.now} }

// tokenParams are sql/release.sql's and sql/stale.sql's: a claim's token.
type tokenParams struct {
	scope      []byte
	key        string
	generation int64
}

func (p tokenParams) args() []any { return []any{p.scope, p.key, p.generation} }

// claimParams are sql/claim.sql's: the claim, the key's lock, then the
// request's labels.
type claimParams struct {
	scope              []byte
	key                string
	fingerprint, owner string
	leaseMicros        int64
	now                *time.Time
	// lockKey is the key's lock (see lockKey).
	lockKey int64
	// labels are the request's labels (idem.Labels), clipped.
	method, route, caller string
}

func (p claimParams) args() []any {
	return []any{p.scope, p.key, p.fingerprint, p.owner, p.leaseMicros, p.now, p.lockKey, p.method, p.route, p.caller}
}

// claimRow is sql/claim.sql's: the claim inserted, or the row as the
// statement's snapshot saw it (state ” if none), and whether a claim in a
// transaction holds the key's lock.
type claimRow struct {
	inserted, held      bool
	generation          int64
	leaseEnd, expiresAt *time.Time
	now                 time.Time // the statement's clock
	state, fingerprint  string
	result              resultColumn // completed: the recorded result
}

func (r *claimRow) appendTargets(dst []any) []any {
	return append(dst, &r.inserted, &r.held, &r.generation, &r.leaseEnd, &r.state, &r.fingerprint, &r.expiresAt, &r.result, &r.now)
}

// claimWaitParams are sql/claim_wait.sql's: the key's lock.
type claimWaitParams struct{ lockKey int64 }

func (p claimWaitParams) args() []any { return []any{p.lockKey} }

// claimLimitsParams are sql/claim_limits.sql's: lock_timeout, in
// milliseconds.
type claimLimitsParams struct{ lockTimeout int64 }

func (p claimLimitsParams) args() []any { return []any{p.lockTimeout} }

// takeoverParams are sql/takeover.sql's: the claim's, the generation the
// claim statement saw, then the key's lock and the request's labels.
type takeoverParams struct {
	claimParams
	generation int64
}

func (p takeoverParams) args() []any {
	return []any{p.scope, p.key, p.fingerprint, p.owner, p.leaseMicros, p.now, p.generation, p.lockKey, p.method, p.route, p.caller}
}

// takeoverRow is sql/takeover.sql's: the claim taken over.
type takeoverRow struct {
	generation int64
	leaseEnd   time.Time
	takeover   bool
}

func (r *takeoverRow) appendTargets(dst []any) []any {
	return append(dst, &r.generation, &r.leaseEnd, &r.takeover)
}

// completeParams are sql/complete.sql's, rendered with .Large false.
type completeParams struct {
	scope      []byte
	key        string
	generation int64
	// result is the whole result as JSON, sent as text so that no query
	// exec mode sends it as bytea.
	result          string
	retentionMicros int64 // negative: forever
	now             *time.Time
}

func (p completeParams) args() []any {
	return []any{p.scope, p.key, p.generation, p.result, p.retentionMicros, p.now}
}

// The parameters of sql/complete.sql rendered with .Large are
// completeLargeParams, in large.go, which encodes them itself.

// renewParams are sql/renew.sql's.
type renewParams struct {
	scope       []byte
	key         string
	generation  int64
	leaseMicros int64
	now         *time.Time
}

func (p renewParams) args() []any {
	return []any{p.scope, p.key, p.generation, p.leaseMicros, p.now}
}

// renewRow is sql/renew.sql's: the new lease end, or null and the key's
// current generation (null if it has no row).
type renewRow struct {
	leaseEnd *time.Time
	current  *int64
}

func (r *renewRow) appendTargets(dst []any) []any { return append(dst, &r.leaseEnd, &r.current) }

// releaseRow is sql/release.sql's: the rows deleted, and the key's current
// generation. The third column, the notifications sent, is not read.
type releaseRow struct {
	deleted int64
	current *int64
}

func (r *releaseRow) appendTargets(dst []any) []any { return append(dst, &r.deleted, &r.current, nil) }

// lookParams are sql/wait_check.sql's and sql/poll_check.sql's: the key
// and the clock.
type lookParams struct {
	scope []byte
	key   string
	now   *time.Time
}

func (p lookParams) args() []any { return []any{p.scope, p.key, p.now} }

// lookRow is sql/wait_check.sql's and sql/poll_check.sql's: the channel
// the statements notify on, and the microseconds left on a live claim's
// lease (null if the key is not held by a live claim).
type lookRow struct {
	channel   string
	remaining *int64
}

func (r *lookRow) appendTargets(dst []any) []any { return append(dst, &r.channel, &r.remaining) }

// inspectRow is sql/inspect.sql's: the row as stored.
type inspectRow struct {
	state                            string
	generation                       int64
	fingerprint, owner               string
	createdAt                        time.Time
	leaseEnd, completedAt, expiresAt *time.Time
	result                           resultColumn
	labels                           labelColumns
}

func (r *inspectRow) appendTargets(dst []any) []any {
	return append(dst, &r.state, &r.generation, &r.fingerprint, &r.owner, &r.createdAt, &r.leaseEnd, &r.completedAt, &r.expiresAt, &r.result,
		&r.labels.method, &r.labels.route, &r.labels.caller)
}

// labelColumns are a row's request labels; null is not recorded.
type labelColumns struct{ method, route, caller *string }

func (l labelColumns) labels() idem.Labels {
	return idem.Labels{Method: orEmpty(l.method), Route: orEmpty(l.route), Caller: orEmpty(l.caller)}
}

func orEmpty(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// forgetParams are sql/forget.sql's: the key, whether a live claim is
// forgotten too, the clock, and the generation it must hold (zero: any).
type forgetParams struct {
	scope      []byte
	key        string
	force      bool
	now        *time.Time
	generation int64
}

func (p forgetParams) args() []any { return []any{p.scope, p.key, p.force, p.now, p.generation} }

// forgetRow is sql/forget.sql's: the rows deleted, and the generation the
// key held (nil: absent), which tells a refusal from an absent key.
type forgetRow struct {
	deleted int64
	current *int64
}

func (r *forgetRow) appendTargets(dst []any) []any { return append(dst, &r.deleted, &r.current) }

// statsRow is sql/stats.sql's.
type statsRow struct {
	claimed, abandoned, completed, expired int64
	oldestClaim, oldestAbandoned           *time.Time
	tableBytes                             int64
}

func (r *statsRow) appendTargets(dst []any) []any {
	return append(dst, &r.claimed, &r.abandoned, &r.completed, &r.expired, &r.oldestClaim, &r.oldestAbandoned, &r.tableBytes)
}

// keysParams are sql/keys.sql's.
type keysParams struct {
	scope   []byte  // nil: every scope
	keyLike string  // a LIKE pattern on the key
	status  *string // nil: every status
	limit   int
	now     *time.Time
	key     *string // nil: every key
	digest  *string // nil: every digest
}

func (p keysParams) args() []any {
	return []any{p.scope, p.keyLike, p.status, p.limit, p.now, p.key, p.digest}
}

// keysRow is one of sql/keys.sql's rows.
type keysRow struct {
	scope                            []byte
	key, status, state               string
	generation                       int64
	fingerprint, owner               string
	createdAt                        time.Time
	leaseEnd, completedAt, expiresAt *time.Time
	labels                           labelColumns
}

func (r *keysRow) appendTargets(dst []any) []any {
	return append(dst, &r.scope, &r.key, &r.status, &r.state, &r.generation, &r.fingerprint, &r.owner,
		&r.createdAt, &r.leaseEnd, &r.completedAt, &r.expiresAt, &r.labels.method, &r.labels.route, &r.labels.caller)
}

// sweepRow is sql/sweep.sql's: the abandoned claims and the expired results
// deleted. The third column, the notifications sent, is not read.
type sweepRow struct{ abandoned, expired int }

func (r *sweepRow) appendTargets(dst []any) []any { return append(dst, &r.abandoned, &r.expired, nil) }

// channelRow is sql/channel.sql's.
type channelRow struct{ channel string }

func (r *channelRow) appendTargets(dst []any) []any { return append(dst, &r.channel) }

// heartbeatParams are sql/heartbeat.sql's: the heartbeat's payload.
type heartbeatParams struct{ payload string }

func (p heartbeatParams) args() []any { return []any{p.payload} }

// txLimitsParams are sql/tx_limits.sql's, in milliseconds.
type txLimitsParams struct {
	lockTimeout, idleTimeout int64
}

func (p txLimitsParams) args() []any { return []any{p.lockTimeout, p.idleTimeout} }

func (p *txLimitsParams) heldArgs(dst []any) []any {
	return append(dst, (*int8Arg)(&p.lockTimeout), (*int8Arg)(&p.idleTimeout))
}

// txLockParams are sql/tx_lock.sql's: the key's lock.
type txLockParams struct{ lockKey int64 }

func (p txLockParams) args() []any { return []any{p.lockKey} }

func (p *txLockParams) heldArgs(dst []any) []any { return append(dst, (*int8Arg)(&p.lockKey)) }

// txLockRow is sql/tx_lock.sql's: whether the claim waited for the key's
// lock.
type txLockRow struct{ waited bool }

func (r *txLockRow) appendTargets(dst []any) []any { return append(dst, &r.waited) }

// txClaimParams are sql/tx_claim.sql's: the key, the clock, and the
// work's statement_timeout, in milliseconds (zero: none), unless the
// session has one.
type txClaimParams struct {
	scope            []byte
	key              string
	now              *time.Time
	statementTimeout int64
}

func (p txClaimParams) args() []any { return []any{p.scope, p.key, p.now, p.statementTimeout} }

func (p *txClaimParams) heldArgs(dst []any) []any {
	return append(dst, (*bytesArg)(&p.scope), (*textArg)(&p.key), p.now, (*int8Arg)(&p.statementTimeout))
}

// txClaimRow is sql/tx_claim.sql's: the key's row as claimRow reads it
// (inserted meaning the key has none), the generation of the claim (null
// if the row is live), and the work's statement_timeout in milliseconds
// (zero: none) and whether it is the session's.
type txClaimRow struct {
	claimRow
	next                   int8Column
	statementTimeoutMillis int64
	sessions               bool
}

func (r *txClaimRow) appendTargets(dst []any) []any {
	return append(r.claimRow.appendTargets(dst), &r.next, &r.statementTimeoutMillis, &r.sessions)
}

// txCompleteParams are sql/tx_complete.sql's: the completion's, then what
// the row is inserted with, and the generation of the row it takes over
// (zero: none), and the request's labels.
type txCompleteParams struct {
	completeParams
	fingerprint, owner string
	takeover           bool
	createdAt          time.Time
	takenOver          int64
	// labels are the request's labels (idem.Labels), clipped.
	method, route, caller string
}

func (p txCompleteParams) args() []any {
	return []any{p.scope, p.key, p.generation, p.result, p.retentionMicros, p.now,
		p.fingerprint, p.owner, p.takeover, p.createdAt, p.takenOver, p.method, p.route, p.caller}
}

// heldArgs: the result stays a string, as args sends it, so that it
// reaches the jsonb parameter as the JSON it is in every query exec mode
// (pgx's JSON codec takes values of other types to marshal).
func (p *txCompleteParams) heldArgs(dst []any) []any {
	return append(dst, (*bytesArg)(&p.scope), (*textArg)(&p.key), (*int8Arg)(&p.generation), p.result,
		(*int8Arg)(&p.retentionMicros), p.now, (*textArg)(&p.fingerprint), (*textArg)(&p.owner), p.takeover,
		p.createdAt, (*int8Arg)(&p.takenOver), (*textArg)(&p.method), (*textArg)(&p.route), (*textArg)(&p.caller))
}

package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pause"
	"github.com/idemkit/idem/internal/pgschema"
)

var _ idem.Store = (*Store)(nil)

// MaxScopeLen is the longest scope, in bytes, the store accepts. With a key
// of [idem.MaxKeyLen] bytes it keeps a primary-key entry well inside
// PostgreSQL's B-tree limit. A longer scope is an [*idem.InvalidKeyError].
const MaxScopeLen = idem.MaxScopeLen

// DefaultRetention is the retention of a store whose Options.Retention is
// zero.
const DefaultRetention = 24 * time.Hour

// DefaultPollInterval is the polling fallback of Wait when
// Options.PollInterval is zero.
const DefaultPollInterval = time.Second

// DefaultHeartbeat is how often the LISTEN connection proves it still hears
// when Options.Heartbeat is zero.
const DefaultHeartbeat = 10 * time.Second

// firstPollDelay is a polling wait's first pause; each next pause doubles,
// up to the poll interval.
const firstPollDelay = 10 * time.Millisecond

// DefaultSweepBatch is the batch a Sweep with limit <= 0 removes at most.
const DefaultSweepBatch = idem.DefaultSweepBatch

// maxClaimAttempts bounds the claim statement's retries in the race where
// the conflicting row committed after the statement's snapshot. Each retry
// sees a newer snapshot, so in practice the second attempt decides.
const maxClaimAttempts = 100

// maxSerializationAttempts bounds the runs of a statement that keeps failing
// with a serialization failure or a deadlock (see [retryable]).
const maxSerializationAttempts = 20

// ErrLiveClaim is returned by [Store.Forget] for a key held by a claim whose
// lease has not run out, unless forced. It is [idem.ErrLiveClaim], which
// memstore's Forget returns too.
var ErrLiveClaim = idem.ErrLiveClaim

// ErrEncoding is matched by the error Claim returns on a database whose
// encoding is not UTF8, an [*EncodingError]: pgstore needs UTF8 (see
// EncodingError for why), and refuses to claim rather than run work whose
// result it could not record. migrations.Up refuses such a database too.
var ErrEncoding = pgschema.ErrEncoding

// EncodingError names the encoding of a database that is not UTF8. It
// matches [ErrEncoding].
type EncodingError = pgschema.EncodingError

// Options configures a [Store]. The zero value is ready to use.
type Options struct {
	// Table is the claim table, "table" or "schema.table", as created by
	// package migrations with the same name. Zero means "idem_keys" in the
	// connection's search_path. It is validated at [New].
	Table string
	// Lease is the lease of a claim or renewal that asks for none. Zero
	// means [idem.DefaultLease]; negative is an error.
	Lease time.Duration
	// Retention is how long a result is replayed after completion. Zero
	// means [DefaultRetention]; negative means forever (until forgotten).
	Retention time.Duration
	// PollInterval bounds how long Wait blocks without a notification, so
	// a waiter notices a lease running out or a lost notification. Zero
	// means [DefaultPollInterval]; negative is an error.
	PollInterval time.Duration
	// ListenConfig is the connection the store LISTENs on. Nil means a
	// connection taken out of the pool and kept, which is right when the
	// pool reaches PostgreSQL directly or through a pooler in session
	// mode. Behind a pooler in transaction mode (PgBouncer's
	// pool_mode=transaction), where a LISTEN lasts only as long as the
	// transaction that sent it, set it to a direct connection to the same
	// database. The channel is looked up through the pool, so this
	// connection's search_path does not matter. Unused with NoListen.
	ListenConfig *pgx.ConnConfig
	// NoListen turns LISTEN off, for engines and endpoints that lack it
	// (CockroachDB, Citus workers, a pooled endpoint without a direct
	// one). Wait then polls the key: it looks again after 10ms, then after
	// twice as long each time, up to PollInterval, and returns as soon as
	// the key is not held by a live claim. A duplicate therefore learns of
	// a completion up to one pause late (docs/performance.md measures
	// it). The replay cache needs LISTEN to hear other instances' Forget,
	// so NoListen with ReplayCacheBytes > 0 is an error at [New]. Forget
	// then sends no NOTIFY, and a polling waiter never asks for one. False
	// (the zero value) means LISTEN, with polling only while the LISTEN
	// connection is down.
	NoListen bool
	// Heartbeat is how often the LISTEN connection proves that it still
	// hears the statements' channel: the store sends a notification to
	// it through the pool and expects it back within the same interval;
	// otherwise the connection is deaf (half-open, or listening on the
	// channel of a table dropped and created again) and is replaced,
	// waking every waiter and dropping the replay cache. A heartbeat that
	// cannot be sent within the interval (the pool exhausted, the
	// database down) counts as missed. Zero means [DefaultHeartbeat];
	// negative is an error.
	Heartbeat time.Duration
	// Logger receives the store's rare warnings (listener reconnects,
	// sweeper errors). Nil means discard.
	Logger *slog.Logger
	// ReplayCacheBytes bounds an in-process cache of completed results, in
	// bytes (bodies, headers and keys, estimated), so that a replay is
	// answered without a round trip to the database. Zero means no cache:
	// every claim asks the database. The least recently used results are
	// evicted first; a result larger than an eighth of the bound is not
	// cached. A cached result is replayed until its retention (as the
	// database reported it) runs out on the local monotonic clock, the key
	// is forgotten by [Store.Forget] on any instance sharing the table (its
	// NOTIFY reaches every instance's LISTEN connection), or the LISTEN
	// connection is lost (the whole cache is dropped, since a notification
	// may have been missed). The fingerprint is still compared. A cached
	// result is shared by every replay: callers must not modify it. See
	// the package documentation for what the cache does not see.
	ReplayCacheBytes int
	// TxOptions are the options of the transactions [Store.BeginClaim]
	// begins (the isolation level, above all). The zero value begins them
	// with the connection's defaults: READ COMMITTED, unless the role or
	// the database sets default_transaction_isolation. BeginQuery and
	// CommitQuery must be empty: the store commits with its own statement.
	TxOptions pgx.TxOptions
	// Now is a test hook: when set, every statement uses its value as
	// "now" instead of the database clock. Nil (production) means the
	// database clock, statement_timestamp(); the application's clock is
	// never used for leases.
	Now func() time.Time
}

// Store is an [idem.Store] in PostgreSQL. It is safe for concurrent use, and
// any number of Stores (in any number of processes) may share one table.
type Store struct {
	pool      *pgxpool.Pool
	obj       pgschema.Objects
	lease     time.Duration
	retention time.Duration // negative: forever
	poll      time.Duration
	heartbeat time.Duration
	log       *slog.Logger

	listenConfig *pgx.ConnConfig // nil: hijack a pool connection
	now          func() time.Time
	txOptions    pgx.TxOptions

	sql      statements
	listener *listener
	cache    *replayCache // nil: no replay cache

	// utf8 is set once the database was seen to be UTF8; notUTF8 holds
	// the refusal once it was seen not to be (see checkEncoding).
	utf8    atomic.Bool
	notUTF8 atomic.Pointer[EncodingError]

	// cacheInvalidated and cacheDropped, when set (tests only), are called
	// after the cache handled a notification or dropped everything.
	cacheInvalidated atomic.Pointer[func(payload string)]
	cacheDropped     atomic.Pointer[func()]

	// waitBlocked, when set (tests only), is called when Wait has seen a
	// live claim and is about to block on a notification.
	waitBlocked func()
	// waitPolled, when set (tests only), is called when Wait, not
	// listening, has seen a live claim and pauses before looking again.
	waitPolled func()
}

// New returns a store on pool. It validates opts but does not touch the
// database: the table must have been created with package migrations (with
// the same Table). Close the store when done with it, before closing the
// pool, to stop the listener goroutine Wait starts.
func New(pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, errors.New("pgstore: nil pool")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	obj, err := pgschema.ObjectsFor(opts.Table)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	opts = opts.withDefaults()
	s := &Store{
		pool:      pool,
		obj:       obj,
		lease:     opts.Lease,
		retention: opts.Retention,
		poll:      opts.PollInterval,
		heartbeat: opts.Heartbeat,
		log:       opts.Logger,
		now:       opts.Now,
		txOptions: opts.TxOptions,
	}
	if s.sql, err = buildStatements(obj); err != nil {
		return nil, err
	}
	if opts.ReplayCacheBytes > 0 {
		s.cache = newReplayCache(opts.ReplayCacheBytes)
	}
	if opts.ListenConfig != nil {
		s.listenConfig = opts.ListenConfig.Copy()
	}
	s.listener = newListener(s, opts.NoListen)
	return s, nil
}

// validate names the first field of o that is wrong. Table is checked by
// pgschema.ObjectsFor.
func (o Options) validate() error {
	switch {
	case o.Lease < 0:
		return fmt.Errorf("pgstore: Options.Lease %v is negative", o.Lease)
	case o.PollInterval < 0:
		return fmt.Errorf("pgstore: Options.PollInterval %v is negative", o.PollInterval)
	case o.ReplayCacheBytes < 0:
		return fmt.Errorf("pgstore: Options.ReplayCacheBytes %d is negative", o.ReplayCacheBytes)
	case o.Heartbeat < 0:
		return fmt.Errorf("pgstore: Options.Heartbeat %v is negative", o.Heartbeat)
	case o.TxOptions.BeginQuery != "" || o.TxOptions.CommitQuery != "":
		return errors.New("pgstore: Options.TxOptions.BeginQuery and CommitQuery must be empty")
	case o.NoListen && o.ReplayCacheBytes > 0:
		return errors.New("pgstore: Options.ReplayCacheBytes needs LISTEN (the cache hears other instances' Forget): set it to 0 with NoListen")
	}
	return nil
}

// withDefaults returns o with every zero field that has a default set to
// it (Table is resolved by pgschema.ObjectsFor, Now stays nil for the
// database's clock).
func (o Options) withDefaults() Options {
	o.Lease = cmp.Or(o.Lease, idem.DefaultLease)
	o.Retention = cmp.Or(o.Retention, DefaultRetention)
	o.PollInterval = cmp.Or(o.PollInterval, DefaultPollInterval)
	o.Heartbeat = cmp.Or(o.Heartbeat, DefaultHeartbeat)
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// Close stops the listener goroutine Wait started, if any. It does not close
// the pool. Wait still works after Close, by polling only. Close is
// idempotent.
func (s *Store) Close() { s.listener.close() }

// nowArg is the $now argument of every statement: nil means the database
// clock.
func (s *Store) nowArg() any {
	if s.now == nil {
		return nil
	}
	return s.now()
}

func (s *Store) leaseOf(d time.Duration) time.Duration {
	if d <= 0 {
		return s.lease
	}
	return d
}

func (s *Store) retentionMicros() int64 {
	if s.retention < 0 {
		return -1
	}
	return s.retention.Microseconds()
}

func validate(scope string, key idem.Key) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if len(scope) > MaxScopeLen {
		return &idem.InvalidKeyError{Reason: fmt.Sprintf("scope is %d bytes, longer than %d", len(scope), MaxScopeLen)}
	}
	return nil
}

// unavailable wraps a database error for callers: they see an
// *idem.UnavailableError naming the operation, which unwraps to the cause
// (so errors.Is(err, context.Canceled) still works).
func unavailable(op string, err error) error {
	return &idem.UnavailableError{Op: op, Err: fmt.Errorf("pgstore: %w", err)}
}

// staleFrom maps the stale-claim SQLSTATE (sql/stale.sql) to a stale-claim
// error.
func staleFrom(err error, tok idem.Token) (*idem.StaleClaimError, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgschema.StaleClaimSQLState {
		return nil, false
	}
	se := &idem.StaleClaimError{Token: tok}
	_, _ = fmt.Sscanf(pgErr.Detail, "current generation %d", &se.Current)
	return se, true
}

// retryable reports whether err is a serialization failure (SQLSTATE 40001)
// or a deadlock (40P01). Either rolled the statement's transaction back, so
// nothing of it committed and running it again is safe. pgstore's statements
// are written for READ COMMITTED, where a race on a row is settled by waiting
// for the other writer; a connection whose default_transaction_isolation is
// REPEATABLE READ or SERIALIZABLE (a role or database setting some teams use)
// settles it with 40001 instead, and the statement, run again on a new
// snapshot, decides as it would have. It is not used inside a caller's
// transaction (CompleteTx): there the caller must roll back and retry.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// pauseBeforeRetry waits a short random time before the attempt-th retry
// of a statement that failed [retryable], so that the writers that collided
// do not collide again in step. It reports false if ctx is done first.
func pauseBeforeRetry(ctx context.Context, attempt int) bool {
	return pause.For(ctx, time.Duration(rand.N(int64(time.Millisecond)<<min(attempt, 5))))
}

// retrying runs op, a single statement outside any caller's transaction,
// again while it fails [retryable], up to maxSerializationAttempts times.
func retrying(ctx context.Context, op func() error) error {
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || !retryable(err) || attempt == maxSerializationAttempts || !pauseBeforeRetry(ctx, attempt) {
			return err
		}
	}
}

// checkEncoding returns an [*EncodingError] unless the database is UTF8.
// It asks the database once: the first claim pays one more round trip, and
// a database's encoding never changes.
func (s *Store) checkEncoding(ctx context.Context) error {
	if s.utf8.Load() {
		return nil
	}
	if err := s.notUTF8.Load(); err != nil {
		return err
	}
	var encoding string
	if err := s.pool.QueryRow(ctx, pgschema.EncodingQuery).Scan(&encoding); err != nil {
		return unavailable("claim", err)
	}
	if err := pgschema.CheckEncoding(encoding); err != nil {
		s.notUTF8.Store(err.(*EncodingError))
		return err
	}
	s.utf8.Store(true)
	return nil
}

// Claim implements [idem.Store]. It sends one statement (sql/claim.sql) for a
// new key, a replay or a duplicate in flight, and a second
// (sql/takeover.sql) to take over a row whose lease or retention ran out;
// see the package documentation.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := validate(req.Scope, req.Key); err != nil {
		return idem.Claim{}, err
	}
	if err := s.checkEncoding(ctx); err != nil {
		return idem.Claim{}, err
	}
	rc, c, ok, err := s.startClaim(req)
	if ok {
		return c, err
	}
	lease := s.leaseOf(req.Lease).Microseconds()
	serializationFailures := 0
	for range maxClaimAttempts {
		rc.ticket()
		row, err := s.queryClaim(ctx, s.pool, req, lease)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// The conflicting row is not in our snapshot: it committed
			// after the statement began. Look again.
			continue
		case retryable(err) && serializationFailures < maxSerializationAttempts:
			// The same race under a stricter isolation level: the
			// statement was rolled back. Look again.
			serializationFailures++
			if pauseBeforeRetry(ctx, serializationFailures) {
				continue
			}
			return idem.Claim{}, unavailable("claim", err)
		case err != nil:
			return idem.Claim{}, unavailable("claim", err)
		case row.inserted:
			return row.acquired(req), nil
		case row.superseded():
			// The claim's lease or the result's retention ran out: take
			// the row over, in a second statement.
			c, ok, err := s.takeOver(ctx, s.pool, req, lease, row.generation)
			switch {
			case ok:
				return c, nil
			case retryable(err) && serializationFailures < maxSerializationAttempts:
				serializationFailures++
				if !pauseBeforeRetry(ctx, serializationFailures) {
					return idem.Claim{}, unavailable("claim", err)
				}
			case err != nil:
				return idem.Claim{}, unavailable("claim", err)
			}
			// The row changed since the claim statement saw it: look
			// again.
			continue
		}
		return s.answer(rc, req, row)
	}
	return idem.Claim{}, unavailable("claim", fmt.Errorf("undecided after %d attempts under contention", maxClaimAttempts))
}

// claimCache is what a claim needs of the replay cache: where a result read
// from the table goes, and the ticket that says whether it may.
type claimCache struct {
	s                *Store
	cacheID, payload string
	tk               ticket
	sent             time.Time
}

// startClaim sets up a claim of req: a replay straight from the replay
// cache (ok true, with the cache's answer), or the cache bookkeeping for a
// claim that goes to the table.
func (s *Store) startClaim(req idem.ClaimRequest) (rc claimCache, c idem.Claim, ok bool, err error) {
	rc.s = s
	if s.cache == nil {
		return rc, idem.Claim{}, false, nil
	}
	rc.cacheID = replayCacheID(req.Scope, req.Key)
	if c, ok, err := s.claimFromCache(rc.cacheID, req); ok {
		return rc, c, true, err
	}
	s.listener.start()
	rc.payload = pgschema.NotifyPayload(req.Scope, req.Key.String())
	return rc, idem.Claim{}, false, nil
}

// ticket is taken before each claim statement is sent: its answer is
// cached only if no notification for the key (nor a lost LISTEN) came in
// between.
func (rc *claimCache) ticket() {
	if rc.s.cache != nil {
		rc.tk, rc.sent = rc.s.cache.ticket(rc.payload), time.Now()
	}
}

// acquired is the claim of a row the statement inserted.
func (r claimRow) acquired(req idem.ClaimRequest) idem.Claim {
	return idem.Claim{
		Status:   idem.Acquired,
		Token:    idem.Token{Scope: req.Scope, Key: req.Key, Generation: r.generation},
		LeaseEnd: *r.leaseEnd,
	}
}

// answer is the claim of a key whose row the claim statement found live: a
// duplicate in flight, a replay (cached, if the cache may take it), or a
// mismatch.
func (s *Store) answer(rc claimCache, req idem.ClaimRequest, row claimRow) (idem.Claim, error) {
	switch row.state {
	case "claimed":
		if mismatch(row.fingerprint, req.Fingerprint) {
			return idem.Claim{}, &idem.MismatchError{Scope: req.Scope, Key: req.Key}
		}
		return idem.Claim{Status: idem.InFlight, LeaseEnd: *row.leaseEnd}, nil
	case "completed":
		if mismatch(row.fingerprint, req.Fingerprint) {
			return idem.Claim{}, &idem.MismatchError{Scope: req.Scope, Key: req.Key, Completed: true}
		}
		res, err := row.result.result()
		if err != nil {
			return idem.Claim{}, unavailable("claim", err)
		}
		if s.cache != nil {
			s.cache.put(rc.tk, rc.cacheID, rc.payload, row.fingerprint, res, rc.sent, row.now, row.expiresAt)
		}
		return idem.Claim{Status: idem.Completed, Result: res}, nil
	}
	return idem.Claim{}, unavailable("claim", fmt.Errorf("unknown state %q", row.state))
}

// ClaimFromCache answers req from the replay cache alone, without I/O, as
// [Store.Claim] would: the result, or a [*idem.MismatchError] for another
// fingerprint. ok is false when the cache cannot answer (no cache, a miss,
// an expired entry, or a scope or key that Claim would refuse): call Claim.
//
// Claim asks the cache first itself; engine.Engine (and so the middleware
// and mcphttp) calls ClaimFromCache before it sets up the store timeout
// for Claim, which a replay from memory does not need.
func (s *Store) ClaimFromCache(req idem.ClaimRequest) (c idem.Claim, ok bool, err error) {
	if s.cache == nil || validate(req.Scope, req.Key) != nil {
		return idem.Claim{}, false, nil
	}
	return s.claimFromCache(replayCacheID(req.Scope, req.Key), req)
}

// claimFromCache answers a claim of a key whose result the replay cache
// holds: the replay, or a mismatch error. ok is false on a miss.
func (s *Store) claimFromCache(cacheID string, req idem.ClaimRequest) (c idem.Claim, ok bool, err error) {
	fp, res, ok := s.cache.get(cacheID, s.now)
	switch {
	case !ok:
		return idem.Claim{}, false, nil
	case mismatch(fp, req.Fingerprint):
		return idem.Claim{}, true, &idem.MismatchError{Scope: req.Scope, Key: req.Key, Completed: true}
	}
	return idem.Claim{Status: idem.Completed, Result: res}, true, nil
}

// claimRow is the answer of sql/claim.sql: the claim inserted, or the row
// as the statement's snapshot saw it.
type claimRow struct {
	inserted            bool
	generation          int64
	leaseEnd, expiresAt *time.Time
	now                 time.Time // the statement's clock
	state, fingerprint  string
	result              resultColumn // completed: the recorded result
}

// resultColumn is a scan target for the result column (jsonb, null until
// completed) that decodes the JSON as pgx hands it over, from pgx's read
// buffer: a []byte target would copy it first, and a large body would be
// held once more. The decoding error is kept, not returned, so that a
// result that cannot be decoded fails only the operation that uses it
// (a claim takes an expired row over whatever it holds).
type resultColumn struct {
	res   idem.Result
	valid bool // not null
	err   error
}

var _ pgtype.BytesScanner = (*resultColumn)(nil)

// ScanBytes implements [pgtype.BytesScanner]; b is valid only during the
// call, and the decoded result keeps none of it.
func (c *resultColumn) ScanBytes(b []byte) error {
	*c = resultColumn{valid: b != nil}
	if c.valid {
		c.err = c.res.UnmarshalJSON(b)
	}
	return nil
}

// result returns the decoded result; a null column is an error.
func (c *resultColumn) result() (idem.Result, error) {
	switch {
	case !c.valid:
		return idem.Result{}, errors.New("completed without a result")
	case c.err != nil:
		return idem.Result{}, c.err
	}
	return c.res, nil
}

// querier is what sends a claim statement: the pool, or the connection of
// a claim's transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// queryClaim sends the claim statement once.
func (s *Store) queryClaim(ctx context.Context, db querier, req idem.ClaimRequest, leaseMicros int64) (claimRow, error) {
	return scanClaim(db.QueryRow(ctx, s.sql.claim, s.claimArgs(req, leaseMicros)...))
}

// claimArgs are the claim statement's parameters.
func (s *Store) claimArgs(req idem.ClaimRequest, leaseMicros int64) []any {
	return []any{[]byte(req.Scope), req.Key.String(), req.Fingerprint, req.Owner, leaseMicros, s.nowArg()}
}

// scanClaim reads the claim statement's answer.
func scanClaim(row pgx.Row) (claimRow, error) {
	var r claimRow
	err := row.Scan(&r.inserted, &r.generation, &r.leaseEnd, &r.state, &r.fingerprint, &r.expiresAt, &r.result, &r.now)
	return r, err
}

// takeOver sends sql/takeover.sql for the row of generation gen, which the
// claim statement found with its lease or retention run out. ok is false,
// with no error, if the row changed since.
func (s *Store) takeOver(ctx context.Context, db querier, req idem.ClaimRequest, leaseMicros, gen int64) (c idem.Claim, ok bool, err error) {
	return scanTakeover(req, db.QueryRow(ctx, s.sql.takeover, append(s.claimArgs(req, leaseMicros), gen)...))
}

// scanTakeover reads sql/takeover.sql's answer: ok is false, with no
// error, if the row changed since the claim statement saw it.
func scanTakeover(req idem.ClaimRequest, row pgx.Row) (c idem.Claim, ok bool, err error) {
	c = idem.Claim{Status: idem.Acquired, Token: idem.Token{Scope: req.Scope, Key: req.Key}}
	err = row.Scan(&c.Token.Generation, &c.LeaseEnd, &c.Takeover)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return idem.Claim{}, false, nil
	case err != nil:
		return idem.Claim{}, false, err
	}
	return c, true, nil
}

// superseded reports whether a row the statement did not insert lets the
// claim take it over, by the statement's clock: its lease or its retention
// has run out.
func (r claimRow) superseded() bool {
	switch r.state {
	case "claimed":
		return !r.now.Before(*r.leaseEnd)
	case "completed":
		return r.expiresAt != nil && !r.now.Before(*r.expiresAt)
	}
	return false
}

func mismatch(stored, asked string) bool {
	return stored != "" && asked != "" && stored != asked
}

// Complete implements [idem.Store] in one statement (sql/complete.sql), which
// notifies waiters; a stale token takes a second, which raises the
// stale-claim error (sql/stale.sql).
func (s *Store) Complete(ctx context.Context, tok idem.Token, res idem.Result) error {
	return retrying(ctx, func() error { return s.complete(ctx, s.pool, "complete", tok, res) })
}

// CompleteTx records res for tok's claim inside the caller's transaction tx,
// so that the caller's business writes and the recorded result commit
// together or not at all.
//
// If tok's generation no longer holds the key (its lease ran out and another
// caller took the key over, or it was swept or forgotten), CompleteTx returns
// a [*idem.StaleClaimError], raised in tx by a second statement
// (sql/stale.sql), whose error aborts tx: PostgreSQL refuses to commit it,
// so the business writes of an owner that lost its claim are rolled back
// too. A caller must roll back after any error.
//
// The key stays claimed until tx commits; waiters are notified at commit.
// If tx rolls back, the claim is still held (and its lease still runs), so
// the caller may retry or Release. tx must be a transaction on the database
// holding the store's table; see the package documentation for the limits.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, tok idem.Token, res idem.Result) error {
	if tx == nil {
		return errors.New("pgstore: CompleteTx: nil transaction")
	}
	return s.complete(ctx, tx, "complete", tok, res)
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func (s *Store) complete(ctx context.Context, db execer, op string, tok idem.Token, res idem.Result) error {
	if err := validate(tok.Scope, tok.Key); err != nil {
		return err
	}
	var (
		tag pgconn.CommandTag
		err error
	)
	if len(res.Body) < largeBody {
		// The whole result as JSON, sent as text so that no query exec
		// mode sends it as bytea (see sql/complete.sql).
		var js []byte
		if js, err = res.MarshalJSON(); err != nil {
			return fmt.Errorf("pgstore: encoding result: %w", err)
		}
		tag, err = db.Exec(ctx, s.sql.complete, []byte(tok.Scope), tok.Key.String(), tok.Generation, string(js),
			s.retentionMicros(), s.nowArg())
	} else {
		// The body as its own parameter, the JSON built around it in SQL
		// (see sql/complete.sql, .Large): for a large body each copy counts.
		body := res.Body
		res.Body = nil
		var meta []byte
		if meta, err = res.MarshalJSON(); err != nil {
			return fmt.Errorf("pgstore: encoding result: %w", err)
		}
		tag, err = execLarge(ctx, db, s.sql.completeLarge, completeArgs{[]byte(tok.Scope), tok.Key.String(), tok.Generation,
			string(meta), s.retentionMicros(), s.nowArg(), body, idem.IsText(body)})
	}
	switch {
	case err != nil:
		return unavailable(op, err)
	case tag.RowsAffected() == 0:
		return s.stale(ctx, db, op, tok)
	}
	return nil
}

// staleTimeout bounds the statement that raises the stale-claim error.
const staleTimeout = 5 * time.Second

// stale sends sql/stale.sql for tok, which the completion statement found
// no longer holding its key: the statement raises the stale-claim error,
// which inside a caller's transaction aborts it. It is sent even if ctx
// ended meanwhile (within staleTimeout): a transaction whose completion
// failed must not be left able to commit, and if the statement cannot run
// either, pgx closes the connection, which ends the transaction too.
func (s *Store) stale(ctx context.Context, db execer, op string, tok idem.Token) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), staleTimeout)
	defer cancel()
	// Not prepared: the statement is rare, and pgx would prepare it
	// again after each error it raises (an extra round trip).
	_, err := db.Exec(sctx, s.sql.stale, pgx.QueryExecModeExec, []byte(tok.Scope), tok.Key.String(), tok.Generation)
	if se, ok := staleFrom(err, tok); ok {
		return se
	}
	if err == nil {
		err = errors.New("the stale-claim function returned without raising")
	}
	return unavailable(op, err)
}

// Renew implements [idem.Store] in one statement. A claim whose lease ran
// out may still be renewed while nobody took the key over or swept it.
func (s *Store) Renew(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
	if err := validate(tok.Scope, tok.Key); err != nil {
		return time.Time{}, err
	}
	var (
		leaseEnd *time.Time
		current  *int64
	)
	err := retrying(ctx, func() error {
		return s.pool.QueryRow(ctx, s.sql.renew,
			[]byte(tok.Scope), tok.Key.String(), tok.Generation, s.leaseOf(lease).Microseconds(), s.nowArg(),
		).Scan(&leaseEnd, &current)
	})
	if err != nil {
		return time.Time{}, unavailable("renew", err)
	}
	if leaseEnd == nil {
		return time.Time{}, staleErr(tok, current)
	}
	return *leaseEnd, nil
}

func staleErr(tok idem.Token, current *int64) error {
	se := &idem.StaleClaimError{Token: tok}
	if current != nil {
		se.Current = *current
	}
	return se
}

// Release implements [idem.Store] in one statement, which notifies waiters.
func (s *Store) Release(ctx context.Context, tok idem.Token) error {
	if err := validate(tok.Scope, tok.Key); err != nil {
		return err
	}
	var (
		deleted int64
		current *int64
	)
	err := retrying(ctx, func() error {
		return s.pool.QueryRow(ctx, s.sql.release,
			[]byte(tok.Scope), tok.Key.String(), tok.Generation,
		).Scan(&deleted, &current, nil)
	})
	if err != nil {
		return unavailable("release", err)
	}
	if deleted == 0 {
		return staleErr(tok, current)
	}
	return nil
}

// Sweep implements [idem.Store]: one statement deletes up to limit rows
// (limit <= 0 means [DefaultSweepBatch]), abandoned claims first, locking
// them with FOR UPDATE SKIP LOCKED so that sweepers running at once in
// several instances never wait for each other nor delete a row twice.
func (s *Store) Sweep(ctx context.Context, limit int) (idem.SweepStats, error) {
	if limit <= 0 {
		limit = DefaultSweepBatch
	}
	var abandoned, expired int
	sweep, err := s.sql.sweepSQL(limit)
	if err != nil {
		return idem.SweepStats{}, err
	}
	err = retrying(ctx, func() error {
		return s.pool.QueryRow(ctx, sweep, s.nowArg()).Scan(&abandoned, &expired, nil)
	})
	if err != nil {
		return idem.SweepStats{}, unavailable("sweep", err)
	}
	return idem.SweepStats{Abandoned: abandoned, Expired: expired}, nil
}

// Run is shorthand for an [idem.Sweeper] over s with the given interval
// (zero means [idem.DefaultSweepInterval], negative is an error), batches of
// [DefaultSweepBatch] and the store's Logger: it sweeps at once and then
// every interval ±50% until ctx is done, then returns nil. Run it in every
// instance: sweepers skip each other's rows.
func (s *Store) Run(ctx context.Context, interval time.Duration) error {
	return idem.Sweeper{Store: s, Interval: interval, Batch: DefaultSweepBatch, Logger: s.log}.Run(ctx)
}

// Wait implements [idem.Store]. It returns at once if the key is no longer
// held by a live claim. Otherwise, while the LISTEN connection is in effect,
// it blocks until a completion or release of the key is notified (from any
// instance), the holder's lease runs out, the poll interval passes, or ctx
// is done. While it is not (connecting, reconnecting, deaf, or NoListen), it
// polls the key with a doubling pause, from 10ms up to the poll interval,
// until the key is no longer held by a live claim or ctx is done; if the
// LISTEN comes up meanwhile, it switches to waiting for notifications.
func (s *Store) Wait(ctx context.Context, scope string, key idem.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validate(scope, key); err != nil {
		return err
	}
	ch, ready, unsubscribe := s.listener.subscribe(pgschema.NotifyPayload(scope, key.String()))
	defer unsubscribe()

	pause := min(firstPollDelay, s.poll)
	for {
		// Look at the key only once the listener is up, so that a
		// completion between our look and the notification cannot be
		// missed; before that, each look is a poll.
		listening := isClosed(ready)
		left, live, err := s.leaseLeft(ctx, scope, key, listening)
		if err != nil || !live {
			return err
		}
		timeout := s.poll
		if !listening {
			timeout = pause
			pause = min(2*pause, s.poll)
		}
		// Under the Now test hook the lease runs out on the test's clock,
		// not the wall clock; the poll interval covers it.
		if s.now == nil && left < timeout {
			timeout = left
		}
		switch {
		case listening && s.waitBlocked != nil:
			s.waitBlocked()
		case !listening && s.waitPolled != nil:
			s.waitPolled()
		}
		comesUp := ready
		if listening {
			comesUp = nil
		}
		timer := time.NewTimer(timeout)
		select {
		case <-ch:
			timer.Stop()
			return nil
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
			if listening {
				return nil
			}
		case <-comesUp:
			// The LISTEN came up while polling: look again, then block.
			timer.Stop()
		}
	}
}

// isClosed reports whether ch is closed; a nil ch is not.
func isClosed(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// leaseLeft is Wait's look at the key: whether it is held by a live claim,
// and for how much longer. listening says whether Wait will then block on a
// notification, or poll. It tells the listener which channel the
// statements use, so that a LISTEN on a dropped table's channel is replaced.
func (s *Store) leaseLeft(ctx context.Context, scope string, key idem.Key, listening bool) (left time.Duration, live bool, err error) {
	var (
		channel   string
		remaining *int64 // microseconds left on a live claim's lease
	)
	check := s.sql.pollCheck
	if listening {
		check = s.sql.waitCheck
	}
	err = retrying(ctx, func() error {
		return s.pool.QueryRow(ctx, check, []byte(scope), key.String(), s.nowArg()).Scan(&channel, &remaining)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, false, ctx.Err()
		}
		return 0, false, unavailable("wait", err)
	}
	s.listener.follow(channel)
	if remaining == nil {
		return 0, false, nil
	}
	return time.Duration(*remaining) * time.Microsecond, true, nil
}

// Inspect returns the entry of (scope, key) as stored, whatever its state:
// a claim whose lease ran out and a result past retention are reported as
// they are (see LeaseEnd and ExpiresAt), until swept. It is for operators.
func (s *Store) Inspect(ctx context.Context, scope string, key idem.Key) (idem.Entry, bool, error) {
	if err := validate(scope, key); err != nil {
		return idem.Entry{}, false, err
	}
	var (
		e                              idem.Entry
		state                          string
		leaseEnd, completed, expiresAt *time.Time
		result                         resultColumn
	)
	err := retrying(ctx, func() error {
		return s.pool.QueryRow(ctx, s.sql.inspect, []byte(scope), key.String()).Scan(
			&state, &e.Generation, &e.Fingerprint, &e.Owner, &e.CreatedAt, &leaseEnd, &completed, &expiresAt, &result)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return idem.Entry{}, false, nil
	}
	if err != nil {
		return idem.Entry{}, false, unavailable("inspect", err)
	}
	switch state {
	case "claimed":
		e.State = idem.StateClaimed
	case "completed":
		e.State = idem.StateCompleted
		if e.Result, err = result.result(); err != nil {
			return idem.Entry{}, false, unavailable("inspect", err)
		}
	}
	e.LeaseEnd, e.CompletedAt, e.ExpiresAt = orZero(leaseEnd), orZero(completed), orZero(expiresAt)
	return e, true, nil
}

func orZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// Forget deletes (scope, key) whatever its state, as an operator's forget
// does, and reports whether it was present. A live claim (lease not run
// out) is refused with [ErrLiveClaim] unless force is set: its holder is
// presumably still executing, and forgetting it would let a retry run the
// side effect a second time. The holder's token becomes stale.
func (s *Store) Forget(ctx context.Context, scope string, key idem.Key, force bool) (bool, error) {
	if err := validate(scope, key); err != nil {
		return false, err
	}
	var (
		deleted int64
		present bool
	)
	forget := s.sql.forget
	if s.listener.off {
		forget = s.sql.forgetQuiet
	}
	err := retrying(ctx, func() error {
		return s.pool.QueryRow(ctx, forget, []byte(scope), key.String(), force, s.nowArg()).Scan(&deleted, &present)
	})
	if err != nil {
		return false, unavailable("forget", err)
	}
	if deleted > 0 && s.cache != nil {
		// This instance's own cache forgets at once; the others when
		// the NOTIFY reaches them.
		s.cache.invalidate(pgschema.NotifyPayload(scope, key.String()))
	}
	switch {
	case deleted > 0:
		return true, nil
	case present:
		return false, ErrLiveClaim
	}
	return false, nil
}

// Stats describes the table, for operators.
type Stats struct {
	// Claimed counts live claims (lease not run out).
	Claimed int64
	// Abandoned counts claims whose lease ran out, awaiting takeover or
	// sweep.
	Abandoned int64
	// Completed counts results within retention.
	Completed int64
	// Expired counts results past retention, awaiting sweep.
	Expired int64
	// OldestClaim is when the oldest live claim was claimed; zero if none.
	OldestClaim time.Time
	// OldestAbandoned is the lease end of the longest-abandoned claim; zero
	// if none. A value far in the past means the sweeper is not running.
	OldestAbandoned time.Time
	// TableBytes is the table's size on disk, indexes and TOAST included.
	TableBytes int64
}

// Stats counts the table's rows by state. It scans the whole table: it is
// for an operator's CLI, not for a hot path.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	var (
		st                  Stats
		oldest, oldestAband *time.Time
	)
	err := retrying(ctx, func() error {
		return s.pool.QueryRow(ctx, s.sql.stats, s.nowArg()).Scan(
			&st.Claimed, &st.Abandoned, &st.Completed, &st.Expired, &oldest, &oldestAband, &st.TableBytes)
	})
	if err != nil {
		return Stats{}, unavailable("stats", err)
	}
	st.OldestClaim, st.OldestAbandoned = orZero(oldest), orZero(oldestAband)
	return st, nil
}

// Retention is how long a result is replayed after completion:
// Options.Retention with its default applied, negative for a store that
// keeps results until they are forgotten.
func (s *Store) Retention() time.Duration { return s.retention }

package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// Defaults applied by [New] to zero [Options] fields.
const (
	// DefaultStoreTimeout bounds each store call made once the work runs
	// (renew, complete, release) when Options.StoreTimeout is zero. A
	// renewal is bounded further by the time left on the lease.
	DefaultStoreTimeout = 10 * time.Second
	// DefaultRetryAfter is the retry delay when the store gave no hint
	// and the holder's lease end is unknown, when Options.RetryAfter is
	// zero.
	DefaultRetryAfter = time.Second
	// MaxLeaseMargin caps the lease's safety margin: the work's context
	// is cancelled min(lease/5, MaxLeaseMargin) before the lease could run
	// out without a confirmed renewal. See the package documentation.
	MaxLeaseMargin = 2 * time.Second
	// MinRetryAfter is the shortest retry delay the engine suggests for
	// a key in flight.
	MinRetryAfter = 100 * time.Millisecond
	// DefaultMaxExecution bounds how long the work runs under its claim
	// when Options.MaxExecution is zero: longer than any request a
	// gateway or an MCP client waits for (the MCP TypeScript SDK gives up
	// after a minute), short enough that a hung work does not hold its key
	// for the life of the process.
	DefaultMaxExecution = 5 * time.Minute
	// MinIdleInTransaction is the shortest Options.IdleInTransaction that
	// [New] takes without a warning in the log: healthy work can pause
	// that long between two statements (an outgoing call, a slow
	// computation, a starved container), and a shorter bound ends its
	// transaction every time, retries included.
	MinIdleInTransaction = 10 * time.Second
)

// ErrShutdown is the cause ([context.Cause]) with which the work's context
// is cancelled when Options.Shutdown is done. Work cut off this way that
// answers nothing to record has its key released, so a retry (on this
// instance or another) runs it again; a whole answer the adapter records is
// recorded.
var ErrShutdown = errors.New("engine: the server is shutting down")

// ErrExecutionTimeout is the cause ([context.Cause]) with which the work's
// context ends at its deadline: Options.MaxExecution after it started, or
// the deadline of the client's request context if that comes first (one
// set by http.TimeoutHandler or a gateway); its Err is
// [context.DeadlineExceeded]. From then on the lease is not renewed. A
// work that answers nothing to record is released when it returns, so a
// retry runs it again; a whole answer the adapter records is recorded, as
// for any work whose context ended (its side effect happened); a work that
// never returns keeps its claim only until the lease runs out, and a retry
// then takes the key over. The deadline itself never completes the key.
var ErrExecutionTimeout = errors.New("engine: the work ran past its deadline")

// Options configures an [Engine]. The zero value is usable: every field says
// what its zero value means. Invalid values make [New] panic.
type Options struct {
	// Adapter names the adapter in every [idem.Event] the engine reports
	// (middleware.AdapterName, mcphttp.AdapterName, or a third party's
	// name); the adapters set it themselves ([Options.ForAdapter]). Empty
	// means the events do not say.
	Adapter string

	// Lease is the lease of every claim, renewed every third of it while
	// the work runs. Zero means [idem.DefaultLease]. Negative, or shorter
	// than a millisecond, panics.
	Lease time.Duration

	// Wait bounds how long a duplicate of a request still in flight waits
	// for the original's result in [Engine.Claim]. Negative means no
	// wait: the duplicate is answered in flight at once. Zero means no
	// wait too, except in an adapter, which takes it as its own DefaultWait
	// (middleware.DefaultWait, mcphttp.DefaultWait).
	Wait time.Duration

	// StoreTimeout bounds each store call made once the work runs (renew,
	// complete, release), and, added to Wait, a claim; a completion that
	// fails with an unavailable store is tried again until it runs out.
	// Zero means [DefaultStoreTimeout]. Negative panics.
	StoreTimeout time.Duration

	// RetryAfter is the retry delay suggested when the store is
	// unavailable without a hint of its own, or a key is in flight with
	// an unknown lease end. Zero means [DefaultRetryAfter]. Negative
	// panics.
	RetryAfter time.Duration

	// CancelWithClient ends the work's context when the client's does
	// (the client hung up), and releases the key of work so cut off. False
	// means the work runs to completion and is recorded whatever the
	// client does; see "Client hang-ups" in the package documentation for
	// when true is safe.
	CancelWithClient bool

	// MaxExecution bounds how long the work runs under its claim: when it
	// has passed since [Engine.Start], or the deadline of the client's
	// context passed if that is earlier, the work's context ends with
	// cause [ErrExecutionTimeout] and its lease is no longer renewed (see
	// ErrExecutionTimeout for what the key becomes). The work's context
	// reports that deadline (context.Context.Deadline), so database calls
	// and outgoing requests made with it are bounded too. Zero means
	// [DefaultMaxExecution]; negative means no bound but the client's
	// deadline. With CancelWithClient the client's deadline ends the work
	// as the client's context does, with its cause.
	MaxExecution time.Duration

	// IdleInTransaction bounds how long the transaction of a claim in a
	// transaction (Request.InTransaction) may stay idle, no statement of
	// the work running, before the database ends it ([idem.TxLimits].Idle;
	// pgstore: idle_in_transaction_session_timeout). It is how the key of
	// a process that froze or lost its network with the transaction open
	// is freed, since nothing renews such a claim; a healthy work that
	// pauses longer between two statements loses its transaction, and
	// fails with an [*idem.TxLimitError] that says so (see
	// [Execution.TxLimitErr]). Zero means MaxExecution (its default
	// applied), or [DefaultMaxExecution] if MaxExecution is negative: a
	// work that heeds its context never pauses longer than it may run.
	// Shorter than both [MinIdleInTransaction] and MaxExecution, New logs
	// a warning (with a store that is an [idem.TxStore]); negative
	// panics.
	IdleInTransaction time.Duration

	// Shutdown, when done, ends the context of all running work with
	// cause [ErrShutdown]; the key of work so cut off is released unless it
	// still returned a whole answer to record, and claims made after it
	// are answered Unavailable. Cancel it when a graceful shutdown gives
	// up (after http.Server.Shutdown returned an error, before
	// http.Server.Close):
	// since the work's context no longer ends with the client's
	// connection, closing the server does not end it. Nil means never.
	Shutdown context.Context

	// Owner names this process in claims, for operators. Empty means none.
	Owner string

	// Logger receives the engine's logs: store failures, lost claims,
	// releases. Keys appear as digests ([idem.KeyDigest]), in clear only
	// when the logger is enabled for debug. Nil discards.
	Logger *slog.Logger

	idleSet bool // IdleInTransaction was set, not defaulted: a short one is worth a warning
}

// Engine runs protected work for an adapter: claim, run under a context the
// engine controls while it renews the lease, decide record or release,
// complete or release, report. It is safe for concurrent use; an adapter
// makes one per mounted handler.
type Engine struct {
	store        idem.Store
	cache        CacheClaimer // store, if it is one; nil otherwise
	txs          idem.TxStore // store, if it is one; nil otherwise
	adapter      string
	lease        time.Duration
	renewEvery   time.Duration
	margin       time.Duration
	wait         time.Duration
	storeTimeout time.Duration
	retryAfter   time.Duration
	cancelWithCl bool
	maxExecution time.Duration // zero: no bound
	idle         time.Duration // Options.IdleInTransaction, default applied
	shutdown     context.Context
	owner        string
	logger       *slog.Logger
	// typicalRun is how long the work of this engine's claims runs, as a
	// moving average of the recorded ones (nanoseconds; zero until one
	// is recorded): the retry hint of a duplicate in flight.
	typicalRun atomic.Int64
}

// New returns an engine over store. It panics if store is nil or opts is
// invalid; it never panics per request.
func New(store idem.Store, opts Options) *Engine {
	if store == nil {
		panic("engine: New with a nil store")
	}
	opts = opts.withDefaults()
	e := &Engine{
		store: store, adapter: opts.Adapter, wait: max(opts.Wait, 0),
		lease: opts.Lease, renewEvery: opts.Lease / 3, margin: min(opts.Lease/5, MaxLeaseMargin),
		storeTimeout: opts.StoreTimeout, retryAfter: opts.RetryAfter,
		cancelWithCl: opts.CancelWithClient, maxExecution: max(opts.MaxExecution, 0),
		idle: opts.IdleInTransaction, shutdown: opts.Shutdown,
		owner: opts.Owner, logger: opts.Logger,
	}
	e.cache, _ = store.(CacheClaimer)
	e.txs, _ = store.(idem.TxStore)
	if short := e.idle < MinIdleInTransaction && (e.maxExecution == 0 || e.idle < e.maxExecution); e.txs != nil && opts.idleSet && short {
		// Shorter than the work may run, and than healthy work may
		// pause: a misconfiguration to say at start, not per request.
		e.logger.Warn(fmt.Sprintf("Options.IdleInTransaction (%v) is short: the database ends the transaction of a claim in a transaction whose work pauses that long between two statements, and the request fails, retries included", e.idle),
			slog.String("adapter", e.adapter), slog.Duration("idle_in_transaction", e.idle), slog.Duration("min", MinIdleInTransaction))
	}
	return e
}

// ForAdapter returns o as an adapter passes it to [New], with Adapter set
// to name, a zero Wait replaced by defaultWait (a negative one by zero: no
// wait) and every other default applied, so that the adapter reads the
// settings the engine uses (its Logger, its Wait). An invalid value panics
// as in New.
func (o Options) ForAdapter(name string, defaultWait time.Duration) Options {
	o.Adapter = name
	switch {
	case o.Wait == 0:
		o.Wait = defaultWait
	case o.Wait < 0:
		o.Wait = 0
	}
	return o.withDefaults()
}

// withDefaults validates o and applies the default of every zero field but
// Wait (zero: no wait). Applying it twice changes nothing.
func (o Options) withDefaults() Options {
	o.Lease = orDefault("Lease", o.Lease, idem.DefaultLease)
	if o.Lease < time.Millisecond {
		panic(fmt.Sprintf("engine: Options.Lease %v is shorter than a millisecond", o.Lease))
	}
	o.StoreTimeout = orDefault("StoreTimeout", o.StoreTimeout, DefaultStoreTimeout)
	o.RetryAfter = orDefault("RetryAfter", o.RetryAfter, DefaultRetryAfter)
	o.MaxExecution = cmp.Or(o.MaxExecution, DefaultMaxExecution)
	o.idleSet = o.idleSet || o.IdleInTransaction > 0
	o.IdleInTransaction = orDefault("IdleInTransaction", o.IdleInTransaction, cmp.Or(max(o.MaxExecution, 0), DefaultMaxExecution))
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func orDefault(name string, v, def time.Duration) time.Duration {
	switch {
	case v == 0:
		return def
	case v < 0:
		panic(fmt.Sprintf("engine: Options.%s is negative (%v)", name, v))
	}
	return v
}

// Lease returns the lease of every claim, with the default applied.
func (e *Engine) Lease() time.Duration { return e.lease }

// RetryAfter returns the retry delay for a failure with no better hint
// (Options.RetryAfter with the default applied), for answers the adapter
// makes itself, such as a failed in-transaction commit.
func (e *Engine) RetryAfter() time.Duration { return e.retryAfter }

// Request is one protected request, as the engine sees it. The adapter
// fills Claim and Observe, and passes the same *Request to every engine call
// for the request: it carries the claim's timing between them.
type Request struct {
	// Claim is what to claim: Scope, Key and Fingerprint. The engine sets
	// Lease and Owner from its Options.
	Claim idem.ClaimRequest
	// Observe, when not nil, receives each [idem.Event] of the request.
	// It runs on the request's goroutine or the lease renewal's, and
	// must be fast and safe for concurrent use.
	Observe func(idem.Event)
	// InTransaction claims the key inside a transaction of the store's
	// database, which the work runs in ([idem.TxStore]; see "In a
	// transaction" in the package documentation). False means the
	// two-phase claim: committed on its own, then completed or released.
	InTransaction bool

	start  time.Time     // when the first claim was sent
	sent   time.Time     // when the last claim was sent: its lease starts after
	waited time.Duration // time spent waiting for an in-flight duplicate
}

// Outcome is what a claim means for the adapter: run the work, or answer
// without running it.
type Outcome int

const (
	// Run: the key is the request's. Start the work with [Engine.Start].
	Run Outcome = iota + 1
	// Replay: the key was completed; answer with Decision.Claim.Result
	// (a result marked Unreplayable is answered with the adapter's
	// "already ran, cannot replay" error).
	Replay
	// InFlight: another request holds the key; tell the client to retry
	// after Decision.RetryAfter.
	InFlight
	// Mismatch: the key was used for a different request (another
	// fingerprint). Refuse; do not run.
	Mismatch
	// InvalidKey: the store rejected the key or scope (too long). Refuse
	// as bad input; Decision.Err says why.
	InvalidKey
	// Unavailable: the store failed or is full, or Options.Shutdown is
	// done (Decision.Err is then [ErrShutdown]); Decision.Err says how.
	// The work must not run under no claim (unless the adapter's user
	// chose to fail open); tell the client to retry after
	// Decision.RetryAfter.
	Unavailable
	// RequestEnded: the request's context ended while claiming or waiting. Nothing
	// was claimed. Usually the client left; but a server that cancels its
	// requests (a shutdown past its bound) ends it too, with the client
	// still there, so answer it as Unavailable (the answer is lost if the
	// client is gone).
	RequestEnded
)

func (o Outcome) String() string {
	switch o {
	case Run:
		return "run"
	case Replay:
		return "replay"
	case InFlight:
		return "in flight"
	case Mismatch:
		return "mismatch"
	case InvalidKey:
		return "invalid key"
	case Unavailable:
		return "unavailable"
	case RequestEnded:
		return "request ended"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Decision is the outcome of a claim.
type Decision struct {
	Outcome Outcome
	// Claim is what the store answered (the token when Run, the result
	// when Replay, the holder's lease end when InFlight).
	Claim idem.Claim
	// Err is the store's error for Mismatch, InvalidKey and Unavailable.
	Err error
	// RetryAfter is the suggested retry delay for InFlight and
	// Unavailable; see "Retry-After" in the package documentation.
	RetryAfter time.Duration

	tx idem.TxClaim // Run, for a request InTransaction: the claim's transaction
}

// Claim claims req's key, waiting up to Options.Wait for a duplicate still
// in flight, and reports the outcome as an [idem.Event] (none for RequestEnded). The
// claim runs under ctx, the client's context, bounded by Wait plus
// StoreTimeout.
func (e *Engine) Claim(ctx context.Context, req *Request) Decision {
	d := e.claim(ctx, req, e.wait)
	e.Report(ctx, req, d)
	return d
}

// TryClaim claims req's key once, without waiting. It reports an
// [idem.Event] only for Run; for any other outcome the adapter decides what
// comes next (such as checking the request further, then [Engine.Claim] to
// wait), and reports the final decision with [Engine.Report].
func (e *Engine) TryClaim(ctx context.Context, req *Request) Decision {
	d := e.claim(ctx, req, 0)
	if d.Outcome == Run {
		e.Report(ctx, req, d)
	}
	return d
}

func (e *Engine) claim(ctx context.Context, req *Request, wait time.Duration) Decision {
	// The first look does not wait; a two-phase claim of a key held in a
	// transaction still open waits in idem.ClaimWait, bounded by wait.
	req.Claim.Lease, req.Claim.Owner, req.Claim.Wait = e.lease, e.owner, 0
	if req.start.IsZero() {
		req.start = time.Now()
	}
	if e.shutdown != nil && e.shutdown.Err() != nil {
		// Work started now would be cut off at once, and released: a
		// retry must go elsewhere.
		return Decision{Outcome: Unavailable, Err: ErrShutdown, RetryAfter: e.retryAfter}
	}
	req.sent = time.Now()
	var (
		claim  idem.Claim
		err    error
		cached bool
		tx     idem.TxClaim
	)
	if e.cache != nil {
		claim, cached, err = e.cache.ClaimFromCache(req.Claim)
	}
	switch {
	case cached:
	case req.InTransaction:
		claim, tx, err = e.claimInTx(ctx, req, wait)
	default:
		cctx, cancel := context.WithTimeout(ctx, e.storeTimeout)
		claim, err = e.store.Claim(cctx, req.Claim)
		cancel()
	}
	if err == nil && claim.Status == idem.InFlight && wait > 0 && !req.InTransaction {
		began := time.Now()
		cctx, cancel := context.WithTimeout(ctx, wait+e.storeTimeout)
		claim, err = idem.ClaimWait(cctx, sendTimer{e.store, &req.sent}, req.Claim, wait)
		cancel()
		req.waited += time.Since(began)
	}
	if err != nil {
		d := Decision{Claim: claim, Err: err}
		switch {
		case ctx.Err() != nil:
			d.Outcome = RequestEnded
		case errors.Is(err, idem.ErrFingerprintMismatch):
			d.Outcome = Mismatch
		case errors.Is(err, idem.ErrInvalidKey):
			d.Outcome = InvalidKey
		default:
			d.Outcome = Unavailable
			d.RetryAfter = e.retryAfter
			var unavailable *idem.UnavailableError
			if errors.As(err, &unavailable) && unavailable.RetryAfter > 0 {
				d.RetryAfter = unavailable.RetryAfter
			}
		}
		return d
	}
	switch claim.Status {
	case idem.Acquired:
		return Decision{Outcome: Run, Claim: claim, tx: tx}
	case idem.Completed:
		return Decision{Outcome: Replay, Claim: claim}
	case idem.InFlight:
		return Decision{Outcome: InFlight, Claim: claim, RetryAfter: e.inFlightRetry(claim.LeaseEnd)}
	}
	return Decision{Outcome: Unavailable, Claim: claim, RetryAfter: e.retryAfter,
		Err: fmt.Errorf("engine: store returned an unknown claim status %v", claim.Status)}
}

// inFlightRetry is the retry hint of a duplicate whose holder's lease ends
// at leaseEnd: how long this engine's work typically runs, else the wait a
// retry would be granted, never longer than the lease has left (a retry
// then takes the key over), nor shorter than MinRetryAfter. The lease end
// is on the store's clock: clamped to the lease, so that a skewed clock
// cannot produce an absurd delay. With no lease end known (a claim in a
// transaction still open), Options.RetryAfter.
func (e *Engine) inFlightRetry(leaseEnd time.Time) time.Duration {
	if leaseEnd.IsZero() {
		return e.retryAfter
	}
	left := min(max(time.Until(leaseEnd), MinRetryAfter), e.lease)
	hint := cmp.Or(time.Duration(e.typicalRun.Load()), e.wait, left)
	return min(max(hint, MinRetryAfter), left)
}

// recordRun adds the run time of a recorded result to the typical run
// time: a moving average that weighs the last run an eighth. Two runs
// recorded at once may lose one's update, which a hint can afford.
func (e *Engine) recordRun(ran time.Duration) {
	old := e.typicalRun.Load()
	if old == 0 {
		e.typicalRun.Store(max(int64(ran), 1))
		return
	}
	e.typicalRun.Store(max(old+(int64(ran)-old)/8, 1))
}

// CacheClaimer is an optional interface of an [idem.Store] that can answer
// some claims from memory, without I/O, such as pgstore's replay cache. The
// engine asks it first, so that a replay served from memory does not set up
// the store timeout (a context with a timer, registered with the client's
// context): that took about 3% of the CPU of idembench's replay mode
// (pprof, 16 clients). A store that implements it must answer exactly as
// its Claim would have at that moment; one that does not loses nothing but
// that saving.
type CacheClaimer interface {
	// ClaimFromCache answers req as the store's Claim would, or reports
	// ok false when it cannot without I/O.
	ClaimFromCache(req idem.ClaimRequest) (c idem.Claim, ok bool, err error)
}

// sendTimer notes when each claim is sent: the lease of the claim that
// acquires starts after that moment, on the store's clock.
type sendTimer struct {
	idem.Store
	sent *time.Time
}

func (s sendTimer) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	*s.sent = time.Now()
	return s.Store.Claim(ctx, req)
}

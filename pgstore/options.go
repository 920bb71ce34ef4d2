package pgstore

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
)

// DefaultRetention is the retention of a store whose Options.Retention is
// zero.
const DefaultRetention = 24 * time.Hour

// DefaultPollInterval is the polling fallback of Wait when
// Options.PollInterval is zero.
const DefaultPollInterval = time.Second

// DefaultHeartbeat is how often the LISTEN connection proves it still hears
// when Options.Heartbeat is zero.
const DefaultHeartbeat = 10 * time.Second

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
	// SweepInterval is the mean pause between the rounds of the sweeper the
	// store runs from [New] until [Store.Close]: an [idem.Sweeper] that
	// removes abandoned claims and expired results, needed for disk, never
	// for correctness. Every instance runs one; they skip each other's
	// rows. Zero means [idem.DefaultSweepInterval]; negative means no
	// sweeper, for a service that sweeps elsewhere (idem sweep, a cron
	// job, an idem.Sweeper of its own with OnSweep for metrics).
	SweepInterval time.Duration
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
	// A read-only AccessMode is refused: the claim is an INSERT.
	TxOptions pgx.TxOptions
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
	case o.TxOptions.AccessMode == pgx.ReadOnly:
		return errors.New("pgstore: Options.TxOptions.AccessMode is read only: BeginClaim inserts the claim in the transaction, so every claim would fail")
	case o.NoListen && o.ReplayCacheBytes > 0:
		return errors.New("pgstore: Options.ReplayCacheBytes needs LISTEN (the cache hears other instances' Forget): set it to 0 with NoListen")
	}
	return nil
}

// withDefaults returns o with every zero field that has a default set to
// it (Table is resolved by pgschema.ObjectsFor).
func (o Options) withDefaults() Options {
	o.Lease = cmp.Or(o.Lease, idem.DefaultLease)
	o.Retention = cmp.Or(o.Retention, DefaultRetention)
	o.PollInterval = cmp.Or(o.PollInterval, DefaultPollInterval)
	o.Heartbeat = cmp.Or(o.Heartbeat, DefaultHeartbeat)
	o.SweepInterval = cmp.Or(o.SweepInterval, idem.DefaultSweepInterval)
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgschema"
)

// NewAt is New with now as the clock of every statement instead of the
// database's.
func NewAt(pool *pgxpool.Pool, opts Options, now func() time.Time) (*Store, error) {
	return newStore(pool, opts, now)
}

// SetWaitBlocked installs a hook called when Wait has seen a live claim and
// blocks: from then on only a notification, the lease end, the poll
// interval or ctx can end the wait.
func SetWaitBlocked(s *Store, f func()) { s.waitBlocked = f }

// SetWaitPolled installs a hook called when Wait, not listening, has seen a
// live claim and pauses before looking again.
func SetWaitPolled(s *Store, f func()) { s.waitPolled = f }

// SetTxEndWaits installs a hook called when a claim's Commit or Rollback
// waits for a statement of the work in progress.
func SetTxEndWaits(s *Store, f func()) { s.txEndWaits = f }

// ChannelSQL is the SQL expression of the store's LISTEN channel.
func ChannelSQL(s *Store) string { return s.sql.channel.sql }

// PayloadSQL is the SQL expression of a row's NOTIFY payload, over columns
// scope and key.
var PayloadSQL = pgschema.NotifyPayloadSQL("scope", "key")

// NotifyPayload is the Go side of PayloadSQL.
func NotifyPayload(scope string, key idem.Key) string {
	return pgschema.NotifyPayload(scope, key.String())
}

// CacheReady starts the listener the replay cache follows and waits until
// its LISTEN is in effect: from then on replays are cached.
func CacheReady(ctx context.Context, s *Store) error {
	s.listener.start()
	s.listener.mu.Lock()
	ready := s.listener.ready
	s.listener.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CacheLen is the number of results in the replay cache.
func CacheLen(s *Store) int { return s.cache.len() }

// SetCacheInvalidated installs a hook called after the replay cache handled
// a notification.
// A nil f removes it.
func SetCacheInvalidated(s *Store, f func(payload string)) {
	if f == nil {
		s.cacheInvalidated.Store(nil)
		return
	}
	s.cacheInvalidated.Store(&f)
}

// SetCacheDropped installs a hook called after the replay cache dropped
// everything because the LISTEN connection was lost.
func SetCacheDropped(s *Store, f func()) { s.cacheDropped.Store(&f) }

// SweepSQL is the store's sweep statement for a batch of batch rows ($1 is
// the test clock).
func SweepSQL(s *Store, batch int) string {
	sweep, err := s.sql.sweepFor(batch)
	if err != nil {
		panic(err)
	}
	return sweep.sql
}

// Heartbeats is the number of heartbeats the store's LISTEN connections
// heard back.
func Heartbeats(s *Store) int {
	s.listener.mu.Lock()
	defer s.listener.mu.Unlock()
	return s.listener.heartbeats
}

// Statement is one statement of sql/ as a store renders it, with the Go
// values it is bound to: the arguments of zero parameters and the scan
// targets of a zero row (none for a statement whose rows are not read).
type Statement struct {
	// File is the file's name without .sql; Variant says what varies in
	// the data it was rendered with ("" for the file as New renders it
	// first, ".Large" for complete.sql's variant for a large body).
	File, Variant, SQL string
	Args, Targets      []any
	// OIDs are the parameter types the statement's sender declares itself
	// (the large-body completion's); nil when pgx chooses.
	OIDs []uint32
}

// Statements are every statement of sql/ rendered for table, as New
// renders them.
func Statements(table string) ([]Statement, error) {
	o, err := pgschema.ObjectsFor(table)
	if err != nil {
		return nil, err
	}
	st, err := buildStatements(o)
	if err != nil {
		return nil, err
	}
	var all []Statement
	add := func(file, variant string, q statement) {
		args, targets := q.binding()
		s := Statement{File: file, Variant: variant, SQL: q.text(), Args: args, Targets: targets}
		switch q {
		case statement(&st.completeLarge):
			s.OIDs = completeLargeOIDs[:]
		case statement(&st.txCompleteLarge), statement(&st.txTakeoverLarge):
			s.OIDs = txCompleteLargeOIDs[:]
		}
		all = append(all, s)
	}
	for _, f := range st.files() {
		add(f.name, "", f.dst)
		for _, v := range f.variants {
			add(f.name, v.name, v.dst)
		}
	}
	return all, nil
}

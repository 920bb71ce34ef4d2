package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgschema"
)

// Inspect returns the entry of (scope, key) as stored, whatever its state:
// a claim whose lease ran out and a result past retention are reported as
// they are (see LeaseEnd and ExpiresAt), until swept. It is for operators.
func (s *Store) Inspect(ctx context.Context, scope string, key idem.Key) (idem.Entry, bool, error) {
	if err := (idem.ClaimRequest{Scope: scope, Key: key}).Validate(); err != nil {
		return idem.Entry{}, false, err
	}
	var r inspectRow
	err := retrying(ctx, func() (err error) {
		r, err = s.sql.inspect.query(ctx, s.pool, keyParams{scope: []byte(scope), key: key.String()})
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return idem.Entry{}, false, nil
	}
	if err != nil {
		return idem.Entry{}, false, unavailable("inspect", err)
	}
	e := idem.Entry{Generation: r.generation, Fingerprint: r.fingerprint, Owner: r.owner, CreatedAt: r.createdAt,
		LeaseEnd: orZero(r.leaseEnd), CompletedAt: orZero(r.completedAt), ExpiresAt: orZero(r.expiresAt),
		Labels: r.labels.labels()}
	switch r.state {
	case "claimed":
		e.State = idem.StateClaimed
	case "completed":
		e.State = idem.StateCompleted
		if e.Result, err = r.result.result(); err != nil {
			return idem.Entry{}, false, unavailable("inspect", err)
		}
	}
	return e, true, nil
}

// Forget deletes (scope, key) whatever its state, as an operator's forget
// does, and reports whether it was present. A live claim (lease not run
// out) is refused with [idem.ErrLiveClaim] unless force is set: its holder is
// presumably still executing, and forgetting it would let a retry run the
// side effect a second time. The holder's token becomes stale.
func (s *Store) Forget(ctx context.Context, scope string, key idem.Key, force bool) (bool, error) {
	return s.forget(ctx, scope, key, 0, force)
}

// ForgetGeneration is [Store.Forget] fenced by generation: it deletes
// (scope, key) only while the key holds generation, the one an operator was
// shown ([Store.Inspect]'s Entry.Generation), so that what is deleted is
// what was looked at. A key that holds another generation by then (it was
// forgotten, swept, taken over or claimed again since) is left alone, with
// an [*idem.StaleClaimError] whose Current is the generation it holds; an
// absent key reports false and no error. A generation of zero means any,
// as Forget.
func (s *Store) ForgetGeneration(ctx context.Context, scope string, key idem.Key, generation int64, force bool) (bool, error) {
	if generation < 0 {
		return false, fmt.Errorf("pgstore: forget: generation %d is negative", generation)
	}
	return s.forget(ctx, scope, key, generation, force)
}

func (s *Store) forget(ctx context.Context, scope string, key idem.Key, generation int64, force bool) (bool, error) {
	if err := (idem.ClaimRequest{Scope: scope, Key: key}).Validate(); err != nil {
		return false, err
	}
	forget := s.sql.forget
	if s.listener.off {
		forget = s.sql.forgetQuiet
	}
	var r forgetRow
	err := retrying(ctx, func() (err error) {
		r, err = forget.query(ctx, s.pool, forgetParams{scope: []byte(scope), key: key.String(), force: force, now: s.nowArg(), generation: generation})
		return err
	})
	if err != nil {
		return false, unavailable("forget", err)
	}
	if r.deleted > 0 && s.cache != nil {
		// This instance's own cache forgets at once; the others when
		// the NOTIFY reaches them.
		s.cache.invalidate(pgschema.NotifyPayload(scope, key.String()))
	}
	switch {
	case r.deleted > 0:
		return true, nil
	case r.current == nil:
		return false, nil
	case generation != 0 && *r.current != generation:
		return false, staleErr(idem.Token{Scope: scope, Key: key, Generation: generation}, r.current)
	}
	return false, idem.ErrLiveClaim
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
	var r statsRow
	err := retrying(ctx, func() (err error) {
		r, err = s.sql.stats.query(ctx, s.pool, clockParams{s.nowArg()})
		return err
	})
	if err != nil {
		return Stats{}, unavailable("stats", err)
	}
	return Stats{Claimed: r.claimed, Abandoned: r.abandoned, Completed: r.completed, Expired: r.expired,
		OldestClaim: orZero(r.oldestClaim), OldestAbandoned: orZero(r.oldestAbandoned), TableBytes: r.tableBytes}, nil
}

// KeyStatus is a key's state as an operator sees it: a claim is live or
// abandoned, a result completed or expired, on the database clock.
type KeyStatus string

// The statuses of a listed key, the categories of [Stats].
const (
	// KeyLive is a claim whose lease has not run out: its holder is
	// presumably running.
	KeyLive KeyStatus = "live"
	// KeyAbandoned is a claim whose lease ran out: a retry takes it over,
	// the next sweep releases it.
	KeyAbandoned KeyStatus = "abandoned"
	// KeyCompleted is a recorded result within retention: a retry replays
	// it.
	KeyCompleted KeyStatus = "completed"
	// KeyExpired is a result past retention: absent to a claim, deleted by
	// the next sweep.
	KeyExpired KeyStatus = "expired"
)

// ParseKeyStatus returns the status named s ("live", "abandoned",
// "completed" or "expired").
func ParseKeyStatus(s string) (KeyStatus, error) {
	switch st := KeyStatus(s); st {
	case KeyLive, KeyAbandoned, KeyCompleted, KeyExpired:
		return st, nil
	}
	return "", fmt.Errorf("pgstore: unknown key status %q: want live, abandoned, completed or expired", s)
}

// DefaultKeysLimit is how many keys [Store.Keys] lists when
// KeyFilter.Limit is zero; MaxKeysLimit is the most it lists.
const (
	DefaultKeysLimit = 100
	MaxKeysLimit     = 10000
)

// KeyFilter selects the keys [Store.Keys] lists. The zero value selects
// every key.
type KeyFilter struct {
	// Scope, when not nil, selects the keys of this scope only (an empty
	// scope is a scope). Nil means every scope.
	Scope *string
	// KeyPrefix selects the keys whose stored form ([idem.Key.String],
	// such as "key/order-42") starts with it. Empty means every key.
	KeyPrefix string
	// Status selects the keys in this status. Empty means every status.
	Status KeyStatus
	// Key, when not zero, selects this key only, in every scope the
	// other fields select: the rows a client's key has across scopes.
	Key idem.Key
	// Digest, when not empty, selects the key whose [idem.KeyDigest] it
	// is: the key_digest of a log line. It must be 16 lower-case hex
	// digits.
	Digest string
	// Limit is the most keys listed. Zero means [DefaultKeysLimit];
	// negative or more than [MaxKeysLimit] is an error.
	Limit int
}

// ListedKey is one key as [Store.Keys] lists it.
type ListedKey struct {
	// Scope is the key's scope, as stored.
	Scope string
	// Key is the key, as stored.
	Key idem.Key
	// Status is the key's status on the database clock.
	Status KeyStatus
	// Entry is the row, without its result (Entry.Result is zero): use
	// [Store.Inspect] for that. Entry.Labels are the request's labels, as
	// far as recorded.
	Entry idem.Entry
}

// Keys lists the keys f selects, the most recently claimed first (by
// Entry.CreatedAt, then scope and key), for an operator's CLI. It scans
// the table: it is not for a hot path.
func (s *Store) Keys(ctx context.Context, f KeyFilter) ([]ListedKey, error) {
	limit := f.Limit
	switch {
	case limit == 0:
		limit = DefaultKeysLimit
	case limit < 0 || limit > MaxKeysLimit:
		return nil, fmt.Errorf("pgstore: KeyFilter.Limit %d: want 0 to %d", f.Limit, MaxKeysLimit)
	}
	p := keysParams{keyLike: likePrefix(f.KeyPrefix), limit: limit} // scope, status nil: every one
	if f.Scope != nil {
		p.scope = []byte(*f.Scope)
	}
	if f.Status != "" {
		if _, err := ParseKeyStatus(string(f.Status)); err != nil {
			return nil, err
		}
		status := string(f.Status)
		p.status = &status
	}
	if !f.Key.IsZero() {
		key := f.Key.String()
		p.key = &key
	}
	if f.Digest != "" {
		if !idem.IsKeyDigest(f.Digest) {
			return nil, fmt.Errorf("pgstore: KeyFilter.Digest %q: want 16 lower-case hex digits (idem.KeyDigest)", f.Digest)
		}
		p.digest = &f.Digest
	}
	var rows []keysRow
	err := retrying(ctx, func() (err error) {
		p.now = s.nowArg()
		rows, err = s.sql.keys.query(ctx, s.pool, p)
		return err
	})
	if err != nil {
		return nil, unavailable("keys", err)
	}
	var keys []ListedKey
	for _, r := range rows {
		k, err := idem.ParseStoredKey(r.key)
		if err != nil {
			return nil, unavailable("keys", fmt.Errorf("row with key %q: %w", r.key, err))
		}
		e := idem.Entry{State: idem.StateClaimed, Generation: r.generation, Fingerprint: r.fingerprint, Owner: r.owner,
			CreatedAt: r.createdAt, LeaseEnd: orZero(r.leaseEnd), CompletedAt: orZero(r.completedAt), ExpiresAt: orZero(r.expiresAt),
			Labels: r.labels.labels()}
		if r.state == "completed" {
			e.State = idem.StateCompleted
		}
		keys = append(keys, ListedKey{Scope: string(r.scope), Key: k, Status: KeyStatus(r.status), Entry: e})
	}
	return keys, nil
}

// likePrefix is the LIKE pattern matching the strings that start with
// prefix: its wildcards and the escape character escaped.
func likePrefix(prefix string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "%"
}

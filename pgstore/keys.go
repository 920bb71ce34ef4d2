package pgstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

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
	// [Store.Inspect] for that.
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
	var scope, status any // null: every one
	if f.Scope != nil {
		scope = []byte(*f.Scope)
	}
	if f.Status != "" {
		if _, err := ParseKeyStatus(string(f.Status)); err != nil {
			return nil, err
		}
		status = string(f.Status)
	}
	var keys []ListedKey
	err := retrying(ctx, func() error {
		keys = keys[:0]
		rows, err := s.pool.Query(ctx, s.sql.keys, scope, likePrefix(f.KeyPrefix), status, limit, s.nowArg())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				k                              ListedKey
				scope                          []byte
				key, status, state             string
				leaseEnd, completed, expiresAt *time.Time
			)
			if err := rows.Scan(&scope, &key, &status, &state, &k.Entry.Generation, &k.Entry.Fingerprint, &k.Entry.Owner,
				&k.Entry.CreatedAt, &leaseEnd, &completed, &expiresAt); err != nil {
				return err
			}
			if k.Key, err = idem.KeyFromString(key); err != nil {
				return fmt.Errorf("row with key %q: %w", key, err)
			}
			k.Scope, k.Status = string(scope), KeyStatus(status)
			k.Entry.State = idem.StateClaimed
			if state == "completed" {
				k.Entry.State = idem.StateCompleted
			}
			k.Entry.LeaseEnd, k.Entry.CompletedAt, k.Entry.ExpiresAt = orZero(leaseEnd), orZero(completed), orZero(expiresAt)
			keys = append(keys, k)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, unavailable("keys", err)
	}
	return keys, nil
}

// likePrefix is the LIKE pattern matching the strings that start with
// prefix: its wildcards and the escape character escaped.
func likePrefix(prefix string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "%"
}

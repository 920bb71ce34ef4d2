package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgstore"
)

const cacheBytes = 1 << 20

// The engine answers replays from the cache through its CacheClaimer
// interface, which it asserts at run time: a change of ClaimFromCache's
// signature would silently turn the cache's fast path off.
var _ engine.CacheClaimer = (*pgstore.Store)(nil)

// The contract holds with the replay cache on: replays, mismatches and
// retention (on the test clock) behave as without it.
func TestContractWithReplayCache(t *testing.T) {
	idemtest.Run(t, func(t *testing.T, clock *idemtest.Clock) idem.Store {
		pool, _ := migrated(t)
		return newStoreAt(t, pool, clock.Now, pgstore.Options{Retention: idemtest.Retention,
			PollInterval: 50 * time.Millisecond, ReplayCacheBytes: cacheBytes})
	})
}

var cacheResult = idem.Result{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":1}`)}

// complete claims and completes key on s. Nobody waits for the key, so the
// completion sends no notification (TestNotifyOnlyWhenWaited), and an entry
// cached afterwards cannot be dropped by a late one.
func complete(t *testing.T, s *pgstore.Store, key idem.Key) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key, Fingerprint: "fp"})
	if err != nil || c.Status != idem.Acquired {
		t.Fatalf("claim: %v %v", c.Status, err)
	}
	if err := s.Complete(ctx, c.Token, cacheResult); err != nil {
		t.Fatalf("complete: %v", err)
	}
}

// cachedReplay waits until s's cache follows notifications, then replays key
// until the replay is cached. A replay is not cached when a notification
// for the key arrives while it is in flight (here: the completion's own, if
// the LISTEN began before it), so it may take more than one.
func cachedReplay(t *testing.T, s *pgstore.Store, key idem.Key) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := pgstore.CacheReady(ctx, s); err != nil {
		t.Fatalf("waiting for the cache's LISTEN: %v", err)
	}
	for pgstore.CacheLen(s) == 0 {
		if ctx.Err() != nil {
			t.Fatal("replays were never cached")
		}
		wantReplay(t, s, key)
	}
	if n := pgstore.CacheLen(s); n != 1 {
		t.Fatalf("cache holds %d entries after replays of one key, want 1", n)
	}
}

func wantReplay(t *testing.T, s *pgstore.Store, key idem.Key) {
	t.Helper()
	c, err := s.Claim(t.Context(), idem.ClaimRequest{Scope: "s", Key: key, Fingerprint: "fp"})
	if err != nil || c.Status != idem.Completed || !c.Result.Equal(cacheResult) {
		t.Fatalf("claim = %v %+v, %v; want the completed result", c.Status, c.Result, err)
	}
}

func wantAcquired(t *testing.T, s *pgstore.Store, key idem.Key) {
	t.Helper()
	c, err := s.Claim(t.Context(), idem.ClaimRequest{Scope: "s", Key: key, Fingerprint: "fp"})
	if err != nil || c.Status != idem.Acquired {
		t.Fatalf("claim = %v, %v; want acquired", c.Status, err)
	}
}

// deleteBehindBack removes the row without a notification, as no
// operation of the store ever does: from then on only the cache can answer
// a replay.
func deleteBehindBack(t *testing.T, pool *pgxpool.Pool, key idem.Key) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `DELETE FROM idem_keys WHERE key = $1`, key.String()); err != nil {
		t.Fatal(err)
	}
}

func TestReplayCache(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	setup := func(t *testing.T) (*pgxpool.Pool, *pgstore.Store) {
		pool, _ := migrated(t)
		return pool, newStore(t, pool, pgstore.Options{ReplayCacheBytes: cacheBytes})
	}

	t.Run("replays from memory", func(t *testing.T) {
		t.Parallel()
		pool, s := setup(t)
		complete(t, s, key("a"))
		cachedReplay(t, s, key("a"))
		deleteBehindBack(t, pool, key("a"))
		wantReplay(t, s, key("a"))
	})

	t.Run("counts its hits", func(t *testing.T) {
		t.Parallel()
		pool, s := setup(t)
		complete(t, s, key("a"))
		cachedReplay(t, s, key("a"))
		before := s.ReplayCacheHits()
		deleteBehindBack(t, pool, key("a"))
		wantReplay(t, s, key("a")) // only the cache can answer this one
		wantReplay(t, s, key("a"))
		if got := s.ReplayCacheHits() - before; got != 2 {
			t.Fatalf("ReplayCacheHits grew by %d over two cached replays, want 2", got)
		}
		wantAcquired(t, s, key("b")) // a miss
		if got := s.ReplayCacheHits() - before; got != 2 {
			t.Fatalf("ReplayCacheHits grew by %d after a miss, want still 2", got)
		}
	})

	t.Run("answers ClaimFromCache from memory alone", func(t *testing.T) {
		t.Parallel()
		pool, s := setup(t)
		req := idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "fp"}
		if _, ok, err := s.ClaimFromCache(req); ok || err != nil {
			t.Fatalf("ClaimFromCache of a key never seen: ok %v, %v; want a miss", ok, err)
		}
		complete(t, s, key("a"))
		cachedReplay(t, s, key("a"))
		deleteBehindBack(t, pool, key("a")) // only memory can answer now
		c, ok, err := s.ClaimFromCache(req)
		if !ok || err != nil || c.Status != idem.Completed || !c.Result.Equal(cacheResult) {
			t.Fatalf("ClaimFromCache of a cached key = %v %+v, ok %v, %v; want the result", c.Status, c.Result, ok, err)
		}
		var me *idem.MismatchError
		if _, ok, err := s.ClaimFromCache(idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "other"}); !ok || !errors.As(err, &me) {
			t.Fatalf("ClaimFromCache with another fingerprint: ok %v, %v; want a *MismatchError", ok, err)
		}
		for name, req := range map[string]idem.ClaimRequest{
			"another key":    {Scope: "s", Key: key("b"), Fingerprint: "fp"},
			"another scope":  {Scope: "t", Key: key("a"), Fingerprint: "fp"},
			"an invalid key": {Scope: "s", Fingerprint: "fp"},
		} {
			if _, ok, err := s.ClaimFromCache(req); ok || err != nil {
				t.Errorf("ClaimFromCache of %s: ok %v, %v; want a miss", name, ok, err)
			}
		}
		uncached := newStore(t, pool, pgstore.Options{})
		if _, ok, err := uncached.ClaimFromCache(req); ok || err != nil {
			t.Errorf("ClaimFromCache without a cache: ok %v, %v; want a miss", ok, err)
		}
	})

	t.Run("checks the fingerprint", func(t *testing.T) {
		t.Parallel()
		pool, s := setup(t)
		complete(t, s, key("a"))
		cachedReplay(t, s, key("a"))
		deleteBehindBack(t, pool, key("a"))
		_, err := s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "other"})
		var me *idem.MismatchError
		if !errors.As(err, &me) || !me.Completed || me.Key != key("a") || me.Scope != "s" {
			t.Fatalf("claim with another fingerprint = %v, want a *MismatchError for a completed key", err)
		}
		// An empty fingerprint matches anything, as in the store.
		c, err := s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key("a")})
		if err != nil || c.Status != idem.Completed {
			t.Fatalf("claim without a fingerprint = %v, %v; want the replay", c.Status, err)
		}
	})

	t.Run("keys in other scopes are not cached ones", func(t *testing.T) {
		t.Parallel()
		_, s := setup(t)
		complete(t, s, key("a"))
		cachedReplay(t, s, key("a"))
		c, err := s.Claim(ctx, idem.ClaimRequest{Scope: "other", Key: key("a"), Fingerprint: "fp"})
		if err != nil || c.Status != idem.Acquired {
			t.Fatalf("claim in another scope = %v, %v; want acquired", c.Status, err)
		}
	})

	t.Run("forget on the same store drops the entry at once", func(t *testing.T) {
		t.Parallel()
		_, s := setup(t)
		complete(t, s, key("a"))
		cachedReplay(t, s, key("a"))
		if ok, err := s.Forget(ctx, "s", key("a"), false); err != nil || !ok {
			t.Fatalf("forget = %v, %v", ok, err)
		}
		wantAcquired(t, s, key("a"))
	})

	t.Run("losing the LISTEN connection drops everything", func(t *testing.T) {
		t.Parallel()
		pool, s := setup(t)
		complete(t, s, key("a"))
		cachedReplay(t, s, key("a"))
		deleteBehindBack(t, pool, key("a"))
		dropped := make(chan struct{}, 1)
		pgstore.SetCacheDropped(s, func() {
			select {
			case dropped <- struct{}{}:
			default:
			}
		})
		var channel string
		if err := pool.QueryRow(ctx, pgstore.ChannelSQL(s)).Scan(&channel); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = 'LISTEN ' || $1`, channel).Scan(&n); err != nil || n != 1 {
			t.Fatalf("terminating the listener: %d backends, %v", n, err)
		}
		<-dropped
		wantAcquired(t, s, key("a"))
	})

	t.Run("a result larger than an eighth of the budget is not cached", func(t *testing.T) {
		t.Parallel()
		pool, _ := migrated(t)
		s := newStore(t, pool, pgstore.Options{ReplayCacheBytes: 8 << 10})
		c, err := s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key("big")})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, c.Token, idem.Result{Status: 200, Body: make([]byte, 2<<10)}); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := pgstore.CacheReady(cctx, s); err != nil {
			t.Fatal(err)
		}
		if c, err := s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key("big")}); err != nil || c.Status != idem.Completed {
			t.Fatalf("replay = %v, %v", c.Status, err)
		}
		if n := pgstore.CacheLen(s); n != 0 {
			t.Fatalf("cache holds %d entries, want 0", n)
		}
	})
}

// With the Now hook, an entry's retention runs on the test clock.
func TestReplayCacheRetentionOnTestClock(t *testing.T) {
	t.Parallel()
	pool, _ := migrated(t)
	clock := idemtest.NewClock()
	s := newStoreAt(t, pool, clock.Now, pgstore.Options{Retention: time.Hour, ReplayCacheBytes: cacheBytes})
	complete(t, s, key("a"))
	cachedReplay(t, s, key("a"))
	deleteBehindBack(t, pool, key("a"))
	clock.Advance(59 * time.Minute)
	wantReplay(t, s, key("a")) // still retained: from the cache
	clock.Advance(time.Minute)
	wantAcquired(t, s, key("a")) // retention over: the cache lets go
}

// An operator's forget on one instance reaches the cache of another, through
// the NOTIFY the other's LISTEN connection delivers.
func TestReplayCacheForgetAcrossInstances(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	poolA, schema := migrated(t)
	poolB := testdb.NewPool(t, testdb.Config(t, schema))
	a := newStore(t, poolA, pgstore.Options{ReplayCacheBytes: cacheBytes})
	b := newStore(t, poolB, pgstore.Options{ReplayCacheBytes: cacheBytes})

	complete(t, a, key("a"))
	cachedReplay(t, b, key("a"))
	wantReplay(t, b, key("a"))

	invalidated := make(chan string, 16)
	pgstore.SetCacheInvalidated(b, func(payload string) { invalidated <- payload })
	if ok, err := a.Forget(ctx, "s", key("a"), false); err != nil || !ok {
		t.Fatalf("forget on instance A = %v, %v", ok, err)
	}
	want := pgstore.NotifyPayload("s", key("a"))
	for p := range invalidated {
		if p == want {
			break
		}
	}
	if n := pgstore.CacheLen(b); n != 0 {
		t.Fatalf("instance B's cache holds %d entries after the forget, want 0", n)
	}
	wantAcquired(t, b, key("a"))
}

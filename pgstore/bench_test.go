package pgstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/pgstore"
)

// Benchmarks need TEST_DATABASE_URL; run them with
//
//	go test -run '^$' -bench . -benchtime 2s ./pgstore/
//
// docs/performance.md records the numbers.

// BenchmarkClaimComplete is the lifecycle of a first request: claim a new
// key, then record its result. Two statements per operation.
func BenchmarkClaimComplete(b *testing.B) {
	ctx := b.Context()
	pool, _ := migrated(b)
	s := newStore(b, pool, pgstore.Options{})
	res := idem.Result{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"inv_123","amount_cents":4200}`)}
	var n atomic.Int64
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			lifecycle(b, ctx, s, key(fmt.Sprint("k", n.Add(1))), res)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				lifecycle(b, ctx, s, key(fmt.Sprint("k", n.Add(1))), res)
			}
		})
	})
}

func lifecycle(b *testing.B, ctx context.Context, s *pgstore.Store, k idem.Key, res idem.Result) {
	c, err := s.Claim(ctx, idem.ClaimRequest{Scope: "bench", Key: k, Fingerprint: "fp"})
	if err != nil || c.Status != idem.Acquired {
		b.Fatalf("claim: %v %v", c.Status, err)
	}
	if err := s.Complete(ctx, c.Token, res); err != nil {
		b.Fatalf("complete: %v", err)
	}
}

// BenchmarkReplay is a retry of a completed request: one claim statement
// that finds the result. "hot" replays one key from every goroutine.
func BenchmarkReplay(b *testing.B) {
	ctx := b.Context()
	pool, _ := migrated(b)
	s := newStore(b, pool, pgstore.Options{})
	res := idem.Result{Status: 201, Body: []byte(`{"id":"inv_123","amount_cents":4200}`)}
	const keys = 1000
	for i := range keys {
		lifecycle(b, ctx, s, key(fmt.Sprint("r", i)), res)
	}
	replay := func(b *testing.B, k idem.Key) {
		c, err := s.Claim(ctx, idem.ClaimRequest{Scope: "bench", Key: k, Fingerprint: "fp"})
		if err != nil || c.Status != idem.Completed {
			b.Fatalf("replay: %v %v", c.Status, err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		i := 0
		for b.Loop() {
			replay(b, key(fmt.Sprint("r", i%keys)))
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		var n atomic.Int64
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				replay(b, key(fmt.Sprint("r", n.Add(1)%keys)))
			}
		})
	})
	b.Run("hot", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				replay(b, key("r0"))
			}
		})
	})
}

// BenchmarkHotKeyInFlight is a burst of duplicates of one request while it
// runs: every goroutine claims the same key and is told it is in flight.
func BenchmarkHotKeyInFlight(b *testing.B) {
	ctx := b.Context()
	pool, _ := migrated(b)
	s := newStore(b, pool, pgstore.Options{})
	if _, err := s.Claim(ctx, idem.ClaimRequest{Scope: "bench", Key: key("hot"), Lease: time.Hour}); err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c, err := s.Claim(ctx, idem.ClaimRequest{Scope: "bench", Key: key("hot")})
			if err != nil || c.Status != idem.InFlight {
				b.Fatalf("claim: %v %v", c.Status, err)
			}
		}
	})
}

// BenchmarkSweepBatch removes one batch of DefaultSweepBatch abandoned
// claims per operation.
func BenchmarkSweepBatch(b *testing.B) {
	ctx := b.Context()
	pool, _ := migrated(b)
	clock := idemtest.NewClock()
	s := newStoreAt(b, pool, clock.Now, pgstore.Options{})
	batch := idem.DefaultSweepBatch
	round := 0
	for b.Loop() {
		b.StopTimer()
		round++
		if _, err := pool.Exec(ctx, `
			INSERT INTO idem_keys (scope, key, generation, state, lease_end, created_at)
			SELECT 'bench'::bytea, 'id/' || $3::int || '-' || i, nextval('idem_keys_generation_seq'), 'claimed', $1, $1
			  FROM generate_series(1, $2) i`, clock.Now(), batch, round); err != nil {
			b.Fatal(err)
		}
		clock.Advance(time.Second)
		b.StartTimer()
		st, err := s.Sweep(ctx, batch)
		if err != nil || st.Abandoned != batch {
			b.Fatalf("sweep = %+v, %v", st, err)
		}
	}
	b.ReportMetric(float64(batch)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkBaselineSelect1 is one round trip doing nothing, on the same
// pool: the floor the other benchmarks compare with.
func BenchmarkBaselineSelect1(b *testing.B) {
	ctx := b.Context()
	pool, _ := migrated(b)
	var one int
	for b.Loop() {
		if err := pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
			b.Fatal(err)
		}
	}
}

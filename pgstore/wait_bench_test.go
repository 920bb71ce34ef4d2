package pgstore_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgstore"
)

// BenchmarkWaitWake measures what a duplicate pays to learn that its
// original finished: the time from the holder's Complete to the waiter's
// ClaimWait returning the result, with LISTEN and with NoListen (polling
// with a doubling pause from 10ms up to PollInterval, here the default 1s),
// for originals that hold the key for various times. The holder and the
// waiter are separate stores on separate pools (two instances). Reported:
// p50-ms and max-ms of that delay. Run it with -benchtime=Nx: each
// iteration takes the hold time.
//
//	go test -run '^$' -bench BenchmarkWaitWake -benchtime 20x ./pgstore/
func BenchmarkWaitWake(b *testing.B) {
	for _, mode := range []string{"listen", "poll"} {
		for _, hold := range []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second} {
			b.Run(fmt.Sprintf("%s/hold=%v", mode, hold), func(b *testing.B) {
				ctx := b.Context()
				pool, schema := migrated(b)
				holder := newStore(b, pool, pgstore.Options{})
				waiter := newStore(b, testdb.NewPool(b, testdb.Config(b, schema)), pgstore.Options{NoListen: mode == "poll"})
				if mode == "listen" {
					if err := pgstore.CacheReady(ctx, waiter); err != nil {
						b.Fatal(err)
					}
				}
				delays := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for i := range b.N {
					k := key(fmt.Sprint("k", i))
					c, err := holder.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: k, Lease: time.Minute})
					if err != nil || c.Status != idem.Acquired {
						b.Fatalf("claim: %v %v", c.Status, err)
					}
					done := make(chan time.Time, 1)
					go func() {
						w, err := idem.ClaimWait(ctx, waiter, idem.ClaimRequest{Scope: "s", Key: k}, time.Minute)
						if err != nil || w.Status != idem.Completed {
							b.Errorf("ClaimWait: %v %v", w.Status, err)
						}
						done <- time.Now()
					}()
					time.Sleep(hold)
					completed := time.Now()
					if err := holder.Complete(ctx, c.Token, idem.Result{Status: 201}); err != nil {
						b.Fatal(err)
					}
					delays = append(delays, (<-done).Sub(completed))
				}
				b.StopTimer()
				slices.Sort(delays)
				b.ReportMetric(float64(delays[len(delays)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(delays[len(delays)-1].Microseconds())/1000, "max-ms")
			})
		}
	}
}

package pgstore

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pause"
)

// Sweep implements [idem.Store]: one statement deletes up to limit rows
// (limit <= 0 means [idem.DefaultSweepBatch]), abandoned claims first, locking
// them with FOR UPDATE SKIP LOCKED so that sweepers running at once in
// several instances never wait for each other nor delete a row twice.
func (s *Store) Sweep(ctx context.Context, limit int) (idem.SweepStats, error) {
	if limit <= 0 {
		limit = idem.DefaultSweepBatch
	}
	sweep, err := s.sql.sweepFor(limit)
	if err != nil {
		return idem.SweepStats{}, err
	}
	var r sweepRow
	err = retrying(ctx, func() (err error) {
		r, err = sweep.query(ctx, s.pool, clockParams{s.nowArg()})
		return err
	})
	if err != nil {
		return idem.SweepStats{}, unavailable("sweep", err)
	}
	return idem.SweepStats{Abandoned: r.abandoned, Expired: r.expired}, nil
}

// startSweeper runs an [idem.Sweeper] over s, with the given mean
// interval, batches of [idem.DefaultSweepBatch] and the store's Logger, on
// a goroutine of its own until [Store.Close] stops it. The first round
// waits a pause too: a store is made as its process starts, and instances
// started together should not sweep in step.
func (s *Store) startSweeper(interval time.Duration) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.stopSweeper = func() {
		stop()
		<-done
	}
	sw := idem.Sweeper{Store: s, Interval: interval, Batch: idem.DefaultSweepBatch, Logger: s.log}
	go func() {
		defer close(done)
		if pause.For(ctx, interval/2+rand.N(interval)) {
			_ = sw.Run(ctx) // sw is valid: its one error
		}
	}()
}

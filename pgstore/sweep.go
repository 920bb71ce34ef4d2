package pgstore

import (
	"context"
	"time"

	"github.com/idemkit/idem"
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

// Run is shorthand for an [idem.Sweeper] over s with the given interval
// (zero means [idem.DefaultSweepInterval], negative is an error), batches of
// [idem.DefaultSweepBatch] and the store's Logger: it sweeps at once and then
// every interval ±50% until ctx is done, then returns nil. Run it in every
// instance: sweepers skip each other's rows.
func (s *Store) Run(ctx context.Context, interval time.Duration) error {
	return idem.Sweeper{Store: s, Interval: interval, Batch: idem.DefaultSweepBatch, Logger: s.log}.Run(ctx)
}

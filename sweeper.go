package idem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"
)

const (
	// DefaultSweepInterval is the pause between a [Sweeper]'s rounds when
	// [Sweeper.Interval] is zero.
	DefaultSweepInterval = time.Minute

	// DefaultSweepBatch is the most entries one [Store.Sweep] call of a
	// [Sweeper] removes when [Sweeper.Batch] is zero.
	DefaultSweepBatch = 1000
)

// Sweeper removes abandoned claims and expired results from a [Store] at
// intervals: the one sweep loop of this module, used by the stores' Run
// methods, the idem CLI and the demo. Run one in every instance; the stores'
// Sweep is safe to run concurrently (pgstore's sweepers skip each other's
// rows).
//
// A Sweeper is needed for memory and disk, never for correctness: a claim
// whose lease ran out can be taken over and a result past retention is
// absent to a claim whether or not it was swept.
//
// Its zero value is not usable: Store must be set. The other fields' zero
// values mean the documented defaults.
type Sweeper struct {
	// Store is the store to sweep. Required.
	Store Store

	// Interval is the mean pause between rounds. Each pause is drawn at
	// random from [Interval/2, 3·Interval/2) so that instances started
	// together do not sweep in step. Zero means [DefaultSweepInterval];
	// negative is an error.
	Interval time.Duration

	// Batch is the most entries one Store.Sweep call removes. A round calls
	// Sweep until a batch comes back short of Batch, so a backlog is cleared
	// in one round without holding locks on all of it at once. Zero means
	// [DefaultSweepBatch]; negative is an error.
	Batch int

	// Logger receives a line at Info for each round that removed anything
	// and at Warn for each failed round. Nil means discard.
	Logger *slog.Logger

	// OnSweep, if not nil, is called after every round with what the round
	// removed (zero included, and what was removed before an error cut the
	// round short), for metrics:
	// [github.com/idemkit/idem/idemotel.Observer.Swept] fits it.
	OnSweep func(context.Context, SweepStats)
}

// withDefaults returns s with every zero field replaced by its default.
func (s Sweeper) withDefaults() Sweeper {
	if s.Interval == 0 {
		s.Interval = DefaultSweepInterval
	}
	if s.Batch == 0 {
		s.Batch = DefaultSweepBatch
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return s
}

// validate names the first field that is wrong.
func (s Sweeper) validate() error {
	switch {
	case s.Store == nil:
		return errors.New("idem: Sweeper.Store is nil")
	case s.Interval < 0:
		return fmt.Errorf("idem: Sweeper.Interval %v is negative", s.Interval)
	case s.Batch < 0:
		return fmt.Errorf("idem: Sweeper.Batch %d is negative", s.Batch)
	}
	return nil
}

// Run sweeps one round at once, then one round after every pause (see
// [Sweeper.Interval]), until ctx is done; then it returns nil, since a
// cancelled ctx is how a caller stops it. A failed round is logged and
// retried at the next one, so Run returns an error only for an invalid
// Sweeper, at once. It starts no goroutine: run it in one of yours.
func (s Sweeper) Run(ctx context.Context) error {
	if err := s.validate(); err != nil {
		return err
	}
	s = s.withDefaults()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		st, err := s.round(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.Logger.Warn("sweep failed; retrying at the next interval", "err", err)
		case st.Abandoned+st.Expired > 0:
			s.Logger.Info("swept", "abandoned", st.Abandoned, "expired", st.Expired)
		}
		timer.Reset(s.Interval/2 + rand.N(s.Interval))
	}
}

// SweepOnce runs one round: it calls Store.Sweep with [Sweeper.Batch] until
// a batch comes back short, and returns the total removed. On an error it
// returns what was removed before it, with the error.
func (s Sweeper) SweepOnce(ctx context.Context) (SweepStats, error) {
	if err := s.validate(); err != nil {
		return SweepStats{}, err
	}
	return s.withDefaults().round(ctx)
}

// round is SweepOnce on a validated Sweeper with defaults applied.
func (s Sweeper) round(ctx context.Context) (SweepStats, error) {
	var total SweepStats
	var err error
	for {
		var st SweepStats
		st, err = s.Store.Sweep(ctx, s.Batch)
		if err != nil {
			break
		}
		total.Abandoned += st.Abandoned
		total.Expired += st.Expired
		if st.Abandoned+st.Expired < s.Batch {
			break
		}
	}
	if s.OnSweep != nil {
		s.OnSweep(ctx, total)
	}
	return total, err
}

package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgschema"
)

// firstPollDelay is a polling wait's first pause; each next pause doubles,
// up to the poll interval.
const firstPollDelay = 10 * time.Millisecond

// Wait implements [idem.Store]. It returns at once if the key is no longer
// held by a live claim. Otherwise, while the LISTEN connection is in effect,
// it blocks until a completion or release of the key is notified (from any
// instance), the holder's lease runs out, the poll interval passes, or ctx
// is done. While it is not (connecting, reconnecting, deaf, or NoListen), it
// polls the key with a doubling pause, from 10ms up to the poll interval,
// until the key is no longer held by a live claim or ctx is done; if the
// LISTEN comes up meanwhile, it switches to waiting for notifications.
func (s *Store) Wait(ctx context.Context, scope string, key idem.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := (idem.ClaimRequest{Scope: scope, Key: key}).Validate(); err != nil {
		return err
	}
	ch, ready, unsubscribe := s.listener.subscribe(pgschema.NotifyPayload(scope, key.String()))
	defer unsubscribe()

	pause := min(firstPollDelay, s.poll)
	for {
		// Look at the key only once the listener is up, so that a
		// completion between our look and the notification cannot be
		// missed; before that, each look is a poll.
		listening := isClosed(ready)
		left, live, err := s.leaseLeft(ctx, scope, key, listening)
		if err != nil || !live {
			return err
		}
		timeout := s.poll
		if !listening {
			timeout = pause
			pause = min(2*pause, s.poll)
		}
		// Under the Now test hook the lease runs out on the test's clock,
		// not the wall clock; the poll interval covers it.
		if s.now == nil && left < timeout {
			timeout = left
		}
		switch {
		case listening && s.waitBlocked != nil:
			s.waitBlocked()
		case !listening && s.waitPolled != nil:
			s.waitPolled()
		}
		comesUp := ready
		if listening {
			comesUp = nil
		}
		timer := time.NewTimer(timeout)
		select {
		case <-ch:
			timer.Stop()
			return nil
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
			if listening {
				return nil
			}
		case <-comesUp:
			// The LISTEN came up while polling: look again, then block.
			timer.Stop()
		}
	}
}

// isClosed reports whether ch is closed; a nil ch is not.
func isClosed(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// leaseLeft is Wait's look at the key: whether it is held by a live claim,
// and for how much longer. listening says whether Wait will then block on a
// notification, or poll. It tells the listener which channel the
// statements use, so that a LISTEN on a dropped table's channel is replaced.
func (s *Store) leaseLeft(ctx context.Context, scope string, key idem.Key, listening bool) (left time.Duration, live bool, err error) {
	check := s.sql.pollCheck
	if listening {
		check = s.sql.waitCheck
	}
	var r lookRow
	err = retrying(ctx, func() (err error) {
		r, err = check.query(ctx, s.pool, lookParams{scope: []byte(scope), key: key.String(), now: s.nowArg()})
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, false, ctx.Err()
		}
		return 0, false, unavailable("wait", err)
	}
	s.listener.follow(r.channel)
	if r.remaining == nil {
		return 0, false, nil
	}
	return time.Duration(*r.remaining) * time.Microsecond, true, nil
}

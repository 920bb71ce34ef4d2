//go:build idem_mutant

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/adapter"
	"github.com/idemkit/idem/pgstore"
)

// The deliberately broken variants the harness must catch (-mutant). Each
// breaks one rule the promise rests on; none exists in a build without the
// idem_mutant tag.
const (
	// mutantUnfencedComplete completes a key whatever generation holds
	// it: a stale owner's result is recorded over its successor's.
	mutantUnfencedComplete = "unfenced-complete"
	// mutantClaimThenCheck claims with two statements, a look and then a
	// write that does not look again: two requests that both saw the key
	// absent both run.
	mutantClaimThenCheck = "claim-then-check"
	// mutantReleaseAfterAnswer releases the key of work whose lease was
	// lost, or that Shutdown cut off, although its adapter saw a whole
	// answer (engine.MutantReleaseAfterAnswer).
	mutantReleaseAfterAnswer = "release-after-answer"
	// mutantHeldStatusEscapes lets a second status of a handler on the
	// one-commit path through to the client while its answer is held
	// (adapter.MutantHeldStatusEscapes).
	mutantHeldStatusEscapes = "held-status-escapes"
)

func enableMutant(name string) error {
	switch name {
	case "", mutantUnfencedComplete, mutantClaimThenCheck:
		return nil
	case mutantReleaseAfterAnswer:
		engine.MutantReleaseAfterAnswer = true
		return nil
	case mutantHeldStatusEscapes:
		adapter.MutantHeldStatusEscapes = true
		return nil
	}
	return fmt.Errorf("unknown -mutant %q", name)
}

func wrapMutant(name string, pg *pgstore.Store) idem.Store {
	switch name {
	case mutantUnfencedComplete:
		return unfencedComplete{pg}
	case mutantClaimThenCheck:
		return claimThenCheck{pg}
	}
	return pg
}

// unfencedComplete is a store whose completion ignores the generation: a
// completion that pgstore refuses as stale is written over whatever holds
// the key now (another owner's claim, or its recorded result).
type unfencedComplete struct{ *pgstore.Store }

func (s unfencedComplete) Complete(ctx context.Context, tok idem.Token, res idem.Result) error {
	err := s.Store.Complete(ctx, tok, res)
	if !errors.Is(err, idem.ErrStaleClaim) {
		return err
	}
	e, ok, ierr := s.Inspect(ctx, tok.Scope, tok.Key)
	if ierr != nil || !ok {
		return err
	}
	switch e.State {
	case idem.StateClaimed:
		return s.Store.Complete(ctx, idem.Token{Scope: tok.Scope, Key: tok.Key, Generation: e.Generation}, res)
	case idem.StateCompleted:
		if _, ferr := s.Forget(ctx, tok.Scope, tok.Key, true); ferr != nil {
			return err
		}
		c, cerr := s.Store.Claim(ctx, idem.ClaimRequest{Scope: tok.Scope, Key: tok.Key, Fingerprint: e.Fingerprint, Lease: time.Minute})
		if cerr != nil || c.Status != idem.Acquired {
			return err
		}
		return s.Store.Complete(ctx, c.Token, res)
	}
	return err
}

// claimThenCheck is a store whose claim is a look followed by a write: when
// the look finds the key absent, the write takes the key without looking
// again, over whatever another request put there in between.
type claimThenCheck struct{ *pgstore.Store }

// window is the pause between the look and the write: a round trip to a
// database across a network.
const window = 5 * time.Millisecond

func (s claimThenCheck) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	_, present, err := s.Inspect(ctx, req.Scope, req.Key)
	if err != nil || present {
		return s.Store.Claim(ctx, req)
	}
	time.Sleep(window)
	c, err := s.Store.Claim(ctx, req)
	if err != nil || c.Status == idem.Acquired {
		return c, err
	}
	if _, err := s.Forget(ctx, req.Scope, req.Key, true); err != nil {
		return c, nil
	}
	return s.Store.Claim(ctx, req)
}

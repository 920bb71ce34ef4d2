package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/jsonb"
)

// Complete implements [idem.Store] in one statement (sql/complete.sql), which
// notifies waiters; a stale token takes a second, which raises the
// stale-claim error (sql/stale.sql).
func (s *Store) Complete(ctx context.Context, tok idem.Token, res idem.Result) error {
	return retrying(ctx, func() error { return s.complete(ctx, s.pool, "complete", tok, res) })
}

// CompleteTx records res for tok's claim inside the caller's transaction tx,
// so that the caller's business writes and the recorded result commit
// together or not at all.
//
// If tok's generation no longer holds the key (its lease ran out and another
// caller took the key over, or it was swept or forgotten), CompleteTx returns
// a [*idem.StaleClaimError], raised in tx by a second statement
// (sql/stale.sql), whose error aborts tx: PostgreSQL refuses to commit it,
// so the business writes of an owner that lost its claim are rolled back
// too. A caller must roll back after any error.
//
// The key stays claimed until tx commits; waiters are notified at commit.
// If tx rolls back, the claim is still held (and its lease still runs), so
// the caller may retry or Release. tx must be a transaction on the database
// holding the store's table; see the package documentation for the limits.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, tok idem.Token, res idem.Result) error {
	if tx == nil {
		return errors.New("pgstore: CompleteTx: nil transaction")
	}
	return s.complete(ctx, tx, "complete", tok, res)
}

func (s *Store) complete(ctx context.Context, db execer, op string, tok idem.Token, res idem.Result) error {
	if err := (idem.ClaimRequest{Scope: tok.Scope, Key: tok.Key}).Validate(); err != nil {
		return err
	}
	var (
		tag pgconn.CommandTag
		err error
	)
	if len(res.Body) < largeBody {
		// The whole result as JSON, sent as text so that no query exec
		// mode sends it as bytea (see sql/complete.sql).
		var js []byte
		if js, err = res.MarshalJSON(); err != nil {
			return fmt.Errorf("pgstore: encoding result: %w", err)
		}
		tag, err = s.sql.complete.exec(ctx, db, s.completeParams(tok, []byte(tok.Scope), string(js)))
	} else {
		// The body as its own parameter, the JSON built around it in SQL
		// (see sql/complete.sql, .Large): for a large body each copy counts.
		body := res.Body
		res.Body = nil
		var meta []byte
		if meta, err = res.MarshalJSON(); err != nil {
			return fmt.Errorf("pgstore: encoding result: %w", err)
		}
		tag, err = execLarge(ctx, db, s.sql.completeLarge, completeLargeParams{s.completeParams(tok, []byte(tok.Scope), string(meta)), body, jsonb.IsText(body)})
	}
	switch {
	case err != nil:
		return unavailable(op, err)
	case tag.RowsAffected() == 0:
		return s.stale(ctx, db, op, tok)
	}
	return nil
}

// completeParams are sql/complete.sql's parameters for tok, whose scope's
// bytes are scope, and its result as JSON.
func (s *Store) completeParams(tok idem.Token, scope []byte, result string) completeParams {
	return completeParams{scope: scope, key: tok.Key.String(), generation: tok.Generation, result: result,
		retentionMicros: s.retentionMicros(), now: s.nowArg()}
}

// staleTimeout bounds the statement that raises the stale-claim error.
const staleTimeout = 5 * time.Second

// stale sends sql/stale.sql for tok, which the completion statement found
// no longer holding its key: the statement raises the stale-claim error,
// which inside a caller's transaction aborts it. It is sent even if ctx
// ended meanwhile (within staleTimeout): a transaction whose completion
// failed must not be left able to commit, and if the statement cannot run
// either, pgx closes the connection, which ends the transaction too.
func (s *Store) stale(ctx context.Context, db execer, op string, tok idem.Token) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), staleTimeout)
	defer cancel()
	// Not prepared: the statement is rare, and pgx would prepare it
	// again after each error it raises (an extra round trip).
	_, err := s.sql.stale.execUnprepared(sctx, db, tokenParamsOf(tok))
	if se, ok := staleFrom(err, tok); ok {
		return se
	}
	if err == nil {
		err = errors.New("the stale-claim function returned without raising")
	}
	return unavailable(op, err)
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/integration/robustness/wire"
)

// eventLog writes wire.Records to stdout, one write(2) per line, so that a
// line written before a SIGKILL reaches the harness.
type eventLog struct {
	mu       sync.Mutex
	w        *os.File
	instance string
	pid      int
}

func newEventLog(w *os.File, instance string) *eventLog {
	return &eventLog{w: w, instance: instance, pid: os.Getpid()}
}

func (l *eventLog) write(r wire.Record) {
	if r.T == 0 {
		r.T = time.Now().UnixNano()
	}
	r.Instance, r.PID = l.instance, l.pid
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	b = append(b, '\n')
	l.mu.Lock()
	_, _ = l.w.Write(b)
	l.mu.Unlock()
}

func (l *eventLog) life(what, msg string) {
	l.write(wire.Record{Ev: wire.EvLife, What: what, Msg: msg})
}

func (l *eventLog) sweep(st idem.SweepStats) {
	if st.Abandoned == 0 && st.Expired == 0 {
		return
	}
	l.write(wire.Record{Ev: wire.EvSweep, Abandoned: st.Abandoned, Expired: st.Expired})
}

// event logs an idem.Event of the request whose context is ctx.
func (l *eventLog) event(ctx context.Context, e idem.Event) {
	r := wire.Record{Ev: wire.EvIdem, Attempt: attemptOf(ctx), Key: clientKey(e.Key), What: e.Kind.String(),
		Code: e.Status, Op: e.Op, Takeover: e.Takeover, Adapter: e.Adapter}
	if e.Err != nil {
		r.Err = cause(e.Err)
	}
	l.write(r)
}

// exec logs a phase of an execution.
func (l *eventLog) exec(r wire.Record) {
	r.Ev = wire.EvExec
	l.write(r)
}

// cause names the errors the harness tells apart; others as they print.
func cause(err error) string {
	switch {
	case errors.Is(err, idem.ErrLeaseLost):
		return "lease lost: " + err.Error()
	case errors.Is(err, engine.ErrShutdown):
		return "shutdown: " + err.Error()
	case errors.Is(err, idem.ErrStaleClaim):
		return "stale: " + err.Error()
	}
	return err.Error()
}

// clientKey is the client's key of an idem.Key made by idem.ParseClientKey.
func clientKey(k idem.Key) string {
	return strings.TrimPrefix(k.String(), "key/")
}

// loggingStore logs every store call the engine makes: when it was sent,
// when it returned, and what it answered.
type loggingStore struct {
	inner idem.Store
	log   *eventLog
}

var _ idem.Store = (*loggingStore)(nil)

func (s *loggingStore) record(ctx context.Context, op string, key idem.Key, gen int64, sent time.Time, err error) wire.Record {
	r := wire.Record{Ev: wire.EvStore, Op: op, Attempt: attemptOf(ctx), Key: clientKey(key), Gen: gen, Sent: sent.UnixNano()}
	if err != nil {
		r.Err = cause(err)
	}
	return r
}

func (s *loggingStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	sent := time.Now()
	c, err := s.inner.Claim(ctx, req)
	r := s.record(ctx, "claim", req.Key, c.Token.Generation, sent, err)
	if err == nil {
		r.What, r.Takeover = c.Status.String(), c.Takeover
		if !c.LeaseEnd.IsZero() {
			r.LeaseEnd = c.LeaseEnd.UnixNano()
		}
	}
	s.log.write(r)
	return c, err
}

func (s *loggingStore) Complete(ctx context.Context, tok idem.Token, res idem.Result) error {
	sent := time.Now()
	err := s.inner.Complete(ctx, tok, res)
	r := s.record(ctx, "complete", tok.Key, tok.Generation, sent, err)
	r.Code = res.Status
	s.log.write(r)
	return err
}

func (s *loggingStore) Renew(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
	sent := time.Now()
	end, err := s.inner.Renew(ctx, tok, lease)
	r := s.record(ctx, "renew", tok.Key, tok.Generation, sent, err)
	if err == nil {
		r.LeaseEnd = end.UnixNano()
	}
	s.log.write(r)
	return end, err
}

func (s *loggingStore) Release(ctx context.Context, tok idem.Token) error {
	sent := time.Now()
	err := s.inner.Release(ctx, tok)
	s.log.write(s.record(ctx, "release", tok.Key, tok.Generation, sent, err))
	return err
}

func (s *loggingStore) Wait(ctx context.Context, scope string, key idem.Key) error {
	return s.inner.Wait(ctx, scope, key)
}

func (s *loggingStore) Sweep(ctx context.Context, limit int) (idem.SweepStats, error) {
	return s.inner.Sweep(ctx, limit)
}

// cachingStore is the logging store with pgstore's replay cache in front,
// as the engine uses it (a claim the cache answers never reaches Claim).
type cachingStore struct {
	*loggingStore
	pg interface {
		ClaimFromCache(idem.ClaimRequest) (idem.Claim, bool, error)
	}
}

func (s cachingStore) ClaimFromCache(req idem.ClaimRequest) (idem.Claim, bool, error) {
	c, ok, err := s.pg.ClaimFromCache(req)
	if ok {
		r := s.record(context.Background(), "claim", req.Key, 0, time.Now(), err)
		r.Cached = true
		if err == nil {
			r.What = c.Status.String()
		}
		s.log.write(r)
	}
	return c, ok, err
}

// txStore is the store of the one-commit route: the store the other routes
// use, and pgstore's BeginClaim, each call logged as "beginClaim" (a claim
// in a transaction is nobody else's to see, and is not a claim the
// checker's lease rules apply to).
type txStore struct {
	idem.Store
	log *loggingStore
	pg  idem.TxStore
}

var _ idem.TxStore = txStore{}

func (s txStore) BeginClaim(ctx context.Context, req idem.ClaimRequest, limits idem.TxLimits) (idem.Claim, idem.TxClaim, error) {
	sent := time.Now()
	c, tx, err := s.pg.BeginClaim(ctx, req, limits)
	r := s.log.record(ctx, "beginClaim", req.Key, c.Token.Generation, sent, err)
	if err == nil {
		r.What = c.Status.String()
	}
	s.log.log.write(r)
	return c, tx, err
}

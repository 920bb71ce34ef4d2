package idemtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// RunModel applies steps random operations and clock steps, drawn from seed,
// to s and to an [idem.StateMachine] configured like the suite's stores, and fails t
// at the first outcome where they differ. s must be empty and read its time
// from clock.
//
// Generations are compared through a bijection built as they are issued: a
// store need not number claims as the table does, but it must issue a fresh
// generation exactly when the table does, never reuse one for a key, and
// report stale claims against the same current generation.
func RunModel(t *testing.T, ctx context.Context, s idem.Store, clock *Clock, seed uint64, steps int) {
	t.Helper()
	runModel(t, ctx, s, clock, seed, steps, idem.StateMachineConfig{Retention: Retention})
}

// RunBoundedModel is [RunModel] for a store bounded to capacity keys, as
// [idem.StateMachineConfig.Capacity] bounds a table: a claim for a new key in a
// full store reclaims expired results and abandoned claims, and fails with
// [idem.ErrCapacity] if that frees no room, never evicting a retained
// result. The model uses six keys, so a capacity under six is reached.
func RunBoundedModel(t *testing.T, ctx context.Context, s idem.Store, clock *Clock, seed uint64, steps, capacity int) {
	t.Helper()
	runModel(t, ctx, s, clock, seed, steps, idem.StateMachineConfig{Retention: Retention, Capacity: capacity})
}

func runModel(t *testing.T, ctx context.Context, s idem.Store, clock *Clock, seed uint64, steps int, cfg idem.StateMachineConfig) {
	t.Helper()
	m := &model{
		t:       t,
		ctx:     ctx,
		s:       s,
		clock:   clock,
		table:   idem.NewStateMachine(cfg),
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		toModel: map[int64]int64{},
		toStore: map[int64]int64{},
		lastGen: map[scopedKey]int64{},
	}
	for i := range steps {
		m.step = i
		m.randomStep()
		if t.Failed() {
			t.Logf("model diverged at step %d of seed %d; history:\n%s", i, seed, m.history)
			return
		}
	}
}

type scopedKey struct {
	scope string
	key   idem.Key
}

type tokenPair struct{ store, model idem.Token }

type model struct {
	t       *testing.T
	ctx     context.Context
	s       idem.Store
	clock   *Clock
	table   *idem.StateMachine
	rng     *rand.Rand
	step    int
	history string

	tokens           []tokenPair
	toModel, toStore map[int64]int64
	lastGen          map[scopedKey]int64 // highest store generation issued per key
}

var (
	modelScopes  = []string{"a", "b"}
	modelKeys    = []idem.Key{key("k1"), key("k2"), key("k3")}
	modelFPs     = []string{"", "x", "y"}
	modelLeases  = []time.Duration{0, time.Second, 10 * time.Second}
	modelAdvance = []time.Duration{0, 500 * time.Millisecond, time.Second, 5 * time.Second, 31 * time.Second, Retention + time.Minute}
)

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func (m *model) logf(format string, args ...any) {
	m.history += fmt.Sprintf("%4d ", m.step) + fmt.Sprintf(format, args...) + "\n"
}

func (m *model) randomStep() {
	switch n := m.rng.IntN(100); {
	case n < 40:
		m.claim()
	case n < 55 && len(m.tokens) > 0:
		m.complete()
	case n < 65 && len(m.tokens) > 0:
		m.renew()
	case n < 75 && len(m.tokens) > 0:
		m.release()
	case n < 95:
		d := pick(m.rng, modelAdvance)
		m.logf("advance %v", d)
		m.clock.Advance(d)
	default:
		m.sweep()
	}
}

func (m *model) claim() {
	req := idem.ClaimRequest{
		Scope:       pick(m.rng, modelScopes),
		Key:         pick(m.rng, modelKeys),
		Fingerprint: pick(m.rng, modelFPs),
		Lease:       pick(m.rng, modelLeases),
	}
	m.logf("claim %q %q fp=%q lease=%v", req.Scope, req.Key, req.Fingerprint, req.Lease)
	got, gotErr := m.s.Claim(m.ctx, req)
	want, wantErr := m.table.Claim(req, m.clock.Now())
	if !m.sameError("claim", gotErr, wantErr) || wantErr != nil {
		return
	}
	if got.Status != want.Status || got.Takeover != want.Takeover || !got.LeaseEnd.Equal(want.LeaseEnd) || !got.Result.Equal(want.Result) {
		m.t.Errorf("claim: store %+v, model %+v", got, want)
		return
	}
	if got.Status != idem.Acquired {
		return
	}
	sk := scopedKey{req.Scope, req.Key}
	g := got.Token.Generation
	if _, reused := m.toModel[g]; reused || g <= m.lastGen[sk] {
		m.t.Errorf("claim: store issued generation %d for %v; issued before or not above the key's last %d", g, sk, m.lastGen[sk])
		return
	}
	if got.Token.Scope != req.Scope || got.Token.Key != req.Key {
		m.t.Errorf("claim: token %v does not name the claimed key", got.Token)
	}
	m.lastGen[sk] = g
	m.toModel[g], m.toStore[want.Token.Generation] = want.Token.Generation, g
	m.tokens = append(m.tokens, tokenPair{got.Token, want.Token})
}

func (m *model) complete() {
	tp := pick(m.rng, m.tokens)
	body := make([]byte, m.rng.IntN(8))
	for i := range body {
		body[i] = byte(m.rng.IntN(256))
	}
	res := idem.Result{Status: 200 + m.rng.IntN(300), Body: body}
	m.logf("complete %v", tp.model)
	m.sameError("complete", m.s.Complete(m.ctx, tp.store, res), m.table.Complete(tp.model, res, m.clock.Now()))
}

func (m *model) renew() {
	tp := pick(m.rng, m.tokens)
	lease := pick(m.rng, modelLeases)
	m.logf("renew %v lease=%v", tp.model, lease)
	got, gotErr := m.s.Renew(m.ctx, tp.store, lease)
	want, wantErr := m.table.Renew(tp.model, lease, m.clock.Now())
	if m.sameError("renew", gotErr, wantErr) && wantErr == nil && !got.Equal(want) {
		m.t.Errorf("renew: store lease end %v, model %v", got, want)
	}
}

func (m *model) release() {
	tp := pick(m.rng, m.tokens)
	m.logf("release %v", tp.model)
	m.sameError("release", m.s.Release(m.ctx, tp.store), m.table.Release(tp.model))
}

func (m *model) sweep() {
	m.logf("sweep")
	got, err := m.s.Sweep(m.ctx, 0)
	want := m.table.Sweep(m.clock.Now(), 0)
	if err != nil {
		m.t.Errorf("sweep: %v", err)
	} else if got != want {
		m.t.Errorf("sweep: store %+v, model %+v", got, want)
	}
}

// sameError compares the store's error with the model's by kind, and a
// stale claim's current generation through the bijection. It reports
// whether they agree.
func (m *model) sameError(op string, got, want error) bool {
	m.t.Helper()
	if kind(got) != kind(want) {
		m.t.Errorf("%s: store error %v, model error %v", op, got, want)
		return false
	}
	var gs, ws *idem.StaleClaimError
	if errors.As(got, &gs) && errors.As(want, &ws) {
		if mapped := m.toModel[gs.Current]; gs.Current != 0 && mapped != ws.Current || gs.Current == 0 && ws.Current != 0 {
			m.t.Errorf("%s: store reports current generation %d (model %d), model reports %d", op, gs.Current, mapped, ws.Current)
			return false
		}
	}
	var gm, wm *idem.MismatchError
	if errors.As(got, &gm) && errors.As(want, &wm) && gm.Completed != wm.Completed {
		m.t.Errorf("%s: store mismatch completed=%v, model %v", op, gm.Completed, wm.Completed)
		return false
	}
	return true
}

func kind(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, idem.ErrStaleClaim):
		return "stale"
	case errors.Is(err, idem.ErrFingerprintMismatch):
		return "mismatch"
	case errors.Is(err, idem.ErrInvalidKey):
		return "invalid key"
	case errors.Is(err, idem.ErrCapacity):
		return "capacity"
	}
	return "other: " + err.Error()
}

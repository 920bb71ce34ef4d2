package idem

import (
	"time"
)

// EntryState is the state of a key that is present in a store.
type EntryState int

const (
	// StateClaimed: a caller holds (or held, if its lease ran out) a claim.
	StateClaimed EntryState = iota + 1
	// StateCompleted: the key holds a result. It is an entry's state, as
	// an operator inspects it; a claim that finds it returns [Completed].
	StateCompleted
)

func (s EntryState) String() string {
	switch s {
	case StateClaimed:
		return "claimed"
	case StateCompleted:
		return "completed"
	}
	return "absent"
}

// Entry is a present key, as a store holds it.
type Entry struct {
	State       EntryState
	Generation  int64
	Fingerprint string
	Owner       string
	CreatedAt   time.Time // when the current generation was claimed
	LeaseEnd    time.Time // StateClaimed: when the lease runs out
	CompletedAt time.Time // StateCompleted
	ExpiresAt   time.Time // StateCompleted: end of retention; zero means never
	Result      Result    // StateCompleted
	// Labels are those of the request that claimed the current
	// generation, clipped ([Labels.Clip]); zero when it gave none or the
	// store keeps none.
	Labels Labels
}

// leaseOver reports whether a claimed entry's lease has run out at now.
func (e *Entry) leaseOver(now time.Time) bool { return !now.Before(e.LeaseEnd) }

// expired reports whether a completed entry's retention has run out at now.
func (e *Entry) expired(now time.Time) bool {
	return !e.ExpiresAt.IsZero() && !now.Before(e.ExpiresAt)
}

// StateMachineConfig configures a [StateMachine].
//
// The bounds are the bounded-resource rule: a retained result is never
// evicted to make room (invariant 4 of [Store]: a retry of an evicted key
// would run its side effect again, and anyone able to send new keys could
// flush every other client's results). When a claim for a new key would
// exceed a bound, the table first reclaims what the protocol no longer
// protects, results past retention and claims whose lease ran out (as a
// sweep would); if that frees no room, Claim fails with [ErrCapacity] and
// claims nothing. Keys already present are always answered.
type StateMachineConfig struct {
	// Capacity bounds the number of present keys. Zero or less means no
	// bound on the count.
	Capacity int
	// MaxBytes bounds the bytes the entries hold, as [StateMachine.Bytes] counts
	// them (scope, key, fingerprint, owner, recorded result, and a fixed
	// overhead per entry). It is checked when a new key is claimed; a
	// completion is never refused for size, so the table can exceed it by
	// the results of the claims admitted before it filled (each bounded by
	// the adapter's record limit). Zero or less means no bound on bytes.
	MaxBytes int64
	// Retention is how long a result is kept after completion. Zero means
	// forever.
	Retention time.Duration
	// DefaultLease is the lease of a claim or renewal that asks for none.
	// Zero means [DefaultLease].
	DefaultLease time.Duration
}

// DefaultLease is the lease a store applies when neither the request nor the
// store's configuration names one.
const DefaultLease = 30 * time.Second

type scopedKey struct {
	scope string
	key   Key
}

type completion struct {
	sk  scopedKey
	gen int64
}

// StateMachine is the transition table of docs/design.md, and nothing else: a map,
// the claim operations, and one bounded-resource rule (see [StateMachineConfig]).
// It has no lock, no I/O and no clock: every operation that needs the time
// is given it, so the table can be tested as a state machine and serves as
// the model stores are checked against. A StateMachine is not safe for concurrent
// use; memstore puts it behind a lock, which is what makes its claims
// atomic.
//
// Generations come from one counter for the whole table, so a generation is
// never reused for a key, whatever happened to the key in between.
type StateMachine struct {
	cfg     StateMachineConfig
	entries map[scopedKey]*Entry
	claimed map[scopedKey]struct{} // keys in StateClaimed, for sweeping and reclaiming
	// completions lists completed entries in completion order, oldest first,
	// for retention. Entries are validated when popped (the key
	// may have been released, forgotten or re-claimed since), so removal
	// from the middle is free.
	completions []completion
	head        int
	lastGen     int64
	bytes       int64 // the sum of entrySize over entries
	// noAbandonedBefore is a time before which no claim's lease can have
	// run out: at most the earliest lease end. Leases only grow (renewal)
	// or leave (completion, release), so once computed it stays a lower
	// bound, and a full table scans its claims for abandoned ones only when
	// the clock passes it, not on every refused claim.
	noAbandonedBefore time.Time
}

// NewStateMachine returns an empty table.
func NewStateMachine(cfg StateMachineConfig) *StateMachine {
	if cfg.DefaultLease <= 0 {
		cfg.DefaultLease = DefaultLease
	}
	return &StateMachine{
		cfg:     cfg,
		entries: make(map[scopedKey]*Entry),
		claimed: make(map[scopedKey]struct{}),
	}
}

// Len returns the number of present keys.
func (t *StateMachine) Len() int { return len(t.entries) }

// Bytes returns the bytes the entries hold, as [StateMachineConfig.MaxBytes]
// counts them.
func (t *StateMachine) Bytes() int64 { return t.bytes }

// entryOverhead approximates what an entry costs beyond its variable-length
// fields: the map slot, the Entry struct and its bookkeeping.
const entryOverhead = 256

// entrySize is what an entry counts against [StateMachineConfig.MaxBytes].
func entrySize(sk scopedKey, e *Entry) int64 {
	n := entryOverhead + len(sk.scope) + len(sk.key.String()) + len(e.Fingerprint) + len(e.Owner) + len(e.Result.Body) +
		len(e.Labels.Method) + len(e.Labels.Route) + len(e.Labels.Caller)
	for name, vs := range e.Result.Header {
		n += len(name)
		for _, v := range vs {
			n += len(v)
		}
	}
	return int64(n)
}

// full reports whether a new entry of size n would exceed a bound.
func (t *StateMachine) full(n int64) bool {
	return t.cfg.Capacity > 0 && len(t.entries) >= t.cfg.Capacity ||
		t.cfg.MaxBytes > 0 && t.bytes+n > t.cfg.MaxBytes
}

// Lookup returns the entry for (scope, key), if present. The returned entry
// is a copy.
func (t *StateMachine) Lookup(scope string, key Key) (Entry, bool) {
	e, ok := t.entries[scopedKey{scope, key}]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Claim applies a claim at time now. See [Store.Claim] for the transitions.
func (t *StateMachine) Claim(req ClaimRequest, now time.Time) (Claim, error) {
	if err := req.Validate(); err != nil {
		return Claim{}, err
	}
	sk := scopedKey{req.Scope, req.Key}
	e, ok := t.entries[sk]
	takeover := false
	if ok {
		switch e.State {
		case StateClaimed:
			if !e.leaseOver(now) {
				if req.Mismatches(e.Fingerprint) {
					return Claim{}, &MismatchError{Scope: req.Scope, Key: req.Key}
				}
				return Claim{Status: InFlight, LeaseEnd: e.LeaseEnd}, nil
			}
			takeover = true
		case StateCompleted:
			if !e.expired(now) {
				if req.Mismatches(e.Fingerprint) {
					return Claim{}, &MismatchError{Scope: req.Scope, Key: req.Key, Completed: true}
				}
				return Claim{Status: Completed, Result: e.Result}, nil
			}
		}
	}
	lease := t.lease(req.Lease)
	next := &Entry{
		State:       StateClaimed,
		Fingerprint: req.Fingerprint,
		Owner:       req.Owner,
		Labels:      req.Labels.Clip(),
		CreatedAt:   now,
		LeaseEnd:    now.Add(lease),
	}
	if !ok && t.full(entrySize(sk, next)) {
		t.reclaim(now)
		if t.full(entrySize(sk, next)) {
			return Claim{}, ErrCapacity
		}
	}
	if ok {
		t.remove(sk)
	}
	t.lastGen++
	next.Generation = t.lastGen
	t.entries[sk] = next
	t.bytes += entrySize(sk, next)
	if t.noAbandonedBefore.IsZero() || next.LeaseEnd.Before(t.noAbandonedBefore) {
		t.noAbandonedBefore = next.LeaseEnd
	}
	t.claimed[sk] = struct{}{}
	return Claim{
		Status:   Acquired,
		Token:    Token{Scope: req.Scope, Key: req.Key, Generation: t.lastGen},
		LeaseEnd: now.Add(lease),
		Takeover: takeover,
	}, nil
}

func (t *StateMachine) lease(d time.Duration) time.Duration {
	if d <= 0 {
		return t.cfg.DefaultLease
	}
	return d
}

// current returns the entry tok holds, or a stale-claim error.
func (t *StateMachine) current(tok Token) (*Entry, error) {
	e, ok := t.entries[scopedKey{tok.Scope, tok.Key}]
	switch {
	case !ok:
		return nil, &StaleClaimError{Token: tok}
	case e.State != StateClaimed || e.Generation != tok.Generation:
		return nil, &StaleClaimError{Token: tok, Current: e.Generation}
	}
	return e, nil
}

// Complete records res for tok's claim at time now.
func (t *StateMachine) Complete(tok Token, res Result, now time.Time) error {
	e, err := t.current(tok)
	if err != nil {
		return err
	}
	sk := scopedKey{tok.Scope, tok.Key}
	delete(t.claimed, sk)
	t.bytes -= entrySize(sk, e)
	e.State = StateCompleted
	e.LeaseEnd = time.Time{}
	e.CompletedAt = now
	e.ExpiresAt = time.Time{}
	if t.cfg.Retention > 0 {
		e.ExpiresAt = now.Add(t.cfg.Retention)
	}
	e.Result = res
	t.bytes += entrySize(sk, e)
	t.completions = append(t.completions, completion{sk, e.Generation})
	return nil
}

// Renew extends tok's lease to lease from now and returns the new lease end.
func (t *StateMachine) Renew(tok Token, lease time.Duration, now time.Time) (time.Time, error) {
	e, err := t.current(tok)
	if err != nil {
		return time.Time{}, err
	}
	e.LeaseEnd = now.Add(t.lease(lease))
	if e.LeaseEnd.Before(t.noAbandonedBefore) { // a renewal may shorten a lease
		t.noAbandonedBefore = e.LeaseEnd
	}
	return e.LeaseEnd, nil
}

// Release returns tok's key to absent.
func (t *StateMachine) Release(tok Token) error {
	if _, err := t.current(tok); err != nil {
		return err
	}
	t.remove(scopedKey{tok.Scope, tok.Key})
	return nil
}

// Forget removes (scope, key) whatever its state, as an operator's forget
// does, and reports whether it was present. A live claim's token becomes
// stale.
func (t *StateMachine) Forget(scope string, key Key) bool {
	sk := scopedKey{scope, key}
	if _, ok := t.entries[sk]; !ok {
		return false
	}
	t.remove(sk)
	return true
}

func (t *StateMachine) remove(sk scopedKey) {
	if e, ok := t.entries[sk]; ok {
		t.bytes -= entrySize(sk, e)
	}
	delete(t.entries, sk)
	delete(t.claimed, sk)
}

// Sweep removes, at time now, claims whose lease ran out and results past
// retention, at most limit in all (limit <= 0: no limit), abandoned claims
// first.
func (t *StateMachine) Sweep(now time.Time, limit int) SweepStats {
	var st SweepStats
	room := func() bool { return limit <= 0 || st.Abandoned+st.Expired < limit }
	for sk := range t.claimed {
		if !room() {
			return st
		}
		if t.entries[sk].leaseOver(now) {
			t.remove(sk)
			st.Abandoned++
		}
	}
	// Retention is one duration, so completion order is expiry order: the
	// expired results are a prefix of the completions queue.
	for room() {
		e, sk, ok := t.oldestCompleted()
		if !ok || !e.expired(now) {
			break
		}
		t.remove(sk)
		t.popCompletion()
		st.Expired++
	}
	return st
}

// reclaim removes, at time now, what the protocol no longer protects:
// every result past retention and every claim whose lease ran out, exactly
// what a sweep would remove. It never touches a retained result or a live
// claim. Expired results are a prefix of the completion queue; the claims
// are scanned only once the clock has passed noAbandonedBefore, and the
// scan moves it to the earliest live lease end.
func (t *StateMachine) reclaim(now time.Time) {
	for {
		e, sk, ok := t.oldestCompleted()
		if !ok || !e.expired(now) {
			break
		}
		t.remove(sk)
		t.popCompletion()
	}
	if now.Before(t.noAbandonedBefore) {
		return
	}
	t.noAbandonedBefore = time.Time{}
	for sk := range t.claimed {
		e := t.entries[sk]
		if e.leaseOver(now) {
			t.remove(sk)
		} else if t.noAbandonedBefore.IsZero() || e.LeaseEnd.Before(t.noAbandonedBefore) {
			t.noAbandonedBefore = e.LeaseEnd
		}
	}
}

// oldestCompleted returns the oldest completed entry still present, dropping
// queue items that no longer match their key.
func (t *StateMachine) oldestCompleted() (*Entry, scopedKey, bool) {
	for t.head < len(t.completions) {
		c := t.completions[t.head]
		if e, ok := t.entries[c.sk]; ok && e.State == StateCompleted && e.Generation == c.gen {
			return e, c.sk, true
		}
		t.popCompletion()
	}
	return nil, scopedKey{}, false
}

func (t *StateMachine) popCompletion() {
	t.completions[t.head] = completion{}
	t.head++
	if t.head == len(t.completions) {
		t.completions, t.head = t.completions[:0], 0
	} else if t.head > 1024 && t.head > len(t.completions)/2 {
		n := copy(t.completions, t.completions[t.head:])
		t.completions, t.head = t.completions[:n], 0
	}
}

package idem

import (
	"time"
)

// EntryState is the state of a key that is present in a store.
type EntryState int

const (
	// StateClaimed: a caller holds (or held, if its lease ran out) a claim.
	StateClaimed EntryState = iota + 1
	// StateCompleted: the key holds a result.
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
}

// leaseOver reports whether a claimed entry's lease has run out at now.
func (e *Entry) leaseOver(now time.Time) bool { return !now.Before(e.LeaseEnd) }

// expired reports whether a completed entry's retention has run out at now.
func (e *Entry) expired(now time.Time) bool {
	return !e.ExpiresAt.IsZero() && !now.Before(e.ExpiresAt)
}

// TableConfig configures a [Table].
type TableConfig struct {
	// Capacity bounds the number of present keys. When a new key would
	// exceed it, the oldest completed entry is evicted, else a claim whose
	// lease ran out; if every entry is a live claim, Claim fails with
	// [ErrCapacity]. Zero or less means unbounded.
	Capacity int
	// Retention is how long a result is kept after completion. Zero means
	// forever (or until evicted for capacity).
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

// Table is the transition table of DESIGN.md, and nothing else: a map, the
// claim operations, and one bounded-resource rule. It has no lock, no I/O and
// no clock: every operation that needs the time is given it, so the table can
// be tested as a state machine and serves as the model stores are checked
// against. A Table is not safe for concurrent use; memstore puts it behind a
// lock, which is what makes its claims atomic.
//
// Generations come from one counter for the whole table, so a generation is
// never reused for a key, whatever happened to the key in between.
type Table struct {
	cfg     TableConfig
	entries map[scopedKey]*Entry
	claimed map[scopedKey]struct{} // keys in StateClaimed, for sweeping and eviction
	// completions lists completed entries in completion order, oldest first,
	// for eviction and retention. Entries are validated when popped (the key
	// may have been released, forgotten or re-claimed since), so removal
	// from the middle is free.
	completions []completion
	head        int
	lastGen     int64
}

// NewTable returns an empty table.
func NewTable(cfg TableConfig) *Table {
	if cfg.DefaultLease <= 0 {
		cfg.DefaultLease = DefaultLease
	}
	return &Table{
		cfg:     cfg,
		entries: make(map[scopedKey]*Entry),
		claimed: make(map[scopedKey]struct{}),
	}
}

// Len returns the number of present keys.
func (t *Table) Len() int { return len(t.entries) }

// Lookup returns the entry for (scope, key), if present. The returned entry
// is a copy.
func (t *Table) Lookup(scope string, key Key) (Entry, bool) {
	e, ok := t.entries[scopedKey{scope, key}]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Claim applies a claim at time now. See [Store.Claim] for the transitions.
func (t *Table) Claim(req ClaimRequest, now time.Time) (Claim, error) {
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
				if mismatch(e.Fingerprint, req.Fingerprint) {
					return Claim{}, &MismatchError{Scope: req.Scope, Key: req.Key}
				}
				return Claim{Status: InFlight, LeaseEnd: e.LeaseEnd}, nil
			}
			takeover = true
		case StateCompleted:
			if !e.expired(now) {
				if mismatch(e.Fingerprint, req.Fingerprint) {
					return Claim{}, &MismatchError{Scope: req.Scope, Key: req.Key, Completed: true}
				}
				return Claim{Status: Completed, Result: e.Result}, nil
			}
		}
	} else if t.cfg.Capacity > 0 && len(t.entries) >= t.cfg.Capacity && !t.evict(now) {
		return Claim{}, ErrCapacity
	}
	t.lastGen++
	lease := t.lease(req.Lease)
	t.entries[sk] = &Entry{
		State:       StateClaimed,
		Generation:  t.lastGen,
		Fingerprint: req.Fingerprint,
		Owner:       req.Owner,
		CreatedAt:   now,
		LeaseEnd:    now.Add(lease),
	}
	t.claimed[sk] = struct{}{}
	return Claim{
		Status:   Acquired,
		Token:    Token{Scope: req.Scope, Key: req.Key, Generation: t.lastGen},
		LeaseEnd: now.Add(lease),
		Takeover: takeover,
	}, nil
}

func mismatch(stored, asked string) bool {
	return stored != "" && asked != "" && stored != asked
}

func (t *Table) lease(d time.Duration) time.Duration {
	if d <= 0 {
		return t.cfg.DefaultLease
	}
	return d
}

// current returns the entry tok holds, or a stale-claim error.
func (t *Table) current(tok Token) (*Entry, error) {
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
func (t *Table) Complete(tok Token, res Result, now time.Time) error {
	e, err := t.current(tok)
	if err != nil {
		return err
	}
	sk := scopedKey{tok.Scope, tok.Key}
	delete(t.claimed, sk)
	e.State = StateCompleted
	e.LeaseEnd = time.Time{}
	e.CompletedAt = now
	e.ExpiresAt = time.Time{}
	if t.cfg.Retention > 0 {
		e.ExpiresAt = now.Add(t.cfg.Retention)
	}
	e.Result = res
	t.completions = append(t.completions, completion{sk, e.Generation})
	return nil
}

// Renew extends tok's lease to lease from now and returns the new lease end.
func (t *Table) Renew(tok Token, lease time.Duration, now time.Time) (time.Time, error) {
	e, err := t.current(tok)
	if err != nil {
		return time.Time{}, err
	}
	e.LeaseEnd = now.Add(t.lease(lease))
	return e.LeaseEnd, nil
}

// Release returns tok's key to absent.
func (t *Table) Release(tok Token) error {
	if _, err := t.current(tok); err != nil {
		return err
	}
	t.remove(scopedKey{tok.Scope, tok.Key})
	return nil
}

// Forget removes (scope, key) whatever its state, as an operator's forget
// does, and reports whether it was present. A live claim's token becomes
// stale.
func (t *Table) Forget(scope string, key Key) bool {
	sk := scopedKey{scope, key}
	if _, ok := t.entries[sk]; !ok {
		return false
	}
	t.remove(sk)
	return true
}

func (t *Table) remove(sk scopedKey) {
	delete(t.entries, sk)
	delete(t.claimed, sk)
}

// Sweep removes, at time now, claims whose lease ran out and results past
// retention, at most limit in all (limit <= 0: no limit), abandoned claims
// first.
func (t *Table) Sweep(now time.Time, limit int) SweepStats {
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

// evict makes room for one new key, and reports whether it could.
func (t *Table) evict(now time.Time) bool {
	if _, sk, ok := t.oldestCompleted(); ok {
		t.remove(sk)
		t.popCompletion()
		return true
	}
	// No result to evict: the oldest abandoned claim, if any. This scans
	// the claims, which only happens when the table is full of them.
	var victim *scopedKey
	var victimEnd time.Time
	for sk := range t.claimed {
		e := t.entries[sk]
		if e.leaseOver(now) && (victim == nil || e.LeaseEnd.Before(victimEnd)) {
			victim, victimEnd = &sk, e.LeaseEnd
		}
	}
	if victim == nil {
		return false
	}
	t.remove(*victim)
	return true
}

// oldestCompleted returns the oldest completed entry still present, dropping
// queue items that no longer match their key.
func (t *Table) oldestCompleted() (*Entry, scopedKey, bool) {
	for t.head < len(t.completions) {
		c := t.completions[t.head]
		if e, ok := t.entries[c.sk]; ok && e.State == StateCompleted && e.Generation == c.gen {
			return e, c.sk, true
		}
		t.popCompletion()
	}
	return nil, scopedKey{}, false
}

func (t *Table) popCompletion() {
	t.completions[t.head] = completion{}
	t.head++
	if t.head == len(t.completions) {
		t.completions, t.head = t.completions[:0], 0
	} else if t.head > 1024 && t.head > len(t.completions)/2 {
		n := copy(t.completions, t.completions[t.head:])
		t.completions, t.head = t.completions[:n], 0
	}
}

package pgstore

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgschema"
)

// replayCache holds completed results in process, so that a replay is
// answered without a round trip. It is safe because a completed result
// never changes while it is retained (invariant 4): the only ways it leaves
// the table are its retention running out, which each entry's deadline
// follows, and an operator's Forget, whose NOTIFY every instance's listener
// delivers here.
//
// Three rules keep it from serving what the table no longer holds:
//
//   - An entry is added only if the listener's LISTEN was in effect before
//     the claim statement that read the result was sent, and has not been
//     re-established since (epoch): otherwise a Forget's notification could
//     have been missed.
//   - An entry is added only if no notification for its payload bucket
//     arrived since that statement was sent: a Forget that committed after
//     the statement's snapshot, whose notification overtook the statement's
//     answer, must win.
//   - When the LISTEN connection is lost, the whole cache is dropped.
//
// It is bounded by the bytes of the results it holds, least recently used
// evicted first.
type replayCache struct {
	maxBytes int
	maxEntry int

	mu      sync.Mutex
	bytes   int
	lru     *list.List               // of *cacheEntry, most recent first
	entries map[string]*list.Element // by scope + "\x00" + key
	byHash  map[string]*list.Element // by NOTIFY payload
	buckets [256]uint64              // notifications seen, by payload bucket
	epoch   uint64                   // LISTEN sessions begun; 0: none yet
	ready   bool                     // LISTEN in effect

	hits atomic.Int64 // get calls answered from the cache
}

type cacheEntry struct {
	id          string // scope + "\x00" + key
	payload     string
	fingerprint string
	result      idem.Result
	size        int
	// deadline is when retention runs out on the local monotonic clock
	// (zero: retained forever); expiresAt is the same on the store's test
	// clock, used instead when the Now hook is set.
	deadline  time.Time
	expiresAt *time.Time
}

func newReplayCache(maxBytes int) *replayCache {
	return &replayCache{
		maxBytes: maxBytes,
		// One result may take at most an eighth of the budget, so a few
		// large responses cannot flush everything else.
		maxEntry: maxBytes / 8,
		lru:      list.New(),
		entries:  make(map[string]*list.Element),
		byHash:   make(map[string]*list.Element),
	}
}

func replayCacheID(scope string, key idem.Key) string {
	return string(appendCacheID(nil, scope, key))
}

// appendCacheID appends replayCacheID(scope, key) to b, for get: looked up
// from bytes, an id costs no allocation (a map index converts them without
// a copy), where the string costs one on every claim.
func appendCacheID(b []byte, scope string, key idem.Key) []byte {
	return append(append(append(b, scope...), 0), key.String()...)
}

// get returns the cached result of id, if any and still retained. now is
// the store's test clock, nil in production.
func (c *replayCache) get(id []byte, now func() time.Time) (fingerprint string, res idem.Result, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.entries[string(id)]
	if el == nil {
		return "", idem.Result{}, false
	}
	e := el.Value.(*cacheEntry)
	var expired bool
	switch {
	case now != nil:
		expired = e.expiresAt != nil && !now().Before(*e.expiresAt)
	default:
		expired = !e.deadline.IsZero() && !time.Now().Before(e.deadline)
	}
	if expired {
		c.remove(el)
		return "", idem.Result{}, false
	}
	c.lru.MoveToFront(el)
	c.hits.Add(1)
	return e.fingerprint, e.result, true
}

// ticket is what a claim statement captures before it is sent, so that its
// answer is cached only if nothing could have invalidated it meanwhile.
type ticket struct {
	epoch  uint64
	bucket byte
	seen   uint64
	ok     bool
}

func (c *replayCache) ticket(payload string) ticket { return c.ticketIn(bucketOf(payload)) }

// ticketIn is ticket for a payload in bucket b (bucketOf).
func (c *replayCache) ticketIn(b byte) ticket {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ticket{epoch: c.epoch, bucket: b, seen: c.buckets[b], ok: c.ready}
}

// put caches res for id, fetched with t. sent is when the statement was
// sent on the local monotonic clock; dbNow and expiresAt are the database's
// (or the test clock's) now and the result's retention end, nil for
// forever.
func (c *replayCache) put(t ticket, id, payload, fingerprint string, res idem.Result, sent, dbNow time.Time, expiresAt *time.Time) {
	size := entrySize(id, fingerprint, res)
	if size > c.maxEntry {
		return
	}
	e := &cacheEntry{id: id, payload: payload, fingerprint: fingerprint, result: res, size: size, expiresAt: expiresAt}
	if expiresAt != nil {
		// The retention left, measured on the database clock, counted
		// from before the statement was sent: the entry never outlives
		// the row's retention.
		left := expiresAt.Sub(dbNow)
		if left <= 0 {
			return
		}
		e.deadline = sent.Add(left)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !t.ok || !c.ready || c.epoch != t.epoch || c.buckets[t.bucket] != t.seen {
		return
	}
	if old := c.entries[id]; old != nil {
		c.remove(old)
	}
	el := c.lru.PushFront(e)
	c.entries[id] = el
	c.byHash[payload] = el
	c.bytes += size
	for c.bytes > c.maxBytes {
		c.remove(c.lru.Back())
	}
}

func (c *replayCache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*cacheEntry)
	delete(c.entries, e.id)
	if c.byHash[e.payload] == el {
		delete(c.byHash, e.payload)
	}
	c.bytes -= e.size
}

// invalidate drops the entry a notification names. Every notification of
// the store's channel counts (completions and releases too): dropping an
// entry is always safe.
func (c *replayCache) invalidate(payload string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buckets[bucketOf(payload)]++
	if el := c.byHash[payload]; el != nil {
		c.remove(el)
	}
}

// setReady records whether the LISTEN is in effect. Losing it drops
// everything: notifications may be missed until it is back.
func (c *replayCache) setReady(up bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if up && !c.ready {
		c.epoch++
	}
	c.ready = up
	if !up {
		c.lru.Init()
		clear(c.entries)
		clear(c.byHash)
		c.bytes = 0
	}
}

func (c *replayCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

func bucketOf[P string | []byte](payload P) byte {
	if len(payload) < 2 {
		return 0
	}
	return fromHex(payload[0])<<4 | fromHex(payload[1])
}

func fromHex(b byte) byte {
	switch {
	case b >= '0' && b <= '9':
		return b - '0'
	case b >= 'a' && b <= 'f':
		return b - 'a' + 10
	}
	return 0
}

// entrySize estimates what an entry holds, in bytes.
func entrySize(id, fingerprint string, res idem.Result) int {
	n := 256 + 2*len(id) + len(fingerprint) + len(res.Body)
	for k, vs := range res.Header {
		n += len(k) + 16
		for _, v := range vs {
			n += len(v) + 16
		}
	}
	return n
}

// cacheNotified is the listener's notified: the cache forgets the key a
// notification names.
func (s *Store) cacheNotified(payload string) {
	s.cache.invalidate(payload)
	if f := s.cacheInvalidated.Load(); f != nil {
		(*f)(payload)
	}
}

// cacheListening is the listener's listening: the cache is used only while
// the LISTEN is in effect, and dropped when it is lost.
func (s *Store) cacheListening(up bool) {
	s.cache.setReady(up)
	if f := s.cacheDropped.Load(); f != nil && !up {
		(*f)()
	}
}

// ReplayCacheHits is how many claims the replay cache has answered without a
// round trip to the database since the store was made: replays, and
// mismatches found against a cached result. Zero without a cache. It is
// cheap (an atomic load), for a metrics callback such as idemotel's
// Options.ReplayCacheHits.
func (s *Store) ReplayCacheHits() int64 {
	if s.cache == nil {
		return 0
	}
	return s.cache.hits.Load()
}

// claimCache is what a claim needs of the replay cache: where a result read
// from the table goes, and the ticket that says whether it may.
type claimCache struct {
	s *Store
	// payload is the key's NOTIFY payload (pgschema.NotifyPayloadBytes),
	// made a string only for a result that is cached.
	payload [32]byte
	tk      ticket
	sent    time.Time
}

// startClaim sets up a claim of req: a replay straight from the replay
// cache (ok true, with the cache's answer), or the cache bookkeeping for a
// claim that goes to the table.
func (s *Store) startClaim(req idem.ClaimRequest) (rc claimCache, c idem.Claim, ok bool, err error) {
	rc.s = s
	if s.cache == nil {
		return rc, idem.Claim{}, false, nil
	}
	if c, ok, err := s.claimFromCache(req); ok {
		return rc, c, true, err
	}
	s.listener.start()
	rc.payload = pgschema.NotifyPayloadBytes(req.Scope, req.Key.String())
	return rc, idem.Claim{}, false, nil
}

// ticket is taken before each claim statement is sent: its answer is
// cached only if no notification for the key (nor a lost LISTEN) came in
// between.
func (rc *claimCache) ticket() {
	if rc.s.cache != nil {
		rc.tk, rc.sent = rc.s.cache.ticketIn(bucketOf(rc.payload[:])), time.Now()
	}
}

// ClaimFromCache answers req from the replay cache alone, without I/O, as
// [Store.Claim] would: the result, or a [*idem.MismatchError] for another
// fingerprint. ok is false when the cache cannot answer (no cache, a miss,
// an expired entry, or a scope or key that Claim would refuse): call Claim.
//
// Claim asks the cache first itself; engine.Engine (and so the middleware
// and mcphttp) calls ClaimFromCache before it sets up the store timeout
// for Claim, which a replay from memory does not need.
func (s *Store) ClaimFromCache(req idem.ClaimRequest) (c idem.Claim, ok bool, err error) {
	if s.cache == nil || req.Validate() != nil {
		return idem.Claim{}, false, nil
	}
	return s.claimFromCache(req)
}

// claimFromCache answers a claim of a key whose result the replay cache
// holds: the replay, or a mismatch error. ok is false on a miss.
func (s *Store) claimFromCache(req idem.ClaimRequest) (c idem.Claim, ok bool, err error) {
	var id [256]byte
	fp, res, ok := s.cache.get(appendCacheID(id[:0], req.Scope, req.Key), s.now)
	switch {
	case !ok:
		return idem.Claim{}, false, nil
	case req.Mismatches(fp):
		return idem.Claim{}, true, &idem.MismatchError{Scope: req.Scope, Key: req.Key, Completed: true}
	}
	return idem.Claim{Status: idem.Completed, Result: res}, true, nil
}

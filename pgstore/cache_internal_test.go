package pgstore

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// readyCache is a cache whose LISTEN is in effect, and a ticket for payload.
func readyCache(maxBytes int, payload string) (*replayCache, ticket) {
	c := newReplayCache(maxBytes)
	c.setReady(true)
	return c, c.ticket(payload)
}

func TestReplayCacheDeadline(t *testing.T) {
	t.Parallel()
	res := idem.Result{Status: 201, Body: []byte("x")}
	dbNow := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	expires := dbNow.Add(time.Hour)
	tests := []struct {
		name    string
		sent    time.Time
		expires *time.Time
		want    bool
	}{
		// The database said an hour is left; counted from a statement
		// sent just now, the entry is good.
		{"retained", time.Now(), &expires, true},
		// The same answer to a statement sent two hours ago (by the
		// local monotonic clock): the hour ran out meanwhile.
		{"retention ran out since the statement", time.Now().Add(-2 * time.Hour), &expires, false},
		{"retained forever", time.Now().Add(-1000 * time.Hour), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, tk := readyCache(1<<20, "00aa")
			c.put(tk, "s\x00k", "00aa", "fp", res, tt.sent, dbNow, tt.expires)
			_, _, ok := c.get([]byte("s\x00k"), nil)
			if ok != tt.want {
				t.Fatalf("get = %v, want %v", ok, tt.want)
			}
		})
	}

	t.Run("already expired by the database clock", func(t *testing.T) {
		t.Parallel()
		c, tk := readyCache(1<<20, "00aa")
		past := dbNow.Add(-time.Second)
		c.put(tk, "s\x00k", "00aa", "fp", res, time.Now(), dbNow, &past)
		if c.len() != 0 {
			t.Fatal("cached a result whose retention was over")
		}
	})
}

func TestReplayCacheRefusesWhatMayBeStale(t *testing.T) {
	t.Parallel()
	res := idem.Result{Status: 201}
	now := time.Now()
	tests := []struct {
		name string
		// between runs after the ticket is taken and before put.
		between func(c *replayCache)
		ticket  func(c *replayCache) ticket
		want    int
	}{
		{"nothing happened", func(*replayCache) {}, nil, 1},
		{"a notification for the key", func(c *replayCache) { c.invalidate("00aa") }, nil, 0},
		{"a notification in the same bucket", func(c *replayCache) { c.invalidate("00bb") }, nil, 0},
		{"a notification in another bucket", func(c *replayCache) { c.invalidate("01aa") }, nil, 1},
		{"the LISTEN was lost", func(c *replayCache) { c.setReady(false) }, nil, 0},
		{"the LISTEN was lost and re-established", func(c *replayCache) { c.setReady(false); c.setReady(true) }, nil, 0},
		{"no LISTEN when the ticket was taken", func(*replayCache) {}, func(c *replayCache) ticket {
			c.setReady(false)
			tk := c.ticket("00aa")
			c.setReady(true)
			return tk
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, tk := readyCache(1<<20, "00aa")
			if tt.ticket != nil {
				tk = tt.ticket(c)
			}
			tt.between(c)
			c.put(tk, "s\x00k", "00aa", "", res, now, now, nil)
			if got := c.len(); got != tt.want {
				t.Fatalf("cache holds %d entries, want %d", got, tt.want)
			}
		})
	}
}

func TestReplayCacheEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	res := idem.Result{Status: 200, Body: make([]byte, 1000)}
	id := func(i int) string { return "s\x00k" + strconv.Itoa(i) }
	payload := func(i int) string { return fmt.Sprintf("%02x", i) }
	size := entrySize(id(0), "", res)
	c := newReplayCache(10*size + size/2) // room for ten
	c.setReady(true)
	now := time.Now()
	for i := range 10 {
		c.put(c.ticket(payload(i)), id(i), payload(i), "", res, now, now, nil)
	}
	if _, _, ok := c.get([]byte(id(0)), nil); !ok { // k0 is now the most recent
		t.Fatal("k0 not cached")
	}
	c.put(c.ticket(payload(10)), id(10), payload(10), "", res, now, now, nil)
	for i := range 11 {
		if _, _, ok := c.get([]byte(id(i)), nil); ok != (i != 1) {
			t.Errorf("k%d cached = %v, want %v", i, ok, i != 1)
		}
	}
	if c.bytes > c.maxBytes {
		t.Errorf("cache holds %d bytes, bound %d", c.bytes, c.maxBytes)
	}
	// A result larger than an eighth of the bound is not cached.
	big := idem.Result{Status: 200, Body: make([]byte, 2*size)}
	c.put(c.ticket("ff"), "s\x00big", "ff", "", big, now, now, nil)
	if _, _, ok := c.get([]byte("s\x00big"), nil); ok {
		t.Error("a result larger than an eighth of the bound was cached")
	}
	// A forgotten key's entry goes, by its payload.
	c.invalidate(payload(0))
	if _, _, ok := c.get([]byte(id(0)), nil); ok {
		t.Error("k0 still cached after its notification")
	}
}

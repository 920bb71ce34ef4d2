package pgstore_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/pgstore"
)

// TestLargeReplayCopiesTheBodyOnce replays a 10 MiB result from the
// database (no replay cache) and counts the bytes the claim allocates. pgx
// reads the row into a buffer of its own, from a pool (emptied here first),
// sized to the next power of two: 16 MiB. Beyond that, the body must be
// copied once, into the Result, as the JSON holds it (base64 for a binary
// body, decoded in place). Scanning the column into a []byte and decoding
// that copied it twice: a text body was held 3.6 times in all.
//
// Not parallel: it reads the process's allocation counter, which parallel
// tests would add to (Go runs the non-parallel tests one by one, before
// the parallel ones).
func TestLargeReplayCopiesTheBodyOnce(t *testing.T) {
	ctx := testCtx(t)
	pool, _ := migrated(t)
	s := newStore(t, pool, pgstore.Options{})
	const size = 10 << 20
	for _, tc := range []struct {
		name string
		body []byte
		// stored is the body's size in the result's JSON.
		stored int
	}{
		{"text", []byte(strings.Repeat("0123456789abcdef", size/16)), size},
		{"binary", bytes.Repeat([]byte{0, 0xff, 'a', 'b'}, size/4), base64.StdEncoding.EncodedLen(size)},
	} {
		body := tc.body
		req := idem.ClaimRequest{Scope: "s", Key: key(tc.name)}
		c := mustClaim(t, ctx, s, req, idem.Acquired)
		if err := s.Complete(ctx, c.Token, idem.Result{Status: 200, Body: body}); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, ctx, s, req, idem.Completed) // the statement is prepared

		// Two collections empty a sync.Pool (the second, its victim cache).
		runtime.GC()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got := mustClaim(t, ctx, s, req, idem.Completed)
		runtime.ReadMemStats(&after)

		if !bytes.Equal(got.Result.Body, body) {
			t.Fatalf("%s: replayed %d bytes, not the %d recorded", tc.name, len(got.Result.Body), len(body))
		}
		// pgx's buffer (16 MiB), the body as stored (copied once, then
		// decoded in place), and a tenth of the body for the rest.
		allocated := after.TotalAlloc - before.TotalAlloc
		if want := uint64(16<<20 + tc.stored + size/10); allocated > want {
			t.Errorf("%s: a replay of a %d-byte body (%d in the JSON) allocated %d bytes, want at most %d (%.2f times the body)",
				tc.name, size, tc.stored, allocated, want, float64(allocated)/size)
		}
	}
}

// TestUndecodableResult completes a key with a result that jsonb holds but
// idem.Result cannot decode (written by hand: both body fields), as an
// operator's manual edit might leave it. A replay and Inspect report the
// store unavailable, with the reason, rather than replaying something
// else; once the result's retention has run out, the key can be claimed
// and completed again, whatever the row held.
func TestUndecodableResult(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := migrated(t)
	clock := idemtest.NewClock()
	s := newStoreAt(t, pool, clock.Now, pgstore.Options{Retention: time.Hour})
	req := idem.ClaimRequest{Scope: "s", Key: key("k")}
	c := mustClaim(t, ctx, s, req, idem.Acquired)
	if err := s.Complete(ctx, c.Token, idem.Result{Status: 200, Body: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE idem_keys SET result = '{"status":200,"body":"ok","body_base64":"b2s="}'`); err != nil {
		t.Fatal(err)
	}

	_, err := s.Claim(ctx, req)
	if !errors.Is(err, idem.ErrUnavailable) || !strings.Contains(err.Error(), "both body and body_base64") {
		t.Errorf("replaying an undecodable result: %v, want the store unavailable, saying why", err)
	}
	if _, _, err := s.Inspect(ctx, "s", req.Key); !errors.Is(err, idem.ErrUnavailable) {
		t.Errorf("inspecting an undecodable result: %v, want the store unavailable", err)
	}

	clock.Advance(2 * time.Hour)
	again := mustClaim(t, ctx, s, req, idem.Acquired)
	if err := s.Complete(ctx, again.Token, idem.Result{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if got := mustClaim(t, ctx, s, req, idem.Completed).Result; got.Status != 201 {
		t.Errorf("replayed %+v after the key was claimed again, want status 201", got)
	}
}

package pgstore_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgstore"
)

// TestResultsInEveryQueryExecMode records results whose bytes jsonb cannot
// hold as they are (a NUL and invalid UTF-8 in header names and values and
// in bodies) through a pool in each of pgx's query exec modes, including
// the two that poolers in transaction mode need (exec and simple protocol,
// where a []byte parameter is sent as bytea), and replays them byte for
// byte, from the claim and from Inspect, and through CompleteTx.
func TestResultsInEveryQueryExecMode(t *testing.T) {
	t.Parallel()
	results := map[string]idem.Result{
		"text":           {Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"é\n\"x\"\\"}`)},
		"empty":          {Status: 204},
		"unreplayable":   {Unreplayable: true},
		"NUL in body":    {Status: 200, Body: []byte("a\x00b")},
		"binary body":    {Status: 200, Body: []byte{0xff, 0xfe, 0, 1, 2}},
		"NUL in header":  {Status: 200, Header: map[string][]string{"X-Trace": {"a\x00b"}, "Content-Type": {"text/plain"}}, Body: []byte("ok")},
		"bytes header":   {Status: 200, Header: map[string][]string{"X-Latin1": {"caf\xe9"}}},
		"NUL in name":    {Status: 200, Header: map[string][]string{"X\x00": {"v"}}},
		"many encodings": {Status: 200, Header: map[string][]string{"A": {"\x00", "ok"}}, Body: []byte{0}},
		// From pgstore's large-body size on, Complete encodes its
		// parameters itself (execLarge).
		"large text":   {Status: 201, Header: map[string][]string{"Content-Type": {"text/plain"}}, Body: []byte(strings.Repeat("é\"\\\n", 40<<10))},
		"large binary": {Status: 201, Body: bytes.Repeat([]byte{0, 0xff, 'a'}, 100<<10)},
	}
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
	} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			_, schema := migrated(t)
			cfg := testdb.Config(t, schema)
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool := testdb.NewPool(t, cfg)
			s := newStore(t, pool, pgstore.Options{})
			for name, res := range results {
				for _, inTx := range []bool{false, true} {
					k := key(name + map[bool]string{false: "", true: "/tx"}[inTx])
					c := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: k}, idem.Acquired)
					var err error
					if inTx {
						err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return s.CompleteTx(ctx, tx, c.Token, res) })
					} else {
						err = s.Complete(ctx, c.Token, res)
					}
					if err != nil {
						t.Fatalf("%s (in a transaction: %v): complete: %v", name, inTx, err)
					}
					got := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: k}, idem.Completed).Result
					if !got.Equal(res) {
						t.Errorf("%s (in a transaction: %v): replayed %+v, want %+v", name, inTx, got, res)
					}
					e, ok, err := s.Inspect(ctx, "s", k)
					if err != nil || !ok || !e.Result.Equal(res) {
						t.Errorf("%s (in a transaction: %v): inspected %+v, %v, %v; want %+v", name, inTx, e.Result, ok, err, res)
					}
				}
			}
		})
	}
}

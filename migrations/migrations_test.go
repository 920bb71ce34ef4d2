package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrations"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testdb.Main(m)) }

func TestUpConcurrentlyGivesOneSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, schema := testdb.Pool(t)
	// Four replicas starting at once: four pools, four goroutines.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		replica := testdb.NewPool(t, testdb.Config(t, schema))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = migrations.Up(ctx, replica, migrations.Options{})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Up #%d: %v", i, err)
		}
	}
	var tables, applied int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'idem_keys'`, schema).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_keys_goose_version WHERE version_id = 1 AND is_applied`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if tables != 1 || applied != 1 {
		t.Fatalf("tables = %d, version 1 applied %d times; want 1 and 1", tables, applied)
	}
	st, err := migrations.Status(ctx, pool, migrations.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 4 {
		t.Fatalf("status = %+v, want 4 versions", st)
	}
	for _, v := range st {
		if v.State != "applied" {
			t.Fatalf("status = %+v, want every version applied", st)
		}
	}
}

func TestUpDownSchemaQualified(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, schema := testdb.Pool(t)
	opts := migrations.Options{Table: schema + ".claims"}
	if err := migrations.Up(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	// Idempotent.
	if err := migrations.Up(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	var comments int
	if err := pool.QueryRow(ctx, `
		SELECT count(*) FROM pg_attribute a
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
		  AND col_description(a.attrelid, a.attnum) IS NULL`, opts.Table).Scan(&comments); err != nil {
		t.Fatal(err)
	}
	if comments != 0 {
		t.Errorf("%d columns without a comment", comments)
	}
	for range 4 { // version 4, 3, 2, then 1
		if err := migrations.Down(ctx, pool, opts); err != nil {
			t.Fatal(err)
		}
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, opts.Table).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatal("table still exists after Down")
	}
}

// TestDownWithNothingApplied: Down on a table never migrated, or rolled
// all the way back, says so with ErrNoneApplied and leaves nothing behind
// (no goose version table).
func TestDownWithNothingApplied(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := testdb.Pool(t)
	versionTable := func() bool {
		t.Helper()
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass('idem_keys_goose_version') IS NOT NULL`).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		return exists
	}
	if err := migrations.Down(ctx, pool, migrations.Options{}); !errors.Is(err, migrations.ErrNoneApplied) {
		t.Errorf("Down of a table never migrated: %v, want ErrNoneApplied", err)
	}
	if versionTable() {
		t.Error("Down of a table never migrated left a goose version table")
	}
	// A version table with nothing applied (left by an older release, or
	// by goose itself) is dropped too.
	if _, err := pool.Exec(ctx, `CREATE TABLE idem_keys_goose_version (id serial PRIMARY KEY, version_id bigint NOT NULL, is_applied boolean NOT NULL, tstamp timestamp DEFAULT now());
		INSERT INTO idem_keys_goose_version (version_id, is_applied) VALUES (0, true)`); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Down(ctx, pool, migrations.Options{}); !errors.Is(err, migrations.ErrNoneApplied) {
		t.Errorf("Down with only a version table: %v, want ErrNoneApplied", err)
	}
	if versionTable() {
		t.Error("Down with nothing applied kept the empty goose version table")
	}
}

func TestUpInvalidTable(t *testing.T) {
	t.Parallel()
	pool, _ := testdb.Pool(t)
	err := migrations.Up(t.Context(), pool, migrations.Options{Table: "x; DROP TABLE y"})
	if !errors.Is(err, migrations.ErrInvalidTable) {
		t.Fatalf("err = %v, want ErrInvalidTable", err)
	}
}

// TestUpPartitioned creates a hash-partitioned table: every partition has
// the primary key and the sweeper's two partial indexes, a column added on
// the parent later (as a later migration would) reaches every partition,
// and a mismatching or out-of-range Partitions is refused.
func TestUpPartitioned(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, schema := testdb.Pool(t)
	opts := migrations.Options{Table: schema + ".claims", Partitions: 4}
	if err := migrations.Up(ctx, pool, opts); err != nil {
		t.Fatalf("Up: %v", err)
	}
	rows, err := pool.Query(ctx, `
		SELECT c.relname, count(ix.indexrelid) FILTER (WHERE ix.indisprimary),
		       count(ix.indexrelid) FILTER (WHERE pg_get_indexdef(ix.indexrelid) LIKE '%(lease_end) WHERE (state = ''claimed''::text)'),
		       count(ix.indexrelid) FILTER (WHERE pg_get_indexdef(ix.indexrelid) LIKE '%(expires_at) WHERE (state = ''completed''::text)')
		  FROM pg_inherits h
		  JOIN pg_class c ON c.oid = h.inhrelid
		  LEFT JOIN pg_index ix ON ix.indrelid = c.oid
		 WHERE h.inhparent = $1::regclass
		 GROUP BY c.relname ORDER BY c.relname`, opts.Table)
	if err != nil {
		t.Fatal(err)
	}
	type part struct {
		name                   string
		pkey, leaseEnd, expiry int
	}
	parts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (part, error) {
		var p part
		return p, r.Scan(&p.name, &p.pkey, &p.leaseEnd, &p.expiry)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 4 {
		t.Fatalf("partitions = %+v, want 4", parts)
	}
	for i, p := range parts {
		if p != (part{fmt.Sprintf("claims_p%d", i), 1, 1, 1}) {
			t.Errorf("partition %d: %+v, want claims_p%d with a primary key and both sweeper indexes", i, p, i)
		}
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE `+opts.Table+` ADD COLUMN later boolean NOT NULL DEFAULT false`); err != nil {
		t.Fatal(err)
	}
	var withColumn int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND column_name = 'later'`, schema).Scan(&withColumn); err != nil {
		t.Fatal(err)
	}
	if withColumn != 5 {
		t.Errorf("a column added on the parent is on %d tables, want the parent and 4 partitions", withColumn)
	}

	// Up again: the same count is fine, zero accepts what exists, another
	// count is refused.
	for _, n := range []int{4, 0} {
		if err := migrations.Up(ctx, pool, migrations.Options{Table: opts.Table, Partitions: n}); err != nil {
			t.Errorf("Up again with Partitions %d: %v", n, err)
		}
	}
	if err := migrations.Up(ctx, pool, migrations.Options{Table: opts.Table, Partitions: 8}); !errors.Is(err, migrations.ErrPartitions) {
		t.Errorf("Up with Partitions 8 on a table of 4: %v, want ErrPartitions", err)
	}
	for _, n := range []int{-1, migrations.MaxPartitions + 1} {
		if err := migrations.Up(ctx, pool, migrations.Options{Table: schema + ".other", Partitions: n}); !errors.Is(err, migrations.ErrPartitions) {
			t.Errorf("Up with Partitions %d: %v, want ErrPartitions", n, err)
		}
	}
	downToZero(ctx, t, pool, opts)
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND (tablename = 'claims' OR tablename LIKE 'claims\_p%')`, schema).Scan(&left); err != nil || left != 0 {
		t.Errorf("after Down: %d of the table and its partitions left, %v; want none", left, err)
	}
}

// downToZero rolls back every applied migration, the first (which drops
// the table) last.
func downToZero(ctx context.Context, t *testing.T, pool *pgxpool.Pool, opts migrations.Options) {
	t.Helper()
	for {
		st, err := migrations.Status(ctx, pool, opts)
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		applied := false
		for _, m := range st {
			applied = applied || m.State == "applied"
		}
		if !applied {
			return
		}
		if err := migrations.Down(ctx, pool, opts); err != nil {
			t.Fatalf("Down: %v", err)
		}
	}
}

// TestUpgradeFromVersion1 upgrades an installation of version 1 holding a
// live claim and a result: both survive, the claim starts unmarked, and the
// replaced completion function completes the claim.
func TestUpgradeFromVersion1(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := testdb.Pool(t)
	if err := migrations.UpTo(ctx, pool, migrations.Options{}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO idem_keys (scope, key, generation, state, lease_end, created_at)
		VALUES ('s', 'key/claimed', nextval('idem_keys_generation_seq'), 'claimed', now() + interval '1 hour', now());
		INSERT INTO idem_keys (scope, key, generation, state, result, created_at, completed_at)
		VALUES ('s', 'key/done', nextval('idem_keys_generation_seq'), 'completed', '{"status":201}', now(), now())`); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	var gen int64
	var waited bool
	if err := pool.QueryRow(ctx, `SELECT generation, waited FROM idem_keys WHERE key = 'key/claimed'`).Scan(&gen, &waited); err != nil {
		t.Fatal(err)
	}
	if waited {
		t.Error("an upgraded claim is marked as waited on")
	}
	if _, err := pool.Exec(ctx, `SELECT idem_keys_complete('s', 'key/claimed', $1, '{"status":200}', -1, NULL)`, gen); err != nil {
		t.Fatalf("completing an upgraded claim: %v", err)
	}
	// The completion function, which instances of an earlier version
	// still call, raises the stale-claim error through migration 3's
	// function.
	_, err := pool.Exec(ctx, `SELECT idem_keys_complete('s', 'key/claimed', $1, '{"status":200}', -1, NULL)`, gen)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "IDM01" || pgErr.Detail != fmt.Sprintf("current generation %d", gen) {
		t.Fatalf("completing twice: %v, want SQLSTATE IDM01 naming generation %d", err, gen)
	}
	var states []string
	rows, _ := pool.Query(ctx, `SELECT state FROM idem_keys ORDER BY key`)
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		states = append(states, s)
	}
	if rows.Err() != nil || len(states) != 2 || states[0] != "completed" || states[1] != "completed" {
		t.Fatalf("states after upgrade and completion = %v, %v", states, rows.Err())
	}
}

// TestRequestLabelsUpAndDown: migration 4 adds the request labels to a
// table with rows, which keep theirs (null: not recorded), and rolling it
// back drops them and keeps the rows.
func TestRequestLabelsUpAndDown(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := testdb.Pool(t)
	if err := migrations.UpTo(ctx, pool, migrations.Options{}, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO idem_keys (scope, key, generation, state, lease_end, created_at)
		VALUES ('s', 'key/claimed', nextval('idem_keys_generation_seq'), 'claimed', now() + interval '1 hour', now());
		INSERT INTO idem_keys (scope, key, generation, state, result, created_at, completed_at)
		VALUES ('s', 'key/done', nextval('idem_keys_generation_seq'), 'completed', '{"status":201}', now(), now())`); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	var unlabelled int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_keys WHERE method IS NULL AND route IS NULL AND caller IS NULL`).Scan(&unlabelled); err != nil {
		t.Fatal(err)
	}
	if unlabelled != 2 {
		t.Fatalf("%d rows without labels after the upgrade, want 2", unlabelled)
	}
	if _, err := pool.Exec(ctx, `UPDATE idem_keys SET method = 'POST', route = 'POST /payments', caller = 'acct-7' WHERE key = 'key/done'`); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Down(ctx, pool, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_keys`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 2 {
		t.Fatalf("%d rows after rolling back, want 2", rows)
	}
	var labelColumns int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_name = 'idem_keys' AND table_schema = current_schema() AND column_name IN ('method', 'route', 'caller')`).Scan(&labelColumns); err != nil {
		t.Fatal(err)
	}
	if labelColumns != 0 {
		t.Fatalf("%d label columns after rolling back, want none", labelColumns)
	}
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		t.Fatalf("up again after rolling back: %v", err)
	}
}

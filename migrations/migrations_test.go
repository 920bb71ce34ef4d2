package migrations_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrations"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testdb.Main(m)) }

func TestObjectsForValidates(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"Idem", "idem keys", "a.b.c", "1abc", "idem;drop", `"idem"`, ".idem", "idem.",
		"a23456789012345678901234567890123456789012345678x", // 49 bytes
	} {
		if _, err := migrations.ObjectsFor(name); !errors.Is(err, migrations.ErrInvalidTable) {
			t.Errorf("ObjectsFor(%q) = %v, want ErrInvalidTable", name, err)
		}
	}
	for _, name := range []string{"", "idem_keys", "ops.idem_keys", "a23456789012345678901234567890123456789012345678"} {
		if _, err := migrations.ObjectsFor(name); err != nil {
			t.Errorf("ObjectsFor(%q) = %v", name, err)
		}
	}
	o, _ := migrations.ObjectsFor("")
	if o.Table != migrations.DefaultTable {
		t.Errorf("default table = %q", o.Table)
	}
}

func TestUpConcurrentlyGivesOneSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
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
	if len(st) != 2 || st[0].State != "applied" || st[1].State != "applied" {
		t.Fatalf("status = %+v", st)
	}
}

func TestUpDownSchemaQualified(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
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
	for range 2 { // version 2, then version 1
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

func TestUpInvalidTable(t *testing.T) {
	t.Parallel()
	pool, _ := testdb.Pool(t)
	err := migrations.Up(context.Background(), pool, migrations.Options{Table: "x; DROP TABLE y"})
	if !errors.Is(err, migrations.ErrInvalidTable) {
		t.Fatalf("err = %v, want ErrInvalidTable", err)
	}
}

// TestUpgradeFromVersion1 upgrades an installation of version 1 holding a
// live claim and a result: both survive, the claim starts unmarked, and the
// replaced completion function completes the claim.
func TestUpgradeFromVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
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

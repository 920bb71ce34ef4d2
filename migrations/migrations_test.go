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
	if len(st) != 1 || st[0].State != "applied" {
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
	if err := migrations.Down(ctx, pool, opts); err != nil {
		t.Fatal(err)
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

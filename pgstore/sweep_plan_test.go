package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// TestSweepPlanScalesWithTheBatch checks the plan of the sweep statement on
// a table of 100,000 expired results, ordinary and in 16 hash partitions, with
// the plan PostgreSQL makes for the batch's value (custom) and the one it
// may cache for any value (generic): no sequential scan of the table, so a
// batch costs the same on a backlog of a million rows as on a thousand
// (measured with integration/cmd/sweepbench; see docs/operations.md).
func TestSweepPlanScalesWithTheBatch(t *testing.T) {
	t.Parallel()
	for _, partitions := range []int{0, 16} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			t.Run(fmt.Sprintf("partitions=%d/%s", partitions, mode), func(t *testing.T) {
				t.Parallel()
				ctx := testCtx(t)
				pool, _ := migratedWith(t, migrations.Options{Partitions: partitions})
				if _, err := pool.Exec(ctx, `
					INSERT INTO idem_keys (scope, key, generation, state, result, created_at, completed_at, expires_at)
					SELECT 's'::bytea, 'id/e' || i, nextval('idem_keys_generation_seq'), 'completed', '{}',
					       now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'
					  FROM generate_series(1, 100000) i;
					ANALYZE idem_keys`); err != nil {
					t.Fatal(err)
				}
				s := newStore(t, pool, pgstore.Options{})
				plan := explainSweep(ctx, t, pool, pgstore.SweepSQL(s, idem.DefaultSweepBatch), mode)
				if strings.Contains(plan, "Seq Scan") {
					t.Errorf("the sweep scans the whole table:\n%s", plan)
				}
			})
		}
	}
}

// explainSweep returns the plan of sweepSQL under plan_cache_mode mode. It
// runs in one transaction, so that a transaction-mode pooler keeps its
// statements on one server connection.
func explainSweep(ctx context.Context, t *testing.T, pool *pgxpool.Pool, sweepSQL, mode string) string {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	for _, stmt := range []string{
		`SET LOCAL plan_cache_mode = ` + mode,
		`PREPARE sweep_plan(timestamptz) AS ` + sweepSQL,
	} {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { _, _ = tx.Exec(context.Background(), `DEALLOCATE sweep_plan`) }()
	rows, err := tx.Query(ctx, `EXPLAIN EXECUTE sweep_plan(NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// Command sweepbench measures pgstore's sweeper on a large backlog of
// expired results, on an ordinary and on hash-partitioned claim tables
// (migrations.Options.Partitions): for each configuration it fills a fresh
// schema with -rows completed results whose retention ran out, takes a
// checkpoint, sweeps them all with pgstore.Store.Sweep in batches of -batch
// (as the store's sweeper does), and prints the rate, the WAL written (the difference
// of pg_current_wal_lsn around the sweep) and the table's size (heap, TOAST
// and indexes of every partition) before the sweep, after it and after a
// VACUUM, which is what autovacuum would do next.
//
// Run it against a private server, never a shared one: it checkpoints and
// writes gigabytes of WAL.
//
//	go run ./cmd/sweepbench -database-url postgres://idem@127.0.0.1:55433/idem -rows 1000000 -partitions 0,16
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

func main() {
	dbURL := flag.String("database-url", "", "PostgreSQL `URL` of a private server (required)")
	rows := flag.Int("rows", 1_000_000, "expired results to sweep")
	batch := flag.Int("batch", idem.DefaultSweepBatch, "rows per Sweep call")
	parts := flag.String("partitions", "0,16", "comma-separated partition counts to measure (0: an ordinary table)")
	flag.Parse()
	if *dbURL == "" {
		fmt.Fprintln(os.Stderr, "sweepbench: -database-url is required")
		os.Exit(2)
	}
	if err := run(context.Background(), *dbURL, *rows, *batch, *parts); err != nil {
		fmt.Fprintln(os.Stderr, "sweepbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dbURL string, rows, batch int, parts string) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	fmt.Printf("| partitions | rows | batch | sweep s | rows/s | WAL MiB | WAL bytes/row | size before MiB | after sweep MiB | after VACUUM MiB |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range strings.Split(parts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return fmt.Errorf("-partitions: %w", err)
		}
		if err := measure(ctx, pool, rows, batch, n); err != nil {
			return fmt.Errorf("partitions %d: %w", n, err)
		}
	}
	return nil
}

func measure(ctx context.Context, pool *pgxpool.Pool, rows, batch, partitions int) error {
	schema := fmt.Sprintf("sweepbench_p%d", partitions)
	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE; CREATE SCHEMA `+schema); err != nil {
		return err
	}
	table := schema + ".idem_keys"
	if err := migrations.Up(ctx, pool, migrations.Options{Table: table, Partitions: partitions}); err != nil {
		return err
	}
	// Results shaped like the demo's: a 201 with a small JSON invoice.
	if _, err := pool.Exec(ctx, `
		INSERT INTO `+table+` (scope, key, generation, state, result, created_at, completed_at, expires_at)
		SELECT convert_to('tenant-' || (i % 1000), 'UTF8'), 'key/' || md5(i::text), nextval('`+table+`_generation_seq'), 'completed',
		       jsonb_build_object('status', 201, 'header', jsonb_build_object('Content-Type', jsonb_build_array('application/json')),
		                          'body', '{"id":' || i || ',"customer":"customer-' || i || '","amount_cents":1250}'),
		       now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'
		  FROM generate_series(1, $1) i`, rows); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
		return err
	}
	before, err := size(ctx, pool, table)
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return err
	}
	store, err := pgstore.New(pool, pgstore.Options{Table: table})
	if err != nil {
		return err
	}
	defer store.Close()
	var startLSN string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&startLSN); err != nil {
		return err
	}
	start := time.Now()
	swept := 0
	for {
		st, err := store.Sweep(ctx, batch)
		if err != nil {
			return err
		}
		swept += st.Expired + st.Abandoned
		if st.Expired+st.Abandoned == 0 {
			break
		}
	}
	elapsed := time.Since(start)
	var wal int64
	if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, startLSN).Scan(&wal); err != nil {
		return err
	}
	if swept != rows {
		return fmt.Errorf("swept %d rows, want %d", swept, rows)
	}
	after, err := size(ctx, pool, table)
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `VACUUM `+table); err != nil {
		return err
	}
	vacuumed, err := size(ctx, pool, table)
	if err != nil {
		return err
	}
	const mib = 1 << 20
	fmt.Printf("| %d | %d | %d | %.1f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n",
		partitions, rows, batch, elapsed.Seconds(), float64(rows)/elapsed.Seconds(),
		float64(wal)/mib, float64(wal)/float64(rows), float64(before)/mib, float64(after)/mib, float64(vacuumed)/mib)
	_, err = pool.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
	return err
}

// size is the table's total size: heap, TOAST and indexes, of the table or
// of every partition (pg_partition_tree has no rows for an ordinary table).
func size(ctx context.Context, pool *pgxpool.Pool, table string) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(relid)), pg_total_relation_size($1::regclass))::bigint FROM pg_partition_tree($1::regclass)`, table).Scan(&n)
	return n, err
}

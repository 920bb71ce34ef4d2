package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/migrations"
)

func (c *cli) migrate(ctx context.Context, args []string) error {
	var yes bool
	var partitions int
	fs := c.subFlagSet("migrate", "up|down|status",
		"up applies every migration not yet applied (safe to run from several replicas at once);\n"+
			"with --partitions N a table it creates is hash-partitioned on (scope, key) in N partitions.\n"+
			"down rolls back the most recent one, and needs --yes: rolling back the first DROPS the\n"+
			"table and every recorded result (and the version table); rolling back a later one keeps\n"+
			"the rows, but instances of this release need every migration.\n"+
			"status lists the migrations and whether each is applied.")
	fs.BoolVar(&yes, "yes", false, "confirm \"down\"")
	fs.IntVar(&partitions, "partitions", 0, "up: create the table PARTITION BY HASH (scope, key) with `N` partitions (0: one table); on an existing table, N must match")
	positional, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return cmdUsagef(fs, "want exactly one of up, down, status")
	}
	action := positional[0]
	if action != "up" && action != "down" && action != "status" {
		return cmdUsagef(fs, "unknown action %q: want up, down or status", action)
	}
	if partitions < 0 || partitions > migrations.MaxPartitions {
		return cmdUsagef(fs, "--partitions %d: want 0 to %d", partitions, migrations.MaxPartitions)
	}
	if err := c.validateTable(); err != nil {
		return err
	}
	pool, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	opts := migrations.Options{Table: c.table, Partitions: partitions}
	switch action {
	case "up":
		if err := migrations.Up(ctx, pool, opts); err != nil {
			return err
		}
	case "down":
		if err := c.down(ctx, pool, opts, yes); err != nil {
			return err
		}
	}
	st, err := migrations.Status(ctx, pool, opts)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "table %s\nVERSION\tSTATE\tAPPLIED AT\n", c.tableName())
	for _, m := range st {
		applied := "-"
		if !m.AppliedAt.IsZero() {
			applied = m.AppliedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", m.Version, m.State, applied)
	}
	return tw.Flush()
}

// down rolls back the latest migration, once confirmed, saying first what
// that does to this table.
func (c *cli) down(ctx context.Context, pool *pgxpool.Pool, opts migrations.Options, yes bool) error {
	st, err := migrations.Status(ctx, pool, opts)
	if err != nil {
		return err
	}
	var latest *migrations.MigrationVersion
	for i := range st {
		if st[i].State == migrations.MigrationApplied {
			latest = &st[i]
		}
	}
	if latest == nil {
		if yes { // drops an empty version table, if any: nothing is left
			if err := migrations.Down(ctx, pool, opts); err != nil && !errors.Is(err, migrations.ErrNoneApplied) {
				return err
			}
		}
		fmt.Fprintf(c.stdout, "no migration of table %s is applied: nothing to roll back\n", c.tableName())
		return nil
	}
	what := fmt.Sprintf("migration %d (%s) of table %s", latest.Version, latest.Name, c.tableName())
	effect := "the table and its rows stay, but instances of this release need the migration"
	if latest.Version == 1 {
		effect = "it DROPS the table, every recorded result and the version table"
	}
	if !yes {
		return usageOf("migrate", fmt.Sprintf("migrate down would roll back %s: %s; add --yes to confirm", what, effect))
	}
	if err := migrations.Down(ctx, pool, opts); err != nil {
		return err
	}
	if latest.Version == 1 {
		fmt.Fprintf(c.stdout, "rolled back %s: dropped the table, its recorded results and its version table\n", what)
	} else {
		fmt.Fprintf(c.stdout, "rolled back %s\n", what)
	}
	return nil
}

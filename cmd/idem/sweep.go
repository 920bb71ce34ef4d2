package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem"
)

func (c *cli) sweep(ctx context.Context, args []string) error {
	var (
		once     bool
		interval time.Duration
		batch    int
	)
	fs := c.subFlagSet("sweep", "[--once] [--interval D] [--batch N]",
		"Releases claims whose lease ran out and deletes results past retention, in batches.\n"+
			"Without --once it runs until interrupted (Ctrl-C, SIGINT or SIGTERM), as a service does:\n"+
			"it sweeps at once, then every --interval (±50%), logging each sweep to stderr. With --once\n"+
			"it sweeps until nothing is left, prints what it removed and exits: the form for a terminal\n"+
			"or a cron job. Safe next to the applications' sweepers.")
	fs.BoolVar(&once, "once", false, "sweep until nothing is left and exit (without it: run until interrupted)")
	fs.DurationVar(&interval, "interval", time.Minute, "time between sweeps when not --once")
	fs.IntVar(&batch, "batch", idem.DefaultSweepBatch, "rows deleted per statement")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if interval <= 0 || batch <= 0 {
		return cmdUsagef(fs, "--interval and --batch must be positive")
	}
	s, closeStore, err := c.store(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	sw := idem.Sweeper{Store: s, Interval: interval, Batch: batch}
	if !once {
		return c.sweepLoop(ctx, sw)
	}
	total, err := sw.SweepOnce(ctx)
	if err != nil {
		return c.tableError(err)
	}
	fmt.Fprintf(c.stdout, "swept: %d abandoned claims released, %d expired results deleted\n", total.Abandoned, total.Expired)
	return nil
}

// sweepLoop runs sw until ctx ends, logging at info when it starts, after
// each round (what it removed, zero included) and when it stops; a failed
// round is logged by the Sweeper, at warn.
func (c *cli) sweepLoop(ctx context.Context, sw idem.Sweeper) error {
	logger := slog.New(slog.NewTextHandler(c.stderr, nil))
	var rounds int
	var total idem.SweepStats
	sw.Logger = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sw.OnSweep = func(ctx context.Context, st idem.SweepStats) {
		rounds++
		total.Abandoned += st.Abandoned
		total.Expired += st.Expired
		logger.Info("swept", "abandoned", st.Abandoned, "expired", st.Expired)
	}
	logger.Info("sweeping until SIGINT or SIGTERM", "table", c.tableName(), "interval", sw.Interval, "batch", sw.Batch)
	if err := sw.Run(ctx); err != nil {
		return err
	}
	logger.Info("stopped sweeping", "rounds", rounds, "abandoned", total.Abandoned, "expired", total.Expired)
	return nil
}

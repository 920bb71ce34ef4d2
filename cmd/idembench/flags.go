package main

// The command line: idembench's flags and their checks.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// config is the parsed command line.
type config struct {
	concurrency int
	duration    time.Duration
	rounds      int
	warmup      time.Duration
	modes       []string
	databaseURL string
	table       string
	retryShare  float64
	replayKeys  int
	poolConns   int
	replayCache int
	cpuProfile  string
	memProfile  string
	csvFile     string
	instances   []int
	waiters     []int
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var (
		c    config
		mode string
	)
	fs := flag.NewFlagSet("idembench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.concurrency, "concurrency", 16, "concurrent clients (goroutines, each with its own keep-alive connection)")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "measured time per mode")
	fs.IntVar(&c.rounds, "rounds", 20, "split each mode's duration into this many slices, the modes taking turns slice by slice")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "unmeasured time per mode before measuring (connections, caches, JIT of the planner)")
	fs.StringVar(&mode, "mode", "all", "comma-separated modes: "+strings.Join(allModes, ", ")+", wait, "+strings.Join(doorModes, ", ")+"; all (every mode but wait and the doors'), doors (the doors')")
	fs.StringVar(&c.csvFile, "csv", "", "also write every measurement to this CSV file, one row each: series,clients,instances,metric,value,unit")
	instances := fs.String("instances", "1,3", "wait mode: comma-separated numbers of store instances (each its own pool and LISTEN connection)")
	waiters := fs.String("waiters", "0,1,8", "wait mode: comma-separated numbers of waiters per key")
	fs.StringVar(&c.databaseURL, "database-url", getenv("TEST_DATABASE_URL"), "PostgreSQL URL (default $TEST_DATABASE_URL)")
	fs.StringVar(&c.table, "table", "", `claim table ("table" or "schema.table"), migrated if needed and left in place; empty means a schema of idembench's own, dropped at the end`)
	fs.Float64Var(&c.retryShare, "retry-share", 0.2, "mixed mode: share of requests that reuse a recent key of the same client (0..1)")
	fs.IntVar(&c.replayKeys, "replay-keys", 1000, "replay mode: number of completed keys requested again and again")
	fs.IntVar(&c.poolConns, "pool-conns", 0, "PostgreSQL pool size; 0 means -concurrency")
	fs.IntVar(&c.replayCache, "replay-cache", 64<<20, "pgstore.Options.ReplayCacheBytes: bytes of completed results cached in process; 0 turns the cache off")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of each measured mode to this file (mode name inserted before the extension when several modes run)")
	fs.StringVar(&c.memProfile, "memprofile", "", "write an allocation profile after each measured mode (cumulative since start: profile one mode per run for a clean picture)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case c.concurrency < 1:
		return c, fmt.Errorf("-concurrency must be at least 1, not %d", c.concurrency)
	case c.duration <= 0:
		return c, fmt.Errorf("-duration must be positive, not %v", c.duration)
	case c.rounds < 1:
		return c, fmt.Errorf("-rounds must be at least 1, not %d", c.rounds)
	case c.duration/time.Duration(max(c.rounds, 1)) < time.Millisecond:
		return c, fmt.Errorf("-duration %v is too short for %d rounds", c.duration, c.rounds)
	case (c.cpuProfile != "" || c.memProfile != "") && c.rounds > 1:
		return c, errors.New("-cpuprofile and -memprofile need -rounds 1 (a profile covers one continuous slice)")
	case c.warmup < 0:
		return c, fmt.Errorf("-warmup must not be negative, not %v", c.warmup)
	case c.retryShare < 0 || c.retryShare > 1 || math.IsNaN(c.retryShare):
		return c, fmt.Errorf("-retry-share must be between 0 and 1, not %v", c.retryShare)
	case c.replayKeys < 1:
		return c, fmt.Errorf("-replay-keys must be at least 1, not %d", c.replayKeys)
	case c.replayCache < 0:
		return c, fmt.Errorf("-replay-cache must not be negative, not %d", c.replayCache)
	case c.poolConns < 0:
		return c, fmt.Errorf("-pool-conns must not be negative, not %d", c.poolConns)
	case c.databaseURL == "":
		return c, errors.New("no database: set -database-url or TEST_DATABASE_URL")
	}
	if c.poolConns == 0 {
		c.poolConns = c.concurrency
	}
	modes, err := parseModes(mode)
	if err != nil {
		return c, err
	}
	c.modes = modes
	if c.instances, err = parseInts("-instances", *instances, 1); err != nil {
		return c, err
	}
	if c.waiters, err = parseInts("-waiters", *waiters, 0); err != nil {
		return c, err
	}
	return c, nil
}

// parseInts parses a comma-separated list of integers, each at least least.
func parseInts(flagName, s string, least int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < least {
			return nil, fmt.Errorf("%s: %q is not a number of at least %d", flagName, f, least)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseModes(s string) ([]string, error) {
	if s == "all" {
		return allModes, nil
	}
	var modes []string
	for m := range strings.SplitSeq(s, ",") {
		m = strings.TrimSpace(m)
		if m == modeDoors {
			for _, a := range doorModes {
				if !slices.Contains(modes, a) {
					modes = append(modes, a)
				}
			}
			continue
		}
		if m == "all" {
			for _, a := range allModes {
				if !slices.Contains(modes, a) {
					modes = append(modes, a)
				}
			}
			continue
		}
		if !slices.Contains(allModes, m) && !slices.Contains(doorModes, m) && m != modeWait {
			return nil, fmt.Errorf("unknown mode %q (want %s, %s, %s, %s, or all)", m, strings.Join(allModes, ", "), strings.Join(doorModes, ", "), modeDoors, modeWait)
		}
		if !slices.Contains(modes, m) {
			modes = append(modes, m)
		}
	}
	return modes, nil
}

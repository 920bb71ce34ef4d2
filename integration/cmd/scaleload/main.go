// Command scaleload measures how the demo service (cmd/idemdemo) scales
// with the number of instances on one PostgreSQL database, against the
// floor of the same database work done without idem.
//
// For each workload, new keys and a retry mix (-retry-share of requests
// repeat a key answered before, sent to another instance than the one that
// answered it), it measures in one invocation, for -duration each, in
// -rounds slices taken in turn so that the load of a shared machine falls on
// every configuration alike:
//
//	floor        -clients goroutines doing the demo's own database work
//	             through pgx, with no HTTP and no idem: a new key is the
//	             demo's invoice transaction (BEGIN; INSERT … RETURNING id;
//	             COMMIT); a retry is a primary-key read of an invoice
//	             (what answering it again costs an application that kept
//	             its answers itself)
//	floor + pg_notify per invoice
//	             the same, with a pg_notify in each invoice transaction
//	             (as a completion with a waiter sends one): what a
//	             notifying commit costs PostgreSQL
//	instances=N  N demo processes on the same database (each with its own
//	             pool of up to -clients connections, and its own sweeper),
//	             -clients HTTP clients sending each request to the next
//	             instance in turn
//
// and prints one table: requests/s, the ratio to the floor, latency
// percentiles, and any answer other than the expected 201 (a 409 would be a
// duplicate that did not wait). Every configuration gets a fresh schema.
//
// Run it against a private server, not a shared one:
//
//	go run ./cmd/scaleload -database-url 'postgres://idem@127.0.0.1:55433/idem' -instances 1,2,3 -duration 10s
//
// The demo is built from this checkout (without the race detector) unless
// -demo names a binary, or several as label=path,label=path: each build's
// instances are then measured in the same run, side by side. See
// docs/performance.md ("Instances on one database").
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/demoproc"
)

type config struct {
	dbURL      string
	demo       string
	instances  []int
	clients    int
	duration   time.Duration
	retryShare float64
	rounds     int
	demoArgs   []string
}

func main() {
	var cfg config
	var instances, demoArgs string
	flag.StringVar(&cfg.dbURL, "database-url", "", "PostgreSQL `URL` of a private server (required)")
	flag.StringVar(&cfg.demo, "demo", "", "idemdemo `binaries`: a path, or label=path,label=path to measure several builds side by side (empty: build one from this checkout)")
	flag.StringVar(&instances, "instances", "1,2,3", "comma-separated instance counts")
	flag.IntVar(&cfg.clients, "clients", 16, "concurrent clients")
	flag.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long each configuration runs")
	flag.Float64Var(&cfg.retryShare, "retry-share", 0.2, "share of requests that retry an answered key, in the retry mix")
	flag.IntVar(&cfg.rounds, "rounds", 10, "slices each configuration's -duration is cut into; configurations take turns slice by slice")
	flag.StringVar(&demoArgs, "demo-args", "-log-level warn", "extra arguments for each demo process")
	flag.Parse()
	for _, s := range strings.Split(instances, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintln(os.Stderr, "scaleload: -instances: want positive integers")
			os.Exit(2)
		}
		cfg.instances = append(cfg.instances, n)
	}
	cfg.demoArgs = strings.Fields(demoArgs)
	if cfg.dbURL == "" || cfg.rounds < 1 || cfg.clients < 1 {
		fmt.Fprintln(os.Stderr, "scaleload: -database-url is required; -rounds and -clients must be positive")
		os.Exit(2)
	}
	if err := run(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, "scaleload:", err)
		os.Exit(1)
	}
}

// target is one configuration under measurement: op sends one request.
type target struct {
	name string
	op   func(ctx context.Context, worker int, retry bool) (int, error)
}

// demoBinary is one idemdemo build under measurement.
type demoBinary struct{ label, path string }

// demoBinaries parses -demo: "", a path, or label=path pairs.
func demoBinaries(flagValue string) ([]demoBinary, error) {
	if flagValue == "" {
		return nil, nil
	}
	if !strings.Contains(flagValue, "=") {
		return []demoBinary{{path: flagValue}}, nil
	}
	var bs []demoBinary
	for _, pair := range strings.Split(flagValue, ",") {
		label, path, ok := strings.Cut(pair, "=")
		if !ok || label == "" || path == "" {
			return nil, fmt.Errorf("-demo: %q: want label=path", pair)
		}
		bs = append(bs, demoBinary{label: label, path: path})
	}
	return bs, nil
}

func run(ctx context.Context, cfg config) error {
	binaries, err := demoBinaries(cfg.demo)
	if err != nil {
		return err
	}
	if len(binaries) == 0 {
		path, cleanup, err := demoproc.Build(false)
		if err != nil {
			return err
		}
		defer cleanup()
		binaries = []demoBinary{{path: path}}
	}
	// Every configuration is set up first (its own schema, its own demo
	// processes), then they take turns slice by slice, so that the load of
	// a shared machine falls on all of them alike.
	floor, closeFloor, err := setupFloor(ctx, cfg, false)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	defer closeFloor()
	notifying, closeNotifying, err := setupFloor(ctx, cfg, true)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	defer closeNotifying()
	targets := []target{floor, notifying}
	for _, b := range binaries {
		for _, n := range cfg.instances {
			t, closeT, err := setupInstances(ctx, cfg, b, n)
			if err != nil {
				return fmt.Errorf("%d instances: %w", n, err)
			}
			defer closeT()
			targets = append(targets, t)
		}
	}
	fmt.Printf("clients %d, %v per configuration in %d slices taken in turn, retry share %.0f%% in the retry mix\n\n",
		cfg.clients, cfg.duration, cfg.rounds, cfg.retryShare*100)
	fmt.Println("| workload | configuration | requests/s | vs floor | p50 ms | p99 ms | other answers |")
	fmt.Println("|---|---|---|---|---|---|---|")
	slice := cfg.duration / time.Duration(cfg.rounds)
	for _, w := range []struct {
		name  string
		share float64
	}{{"new keys", 0}, {fmt.Sprintf("%.0f%% retries", cfg.retryShare*100), cfg.retryShare}} {
		results := make([]result, len(targets))
		for i, t := range targets {
			results[i] = result{name: t.name, other: map[int]int{}}
		}
		for range cfg.rounds {
			for i, t := range targets {
				results[i].add(loop(ctx, cfg.clients, slice, w.share, t.op))
			}
		}
		for _, r := range results {
			printRow(w.name, r, results[0])
		}
	}
	return nil
}

func printRow(workload string, r, floor result) {
	other := "none"
	if len(r.other) > 0 {
		other = fmt.Sprint(r.other)
	}
	fmt.Printf("| %s | %s | %.0f | %.2f | %.1f | %.1f | %s |\n", workload, r.name, r.rate(), r.rate()/floor.rate(),
		float64(r.percentile(0.5).Microseconds())/1000, float64(r.percentile(0.99).Microseconds())/1000, other)
}

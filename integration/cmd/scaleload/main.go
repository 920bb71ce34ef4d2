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
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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

// result is one configuration's measurement.
type result struct {
	name      string
	requests  int
	elapsed   time.Duration
	latencies []time.Duration
	other     map[int]int // answers other than 201, by status (0: transport error)
}

func (r *result) add(o result) {
	r.requests += o.requests
	r.elapsed += o.elapsed
	r.latencies = append(r.latencies, o.latencies...)
	for s, c := range o.other {
		r.other[s] += c
	}
}

func (r result) rate() float64 { return float64(r.requests) / r.elapsed.Seconds() }

func (r result) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	slices.Sort(r.latencies)
	return r.latencies[int(p*float64(len(r.latencies)-1))]
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

// freshSchema creates a schema of its own and returns the database URL
// with search_path set to it, and a function that drops it.
func freshSchema(ctx context.Context, cfg config) (string, *pgxpool.Pool, func(), error) {
	admin, err := pgxpool.New(ctx, cfg.dbURL)
	if err != nil {
		return "", nil, nil, err
	}
	schema := fmt.Sprintf("scaleload_%08x", rand.Uint32())
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		admin.Close()
		return "", nil, nil, err
	}
	u, err := url.Parse(cfg.dbURL)
	if err != nil {
		admin.Close()
		return "", nil, nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	drop := func() {
		_, _ = admin.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		admin.Close()
	}
	return u.String(), admin, drop, nil
}

// loop runs clients workers for d; each call of op is one request, retry
// saying whether it should repeat an earlier one. It returns the
// measurement.
func loop(ctx context.Context, clients int, d time.Duration, share float64, op func(ctx context.Context, worker int, retry bool) (int, error)) result {
	r := result{other: map[int]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			n, other := 0, map[int]int{}
			for ctx.Err() == nil {
				t0 := time.Now()
				status, err := op(ctx, w, share > 0 && rand.Float64() < share)
				if ctx.Err() != nil {
					break // cut off by the end of the run: not counted
				}
				if err != nil {
					status = 0
				}
				if status != http.StatusCreated {
					other[status]++
					continue
				}
				n++
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			r.requests += n
			r.latencies = append(r.latencies, lat...)
			for s, c := range other {
				r.other[s] += c
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	return r
}

// setupFloor prepares the floor: a schema with the demo's invoices table and
// a pool of -clients connections. With notify, each invoice transaction
// also calls pg_notify, as a completion whose row a waiter marked does:
// what notifying on every commit costs PostgreSQL alone. The returned
// function drops them.
func setupFloor(ctx context.Context, cfg config, notify bool) (target, func(), error) {
	dbURL, _, drop, err := freshSchema(ctx, cfg)
	if err != nil {
		return target{}, nil, err
	}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		drop()
		return target{}, nil, err
	}
	pcfg.MaxConns = int32(cfg.clients)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		drop()
		return target{}, nil, err
	}
	closeAll := func() { pool.Close(); drop() }
	// The demo's table, as it creates it.
	if _, err := pool.Exec(ctx, `CREATE TABLE idemdemo_invoices (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, customer text NOT NULL,
		amount_cents bigint NOT NULL CHECK (amount_cents > 0), created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		closeAll()
		return target{}, nil, err
	}
	made := make([][]int64, cfg.clients)
	name := "floor (pgx, no idem)"
	if notify {
		name = "floor + pg_notify per invoice"
	}
	return target{name: name, op: func(ctx context.Context, w int, retry bool) (int, error) {
		if retry && len(made[w]) > 0 {
			var id, amount int64
			var customer string
			err := pool.QueryRow(ctx, `SELECT id, customer, amount_cents FROM idemdemo_invoices WHERE id = $1`,
				made[w][rand.IntN(len(made[w]))]).Scan(&id, &customer, &amount)
			return http.StatusCreated, err
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO idemdemo_invoices (customer, amount_cents) VALUES ($1, $2) RETURNING id`,
			fmt.Sprintf("customer-%d", w), 1250).Scan(&id); err != nil {
			return 0, err
		}
		if notify {
			if _, err := tx.Exec(ctx, `SELECT pg_notify('scaleload', $1)`, strconv.FormatInt(id, 10)); err != nil {
				return 0, err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, err
		}
		made[w] = append(made[w], id)
		return http.StatusCreated, nil
	}}, closeAll, nil
}

// answered is a key a worker was answered for, and where.
type answered struct {
	key, body string
	instance  int
}

// setupInstances starts n demo processes on a schema of their own. The
// returned function stops them and drops the schema.
func setupInstances(ctx context.Context, cfg config, b demoBinary, n int) (target, func(), error) {
	dbURL, _, drop, err := freshSchema(ctx, cfg)
	if err != nil {
		return target{}, nil, err
	}
	var demos []*demo
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.clients}, Timeout: 30 * time.Second}
	closeAll := func() {
		client.CloseIdleConnections()
		for _, d := range demos {
			d.stop()
		}
		drop()
	}
	// Each instance may use as many connections as there are clients,
	// like the floor's pool (pgx's default is 4).
	u, _ := url.Parse(dbURL)
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(cfg.clients))
	u.RawQuery = q.Encode()
	var bases []string
	for range n {
		d, err := startDemo(cfg, b.path, u.String())
		if err != nil {
			closeAll()
			return target{}, nil, err
		}
		demos = append(demos, d)
		bases = append(bases, d.url)
	}
	run := fmt.Sprintf("%08x", rand.Uint32())
	made := make([][]answered, cfg.clients)
	next := make([]int, cfg.clients)
	name := fmt.Sprintf("instances=%d", n)
	if b.label != "" {
		name += " (" + b.label + ")"
	}
	return target{name: name, op: func(ctx context.Context, w int, retry bool) (int, error) {
		instance := next[w] % n
		next[w]++
		var a answered
		if retry && len(made[w]) > 0 {
			a = made[w][rand.IntN(len(made[w]))]
			if n > 1 && instance == a.instance {
				instance = (instance + 1) % n // a retry arrives elsewhere
			}
		} else {
			retry = false
			key := fmt.Sprintf("%s-%d-%d", run, w, len(made[w]))
			b, _ := json.Marshal(map[string]any{"customer": key, "amount_cents": 1250})
			a = answered{key: key, body: string(b), instance: instance}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, bases[instance]+"/invoices", strings.NewReader(a.body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", a.key)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusCreated && !retry {
			made[w] = append(made[w], a)
		}
		return resp.StatusCode, nil
	}}, closeAll, nil
}

// demo is one idemdemo process.
type demo struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{}
	logs bytes.Buffer
}

func startDemo(cfg config, binary, dbURL string) (*demo, error) {
	d := &demo{done: make(chan struct{})}
	d.cmd = exec.Command(binary, append([]string{"-addr", "127.0.0.1:0"}, cfg.demoArgs...)...)
	d.cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	d.cmd.Stderr = &d.logs
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	found := make(chan string, 1)
	go func() {
		defer close(d.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := demoproc.ListeningURL(sc.Text()); ok {
				found <- u
			}
		}
		_ = d.cmd.Wait()
	}()
	select {
	case d.url = <-found:
		return d, nil
	case <-d.done:
		return nil, fmt.Errorf("idemdemo exited before listening: %s", d.logs.String())
	case <-time.After(time.Minute):
		d.stop()
		return nil, fmt.Errorf("idemdemo did not listen within a minute")
	}
}

func (d *demo) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	<-d.done
}

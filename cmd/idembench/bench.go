package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// Modes, in the order "all" runs them. "wait" is not part of "all": it
// measures latency, one configuration at a time (see wait.go).
const (
	modeFloor         = "floor"
	modeHTTPFloor     = "http-floor"
	modeStore         = "store"
	modeHTTPBare      = "http-bare"
	modeUnique        = "unique"
	modeReplay        = "replay"
	modeMixed         = "mixed"
	modeDemoFloor     = "demo-floor"
	modeHTTPDemoFloor = "http-demo-floor"
	modeDemo          = "demo"
	modeHTTPInsert    = "http-insert"
	modeHTTPOnetxFlr  = "http-onetx-floor"
	modeDemoOnetx     = "demo-onetx"
	modeWait          = "wait"
)

var allModes = []string{modeFloor, modeHTTPFloor, modeStore, modeHTTPBare, modeUnique, modeReplay, modeMixed,
	modeDemoFloor, modeHTTPDemoFloor, modeDemo, modeHTTPInsert, modeHTTPOnetxFlr, modeDemoOnetx}

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

func parseFlags(args []string, stderr io.Writer) (config, error) {
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
	fs.StringVar(&mode, "mode", "all", "comma-separated modes: "+strings.Join(allModes, ", ")+", wait; or all (every mode but wait)")
	fs.StringVar(&c.csvFile, "csv", "", "also write every measurement to this CSV file, one row each: series,clients,instances,metric,value,unit")
	instances := fs.String("instances", "1,3", "wait mode: comma-separated numbers of store instances (each its own pool and LISTEN connection)")
	waiters := fs.String("waiters", "0,1,8", "wait mode: comma-separated numbers of waiters per key")
	fs.StringVar(&c.databaseURL, "database-url", os.Getenv("TEST_DATABASE_URL"), "PostgreSQL URL (default $TEST_DATABASE_URL)")
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
		if m == "all" {
			for _, a := range allModes {
				if !slices.Contains(modes, a) {
					modes = append(modes, a)
				}
			}
			continue
		}
		if !slices.Contains(allModes, m) && m != modeWait {
			return nil, fmt.Errorf("unknown mode %q (want %s, %s, or all)", m, strings.Join(allModes, ", "), modeWait)
		}
		if !slices.Contains(modes, m) {
			modes = append(modes, m)
		}
	}
	return modes, nil
}

// The request every HTTP mode sends, and the response the handler gives.
const (
	requestBody    = `{"customer":"ACME","amount_cents":12345}`
	responseBody   = `{"id":"inv_0000000000","customer":"ACME","amount_cents":12345}`
	pathBare       = "/bare"
	pathIdem       = "/idem"
	pathDemo       = "/demo"
	pathFloor      = "/floor"
	pathDemoFloor  = "/demo-floor"
	pathInsert     = "/insert"
	pathOnetxFloor = "/onetx-floor"
	pathDemoOnetx  = "/demo-onetx"
)

// handler is the service's side effect: a small JSON 201, the same bare and
// protected.
func handler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(responseBody)))
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, responseBody)
}

// recordedResult is what the middleware records for handler's response, so
// store and floor write what unique writes.
var recordedResult = idem.Result{
	Status: http.StatusCreated,
	Header: map[string][]string{"Content-Type": {"application/json"}},
	Body:   []byte(responseBody),
}

// bench is one invocation: a database table, a store, a service and a client.
type bench struct {
	cfg  config
	pool *pgxpool.Pool
	// monitor reads pg_locks for the wait mode, beside pools its waiters
	// may fill.
	monitor *pgxpool.Pool
	store   *pgstore.Store
	table   string
	sql     floorSQL
	base    string // http://127.0.0.1:port
	client  *http.Client
	nonce   string // makes keys unique across invocations on one table
}

// result is one measured mode.
type result struct {
	mode        string
	ops         int64
	errors      int64
	firstErr    error
	elapsed     time.Duration
	p50, p99    time.Duration
	allocsPerOp float64
	bytesPerOp  float64
}

func (r result) throughput() float64 { return float64(r.ops) / r.elapsed.Seconds() }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	b, cleanup, err := setup(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer cleanup()

	fmt.Fprintf(stdout, "idembench: %s, GOMAXPROCS %d, %d CPUs, concurrency %d, pool %d, replay cache %d bytes, warmup %v, duration %v per mode in %d round(s)\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), cfg.concurrency, cfg.poolConns, cfg.replayCache, cfg.warmup, cfg.duration, cfg.rounds)
	out, err := openCSV(cfg.csvFile)
	if err != nil {
		return err
	}
	defer out.close()
	if slices.Contains(cfg.modes, modeWait) {
		ws, err := b.runWait(ctx, stderr)
		if err != nil {
			return fmt.Errorf("%s: %w", modeWait, err)
		}
		printWait(stdout, ws)
		out.wait(cfg, ws)
		if len(cfg.modes) == 1 {
			return out.close()
		}
	}
	// Each mode is set up and warmed up first; then the rounds interleave
	// the modes, so that a change in the machine's load during the run
	// (other processes, autovacuum, checkpoints) falls on every mode alike
	// rather than on whichever ran at the time.
	var ms []*measurement
	for _, mode := range cfg.modes {
		if mode == modeWait {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(stderr, "idembench: setting up %s ...\n", mode)
		m, err := b.prepare(ctx, mode)
		if err != nil {
			return fmt.Errorf("%s: %w", mode, err)
		}
		ms = append(ms, m)
	}
	slice := cfg.duration / time.Duration(cfg.rounds)
	for round := range cfg.rounds {
		for _, m := range ms {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(stderr, "idembench: round %d/%d: %s ...\n", round+1, cfg.rounds, m.mode)
			if err := b.measureSlice(ctx, m, slice); err != nil {
				return fmt.Errorf("%s: %w", m.mode, err)
			}
		}
	}
	var results []result
	for _, m := range ms {
		results = append(results, m.result())
	}
	printTable(stdout, cfg, results)
	out.results(cfg, results)
	if err := out.close(); err != nil {
		return err
	}
	for _, r := range results {
		if r.errors > 0 {
			return fmt.Errorf("%s: %d of %d requests failed; first: %v", r.mode, r.errors, r.ops+r.errors, r.firstErr)
		}
	}
	return nil
}

// setup connects, migrates a table (in a fresh schema unless -table), opens
// the store and starts the service. cleanup undoes all of it.
func setup(ctx context.Context, cfg config, stderr io.Writer) (*bench, func(), error) {
	var undo []func()
	cleanup := func() {
		for _, f := range slices.Backward(undo) {
			f()
		}
	}
	fail := func(err error) (*bench, func(), error) {
		cleanup()
		return nil, nil, err
	}
	pcfg, err := pgxpool.ParseConfig(cfg.databaseURL)
	if err != nil {
		return fail(fmt.Errorf("database URL: %w", err))
	}
	pcfg.MaxConns = int32(cfg.poolConns)
	pcfg.MinConns = int32(cfg.poolConns)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fail(fmt.Errorf("connecting: %w", err))
	}
	undo = append(undo, pool.Close)
	mcfg := pcfg.Copy()
	mcfg.MaxConns, mcfg.MinConns = 2, 0
	monitor, err := pgxpool.NewWithConfig(ctx, mcfg)
	if err != nil {
		return fail(fmt.Errorf("connecting: %w", err))
	}
	undo = append(undo, monitor.Close)

	nonce := randomHex(4)
	table := cfg.table
	if table == "" {
		schema := "idembench_" + nonce
		if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			return fail(fmt.Errorf("creating schema: %w", err))
		}
		undo = append(undo, func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := pool.Exec(dctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
				fmt.Fprintf(stderr, "idembench: dropping schema %s: %v\n", schema, err)
			}
		})
		table = schema + ".idem_keys"
	}
	if err := migrations.Up(ctx, pool, migrations.Options{Table: table}); err != nil {
		return fail(fmt.Errorf("migrating %s: %w", table, err))
	}
	fsql := newFloorSQL(table)
	if _, err := pool.Exec(ctx, fsql.createInvoices); err != nil {
		return fail(fmt.Errorf("creating the invoices table: %w", err))
	}
	store, err := pgstore.New(pool, storeOptions(cfg, table))
	if err != nil {
		return fail(err)
	}
	undo = append(undo, store.Close)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathBare, handler)
	mux.Handle("POST "+pathFloor, workHandler(func(ctx context.Context, key string) error { return floorWork(ctx, pool, fsql, key, false) }))
	mux.Handle("POST "+pathDemoFloor, workHandler(func(ctx context.Context, key string) error { return floorWork(ctx, pool, fsql, key, true) }))
	mux.Handle("POST "+pathInsert, workHandler(func(ctx context.Context, _ string) error { return insertWork(ctx, pool, fsql) }))
	mux.Handle("POST "+pathOnetxFloor, workHandler(func(ctx context.Context, key string) error { return onetxFloorWork(ctx, pool, fsql, key) }))
	mw := middleware.New(store, middleware.Options{Owner: "idembench"})
	mux.Handle("POST "+pathIdem, mw(http.HandlerFunc(handler)))
	mux.Handle("POST "+pathDemo, mw(demoHandler(pool, store, fsql)))
	mwTx := middleware.New(store, middleware.Options{Owner: "idembench", InTransaction: true})
	mux.Handle("POST "+pathDemoOnetx, mwTx(demoTxHandler(fsql)))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	undo = append(undo, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-served
	})

	transport := &http.Transport{
		// Each client goroutine keeps its connection: no dial per request.
		MaxIdleConns:        2 * cfg.concurrency,
		MaxIdleConnsPerHost: 2 * cfg.concurrency,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	undo = append(undo, transport.CloseIdleConnections)
	return &bench{
		cfg:     cfg,
		pool:    pool,
		monitor: monitor,
		store:   store,
		table:   table,
		sql:     fsql,
		base:    "http://" + ln.Addr().String(),
		client:  &http.Client{Transport: transport, Timeout: 30 * time.Second},
		nonce:   nonce,
	}, cleanup, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// worker is one client goroutine's state.
type worker struct {
	id     int
	seq    uint64
	rng    *mrand.Rand
	recent []string // mixed: keys this worker completed, most recent last
	lat    []time.Duration
}

// op is one request of a mode; it reports an error for any unexpected
// answer.
type op func(ctx context.Context, w *worker) error

func (b *bench) newKey(mode string, w *worker) string {
	w.seq++
	return b.nonce + "-" + mode + "-" + strconv.Itoa(w.id) + "-" + strconv.FormatUint(w.seq, 10)
}

func (b *bench) opFor(ctx context.Context, mode string) (op, error) {
	switch mode {
	case modeFloor:
		return b.floorOp(false), nil
	case modeDemoFloor:
		return b.floorOp(true), nil
	case modeHTTPFloor, modeHTTPDemoFloor, modeHTTPInsert, modeHTTPOnetxFlr, modeDemoOnetx:
		path := map[string]string{modeHTTPFloor: pathFloor, modeHTTPDemoFloor: pathDemoFloor,
			modeHTTPInsert: pathInsert, modeHTTPOnetxFlr: pathOnetxFloor, modeDemoOnetx: pathDemoOnetx}[mode]
		return func(ctx context.Context, w *worker) error {
			return b.post(ctx, path, b.newKey(mode, w), false)
		}, nil
	case modeDemo:
		return func(ctx context.Context, w *worker) error {
			return b.post(ctx, pathDemo, b.newKey(mode, w), false)
		}, nil
	case modeStore:
		return func(ctx context.Context, w *worker) error {
			key, err := idem.ParseKey(b.newKey(mode, w))
			if err != nil {
				return err
			}
			c, err := b.store.Claim(ctx, idem.ClaimRequest{Scope: "idembench", Key: key, Fingerprint: benchFingerprint, Owner: "idembench"})
			if err != nil {
				return err
			}
			if c.Status != idem.Acquired {
				return fmt.Errorf("claim of a new key: %v", c.Status)
			}
			return b.store.Complete(ctx, c.Token, recordedResult)
		}, nil
	case modeHTTPBare:
		return func(ctx context.Context, w *worker) error {
			return b.post(ctx, pathBare, b.newKey(mode, w), false)
		}, nil
	case modeUnique:
		return func(ctx context.Context, w *worker) error {
			return b.post(ctx, pathIdem, b.newKey(mode, w), false)
		}, nil
	case modeReplay:
		keys := make([]string, b.cfg.replayKeys)
		for i := range keys {
			keys[i] = b.nonce + "-replay-" + strconv.Itoa(i)
			if err := b.post(ctx, pathIdem, keys[i], false); err != nil {
				return nil, fmt.Errorf("completing the replayed keys: %w", err)
			}
		}
		return func(ctx context.Context, w *worker) error {
			return b.post(ctx, pathIdem, keys[w.rng.IntN(len(keys))], true)
		}, nil
	case modeMixed:
		const remembered = 64
		return func(ctx context.Context, w *worker) error {
			if len(w.recent) > 0 && w.rng.Float64() < b.cfg.retryShare {
				return b.post(ctx, pathIdem, w.recent[w.rng.IntN(len(w.recent))], true)
			}
			key := b.newKey(mode, w)
			if err := b.post(ctx, pathIdem, key, false); err != nil {
				return err
			}
			if len(w.recent) == remembered {
				w.recent = append(w.recent[:0], w.recent[1:]...)
			}
			w.recent = append(w.recent, key)
			return nil
		}, nil
	}
	return nil, fmt.Errorf("unknown mode %q", mode)
}

// benchFingerprint has the length of the middleware's (hex SHA-256), so
// store and floor write rows of the same size as unique.
var benchFingerprint = strings.Repeat("f", 64)

// post sends the request and checks the answer: 201 with the handler's body,
// replayed or not as expected.
func (b *bench) post(ctx context.Context, path, key string, replayed bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.base+path, strings.NewReader(requestBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", `"`+key+`"`)
	resp, err := b.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var buf [256]byte
	n, err := io.ReadFull(resp.Body, buf[:])
	switch {
	case err == nil:
		return fmt.Errorf("%s: response body longer than expected", path)
	case !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF):
		return err
	case resp.StatusCode != http.StatusCreated:
		return fmt.Errorf("%s: status %d: %s", path, resp.StatusCode, buf[:n])
	case !bytes.Equal(buf[:n], []byte(responseBody)):
		return fmt.Errorf("%s: unexpected body %q", path, buf[:n])
	case (resp.Header.Get(middleware.ReplayedHeader) == "true") != replayed:
		return fmt.Errorf("%s: %s = %q, want replayed %v", path, middleware.ReplayedHeader, resp.Header.Get(middleware.ReplayedHeader), replayed)
	}
	return nil
}

// measurement accumulates one mode's measured slices.
type measurement struct {
	mode    string
	op      op
	workers []*worker
	total   result
	allocs  uint64
	bytes   uint64
}

// prepare sets mode up (replay completes its keys) and runs it for the
// warm-up.
func (b *bench) prepare(ctx context.Context, mode string) (*measurement, error) {
	o, err := b.opFor(ctx, mode)
	if err != nil {
		return nil, err
	}
	m := &measurement{mode: mode, op: o, workers: make([]*worker, b.cfg.concurrency)}
	for i := range m.workers {
		m.workers[i] = &worker{id: i, rng: mrand.New(mrand.NewPCG(uint64(i), 0x1de3)), lat: make([]time.Duration, 0, 1<<14)}
	}
	if b.cfg.warmup > 0 {
		if r := drive(ctx, m.workers, o, b.cfg.warmup); r.errors > 0 {
			return nil, fmt.Errorf("warm-up: %d requests failed; first: %w", r.errors, r.firstErr)
		}
	}
	for _, w := range m.workers {
		w.lat = w.lat[:0]
	}
	return m, nil
}

// measureSlice runs m's mode for d and adds what it measured.
func (b *bench) measureSlice(ctx context.Context, m *measurement, d time.Duration) error {
	runtime.GC()
	stopCPU, err := startCPUProfile(b.cfg, m.mode)
	if err != nil {
		return err
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := drive(ctx, m.workers, m.op, d)
	runtime.ReadMemStats(&after)
	stopCPU()
	if err := writeMemProfile(b.cfg, m.mode); err != nil {
		return err
	}
	m.total.ops += r.ops
	m.total.errors += r.errors
	m.total.elapsed += r.elapsed
	if m.total.firstErr == nil {
		m.total.firstErr = r.firstErr
	}
	m.allocs += after.Mallocs - before.Mallocs
	m.bytes += after.TotalAlloc - before.TotalAlloc
	return nil
}

func (m *measurement) result() result {
	r := m.total
	r.mode = m.mode
	if r.ops > 0 {
		r.allocsPerOp = float64(m.allocs) / float64(r.ops)
		r.bytesPerOp = float64(m.bytes) / float64(r.ops)
	}
	var lat []time.Duration
	for _, w := range m.workers {
		lat = append(lat, w.lat...)
	}
	r.p50, r.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return r
}

// drive runs o on every worker until d has passed (or ctx ends) and counts.
func drive(ctx context.Context, workers []*worker, o op, d time.Duration) result {
	var (
		ops, errs atomic.Int64
		errOnce   sync.Once
		firstErr  error
		wg        sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for _, w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				if err := o(ctx, w); err != nil {
					if ctx.Err() != nil {
						return
					}
					errs.Add(1)
					errOnce.Do(func() { firstErr = err })
					continue
				}
				w.lat = append(w.lat, time.Since(t0))
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	return result{ops: ops.Load(), errors: errs.Load(), firstErr: firstErr, elapsed: time.Since(start)}
}

// percentile returns the q-quantile of lat (nearest rank); it sorts lat.
func percentile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	i := int(math.Ceil(q*float64(len(lat)))) - 1
	return lat[min(max(i, 0), len(lat)-1)]
}

func profilePath(path string, cfg config, mode string) string {
	if len(cfg.modes) == 1 {
		return path
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "." + mode + ext
}

func startCPUProfile(cfg config, mode string) (stop func(), err error) {
	if cfg.cpuProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(profilePath(cfg.cpuProfile, cfg, mode))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func writeMemProfile(cfg config, mode string) error {
	if cfg.memProfile == "" {
		return nil
	}
	f, err := os.Create(profilePath(cfg.memProfile, cfg, mode))
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ratioBase names the mode each mode is compared with first: the same
// database work without idem and without HTTP (floor, demo-floor), and,
// for replays, the same handler without idem (http-bare).
var ratioBase = map[string]string{
	modeStore:  modeFloor,
	modeUnique: modeFloor,
	modeMixed:  modeFloor,
	modeDemo:   modeDemoFloor,
	modeReplay: modeHTTPBare,
}

// httpRatioBase names the second comparison: the same database work by
// hand behind the same HTTP server and client, without idem: what idem
// alone costs. demo (two commits) against http-demo-floor, demo-onetx (one)
// against http-onetx-floor.
var httpRatioBase = map[string]string{
	modeUnique:    modeHTTPFloor,
	modeMixed:     modeHTTPFloor,
	modeDemo:      modeHTTPDemoFloor,
	modeDemoOnetx: modeHTTPOnetxFlr,
}

// insertRatioBase names the third comparison, for the invoice modes: the
// invoice alone behind the same HTTP server, without idempotency
// (http-insert): what idempotency costs the service.
var insertRatioBase = map[string]string{
	modeHTTPDemoFloor: modeHTTPInsert,
	modeDemo:          modeHTTPInsert,
	modeHTTPOnetxFlr:  modeHTTPInsert,
	modeDemoOnetx:     modeHTTPInsert,
}

// ratio returns r's throughput as a share of the throughput of the mode
// base names, if that mode ran.
func ratio(byMode map[string]result, r result, base map[string]string) (float64, string, bool) {
	b, ok := byMode[base[r.mode]]
	if !ok || b.throughput() <= 0 {
		return 0, "", false
	}
	return r.throughput() / b.throughput(), b.mode, true
}

func printTable(w io.Writer, cfg config, results []result) {
	byMode := map[string]result{}
	for _, r := range results {
		byMode[r.mode] = r
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\trequests\terrors\treq/s\tp50\tp99\tallocs/req\tB/req\tratio\t\t\t")
	for _, r := range results {
		var cols [3]string
		for i, base := range []map[string]string{ratioBase, httpRatioBase, insertRatioBase} {
			if v, of, ok := ratio(byMode, r, base); ok {
				cols[i] = fmt.Sprintf("%.0f%% of %s", 100*v, of)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t%.0f\t%.0f\t%s\t%s\t%s\t\n",
			r.mode, r.ops, r.errors, r.throughput(), fmtDur(r.p50), fmtDur(r.p99), r.allocsPerOp, r.bytesPerOp, cols[0], cols[1], cols[2])
	}
	tw.Flush()
	if cfg.retryShare > 0 && slices.Contains(cfg.modes, modeMixed) {
		fmt.Fprintf(w, "mixed: retry share %.2f\n", cfg.retryShare)
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	}
}

// storeOptions is the store's configuration.
func storeOptions(cfg config, table string) pgstore.Options {
	return pgstore.Options{Table: table, ReplayCacheBytes: cfg.replayCache}
}

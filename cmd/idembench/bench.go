package main

// One invocation: the database, the store and the service it sets up, and
// the run that warms the modes up and takes their turns.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

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
	doors   *doors // the door modes' servers and clients, once one is set up
}

// run is the whole command (a cmdmain.Run).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	b, cleanup, err := setup(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer cleanup()
	defer b.closeDoors()

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
	mux.Handle("POST "+pathMinimum, workHandler(func(ctx context.Context, key string) error { return minimumWork(ctx, pool, fsql, key) }))
	mw := middleware.New(store, middleware.Options{Engine: engine.Options{Owner: "idembench"}})
	mux.Handle("POST "+pathIdem, mw(http.HandlerFunc(handler)))
	mux.Handle("POST "+pathDemo, mw(demoHandler(pool, store, fsql)))
	mwTx := middleware.New(store, middleware.Options{Engine: engine.Options{Owner: "idembench"}, InTransaction: true})
	mux.Handle("POST "+pathDemoOnetx, mwTx(demoTxHandler(fsql)))
	mux.Handle("POST "+pathDemoOnetxS, mwTx(demoSQLTxHandler(fsql)))
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

// storeOptions is the store's configuration.
func storeOptions(cfg config, table string) pgstore.Options {
	// No sweeper: the table the bench fills is dropped after the run, and
	// a sweep in the middle of a measurement would be measured.
	return pgstore.Options{Table: table, ReplayCacheBytes: cfg.replayCache, SweepInterval: -1}
}

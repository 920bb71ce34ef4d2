// Command sut is the service the robustness harness (package robustness)
// runs, several times over, under faults: idem's two adapters on pgstore,
// in front of handlers whose side effects show when they run twice.
//
//	POST /ext   Idempotency-Key; calls the effect service (outside the
//	            database), then answers 201. Recorded by the engine after
//	            the handler returns (two-phase).
//	POST /db    Idempotency-Key; inserts a row into robust_effects and
//	            records its answer in the same transaction
//	            (middleware.Commit with pgstore's CompleteTx).
//	POST /tx    Idempotency-Key; the one-commit path (InTransaction):
//	            inserts a row into robust_effects in the claim's
//	            transaction, then answers, misbehaving as the request
//	            says (wire.Misbehave*); the row and the answer commit
//	            together.
//	POST /mcp   MCP Streamable HTTP (stateless, JSON responses), tool "ext":
//	            the /ext handler's effect as a tools/call, deduplicated by
//	            mcphttp on _meta.idempotencyKey.
//
// Every request carries the harness's attempt id in X-Attempt. The process
// writes what it does to stdout, one JSON object per line, unbuffered (a
// line written before a SIGKILL is not lost): each store call with its
// timing and result, each idem.Event, and each execution's start, effect
// and answer. The harness joins these with its clients' history.
//
// The service is a test fixture: it is built only by the harness, and its
// deliberately broken variants (-mutant) exist only in a build with the
// idem_mutant tag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/pgstore"
)

type config struct {
	addr            string
	databaseURL     string
	instance        string
	effectURL       string
	lease           time.Duration
	wait            time.Duration
	storeTimeout    time.Duration
	sweepEvery      time.Duration
	shutdownTimeout time.Duration
	replayCache     int
	mutant          string
}

func main() {
	var cfg config
	flag.StringVar(&cfg.addr, "addr", "127.0.0.1:0", "listen address")
	flag.StringVar(&cfg.databaseURL, "database-url", "", "PostgreSQL URL (through the harness's fault proxy)")
	flag.StringVar(&cfg.instance, "instance", "sut", "this instance's name, in every log line and execution id")
	flag.StringVar(&cfg.effectURL, "effect-url", "", "the effect service's URL (POST, outside the database)")
	flag.DurationVar(&cfg.lease, "lease", time.Second, "lease of a claim")
	flag.DurationVar(&cfg.wait, "wait", 500*time.Millisecond, "how long a duplicate waits for an in-flight original")
	flag.DurationVar(&cfg.storeTimeout, "store-timeout", time.Second, "bound of each store call")
	flag.DurationVar(&cfg.sweepEvery, "sweep-interval", 500*time.Millisecond, "mean pause between sweeps")
	flag.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 300*time.Millisecond, "on SIGTERM, how long requests may run before they are cut off")
	flag.IntVar(&cfg.replayCache, "replay-cache", 1<<20, "bytes of pgstore's replay cache (0: none)")
	flag.StringVar(&cfg.mutant, "mutant", "", "a deliberately broken variant (builds with the idem_mutant tag only)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "sut:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	log := newEventLog(os.Stdout, cfg.instance)
	if err := enableMutant(cfg.mutant); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	pcfg, err := pgxpool.ParseConfig(cfg.databaseURL)
	if err != nil {
		return fmt.Errorf("-database-url: %w", err)
	}
	pcfg.MaxConns = 16
	pcfg.ConnConfig.RuntimeParams["application_name"] = cfg.instance
	pcfg.ConnConfig.ConnectTimeout = 2 * time.Second
	// A pool must not keep handing out connections a fault cut: pgx
	// closes a connection whose query failed on the network, and checks
	// idle ones before reuse after a second.
	pcfg.HealthCheckPeriod = time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	pg, err := pgstore.New(pool, pgstore.Options{
		Lease:            cfg.lease,
		Logger:           logger,
		ReplayCacheBytes: cfg.replayCache,
		Heartbeat:        2 * time.Second,
		PollInterval:     200 * time.Millisecond,
		SweepInterval:    -1, // the service's own sweeper logs what it removes
	})
	if err != nil {
		return err
	}
	defer pg.Close()

	store := wrapMutant(cfg.mutant, pg)
	logged := &loggingStore{inner: store, log: log}
	var s idem.Store = logged
	if cfg.replayCache > 0 {
		s = cachingStore{logged, pg}
	}

	svc := &service{cfg: cfg, log: log, pool: pool, pg: pg, effects: newEffectClient(cfg.effectURL)}
	svc.cutOff, svc.cancelCutOff = context.WithCancel(context.Background())
	observe := func(r *http.Request, e idem.Event) { log.event(r.Context(), e) }
	protect := middleware.New(s, middleware.Options{
		Engine: engine.Options{
			Lease:        cfg.lease,
			Wait:         cfg.wait,
			StoreTimeout: cfg.storeTimeout,
			Shutdown:     svc.cutOff,
			Owner:        cfg.instance,
			Logger:       logger,
		},
		Observer: observe,
	})
	inTx := middleware.New(txStore{s, logged, pg}, middleware.Options{
		Engine: engine.Options{
			Lease:        cfg.lease,
			Wait:         cfg.wait,
			StoreTimeout: cfg.storeTimeout,
			MaxExecution: txMaxExecution(cfg.lease),
			// The idle bound is the lease (not MaxExecution, the
			// default): wire.MisbehaveOvertime works past MaxExecution
			// within it, and only wire.MisbehaveIdle outlasts it.
			IdleInTransaction: cfg.lease,
			Shutdown:          svc.cutOff,
			Owner:             cfg.instance,
			Logger:            logger,
		},
		MaxRecordBytes: txMaxRecord,
		Observer:       observe,
		InTransaction:  true,
	})
	mux := http.NewServeMux()
	mux.Handle("POST /ext", protect(http.HandlerFunc(svc.ext)))
	mux.Handle("POST /db", protect(http.HandlerFunc(svc.db)))
	mux.Handle("POST /tx", inTx(http.HandlerFunc(svc.tx)))
	mux.Handle("/mcp", svc.mcpHandler(s, logger, observe))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	return svc.serve(ctx, ln, withAttempt(svc.track(mux)), s, logger)
}

// service is one instance: its handlers, what they share, and what
// shutdown needs.
type service struct {
	cfg     config
	log     *eventLog
	pool    *pgxpool.Pool
	pg      *pgstore.Store
	effects *effectClient
	seq     atomic.Int64 // executions of this process

	active       sync.WaitGroup
	cutOff       context.Context // done when the shutdown bound ran out
	cancelCutOff context.CancelFunc
}

// execID names one execution of a handler, unique across instances and
// restarts.
func (s *service) execID() string {
	return fmt.Sprintf("%s.%d.%d", s.cfg.instance, os.Getpid(), s.seq.Add(1))
}

func (s *service) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.active.Add(1)
		defer s.active.Done()
		next.ServeHTTP(w, r)
	})
}

// serve runs the server until ctx ends, then shuts down as a service does on
// a deploy: it stops accepting, lets requests run for the shutdown bound,
// then cuts off what still runs (the adapters' Shutdown: the engine
// cancels the work with engine.ErrShutdown) and waits for it.
func (s *service) serve(ctx context.Context, ln net.Listener, h http.Handler, store idem.Store, logger *slog.Logger) error {
	base, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	sweepCtx, stopSweeper := context.WithCancel(ctx)
	var sweeping sync.WaitGroup
	sweeping.Go(func() {
		sw := idem.Sweeper{Store: store, Interval: s.cfg.sweepEvery, Logger: logger,
			OnSweep: func(_ context.Context, st idem.SweepStats) { s.log.sweep(st) }}
		_ = sw.Run(sweepCtx)
	})
	defer func() {
		stopSweeper()
		sweeping.Wait()
	}()

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	s.log.life("listening", "http://"+ln.Addr().String())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	s.log.life("shutting down", "")
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.shutdownTimeout)
	err := srv.Shutdown(sctx)
	cancel()
	if err != nil {
		s.log.life("cutting off", "")
		s.cancelCutOff()
		cancelRequests()
		done := make(chan struct{})
		go func() { s.active.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		_ = srv.Close()
	}
	<-served
	s.log.life("stopped", "")
	return nil
}

// attemptKey is the context key of the harness's attempt id.
type attemptKey struct{}

// withAttempt puts the X-Attempt header in the request's context, where the
// logging store and the observer find it (the engine's store calls run on
// contexts that keep the request's values).
func withAttempt(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get("X-Attempt"); a != "" {
			r = r.WithContext(context.WithValue(r.Context(), attemptKey{}, a))
		}
		next.ServeHTTP(w, r)
	})
}

func attemptOf(ctx context.Context) string {
	a, _ := ctx.Value(attemptKey{}).(string)
	return a
}

var errNoMutants = errors.New("-mutant needs a build with the idem_mutant tag")

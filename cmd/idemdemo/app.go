package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/cmdmain"
	"github.com/idemkit/idem/middleware"
)

// config is the demo's command line, after the environment was applied.
type config struct {
	addr            string
	databaseURL     string
	directURL       string
	noListen        bool
	table           string
	lease           time.Duration
	wait            time.Duration
	retention       time.Duration
	replayCache     int
	sweepEvery      time.Duration
	shutdownTimeout time.Duration
	logLevel        slog.Level
	probe           string
	migrate         bool
	scopeSecret     string
	sessionCookies  []string
	twoPhase        bool
}

// envVar is the environment variable of each flag. DATABASE_URL is the
// conventional name; the others are prefixed so they cannot collide.
var envVar = map[string]string{
	"addr":             "IDEMDEMO_ADDR",
	"database-url":     "DATABASE_URL",
	"direct-url":       "IDEMDEMO_DIRECT_URL",
	"no-listen":        "IDEMDEMO_NO_LISTEN",
	"table":            "IDEMDEMO_TABLE",
	"lease":            "IDEMDEMO_LEASE",
	"wait":             "IDEMDEMO_WAIT",
	"retention":        "IDEMDEMO_RETENTION",
	"replay-cache":     "IDEMDEMO_REPLAY_CACHE",
	"sweep-interval":   "IDEMDEMO_SWEEP_INTERVAL",
	"shutdown-timeout": "IDEMDEMO_SHUTDOWN_TIMEOUT",
	"log-level":        "IDEMDEMO_LOG_LEVEL",
	"probe":            "IDEMDEMO_PROBE",
	"migrate":          "IDEMDEMO_MIGRATE",
	"scope-secret":     "IDEMDEMO_SCOPE_SECRET",
	"session-cookies":  "IDEMDEMO_SESSION_COOKIES",
	"two-phase":        "IDEMDEMO_TWO_PHASE",
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	return parseConfigTo(args, getenv, stderr, stderr)
}

// parseConfigTo is parseConfig printing the usage to stdout when -help asks
// for it, and a bad flag's error and the usage to stderr.
func parseConfigTo(args []string, getenv func(string) string, stdout, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("idemdemo", flag.ContinueOnError)
	var usage bytes.Buffer // written by fs.Usage; flushed to stdout or stderr once Parse says which
	fs.SetOutput(stderr)
	var cfg config
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "listen `address` (host:port; port 0 picks a free one)")
	fs.StringVar(&cfg.databaseURL, "database-url", "", "PostgreSQL `URL`; empty means the in-memory store (nothing survives a restart)")
	fs.StringVar(&cfg.directURL, "direct-url", "", "behind a pooler in transaction mode (PgBouncer pool_mode=transaction), a direct PostgreSQL `URL` to the same database for what needs a session: migrations and LISTEN (empty: -database-url's connections; give -database-url default_query_exec_mode=exec)")
	fs.BoolVar(&cfg.noListen, "no-listen", false, "with a database, never LISTEN (for engines or endpoints without LISTEN/NOTIFY): a duplicate polls for its original's result, and the replay cache is off")
	fs.StringVar(&cfg.table, "table", "", "idem claim `table`, \"table\" or \"schema.table\" (empty: idem_keys)")
	fs.DurationVar(&cfg.lease, "lease", 30*time.Second, "lease of a claim, renewed while the handler runs; an abandoned claim is taken over after it (with a database and without -two-phase, POST /invoices claims inside its transaction instead, which has no lease: PostgreSQL ends it only if it stays idle between two statements as long as the request may run, 5m)")
	fs.DurationVar(&cfg.wait, "wait", middleware.DefaultWait, "how long a duplicate waits for an in-flight original before 409 (negative: no wait)")
	fs.DurationVar(&cfg.retention, "retention", 24*time.Hour, "how long a completed result is replayed")
	fs.IntVar(&cfg.replayCache, "replay-cache", 64<<20, "with a database, `bytes` of completed results cached in process, so a replay needs no round trip (0: no cache; forget keys with \"idem forget\", not DELETE)")
	fs.DurationVar(&cfg.sweepEvery, "sweep-interval", time.Minute, "how often abandoned claims and expired results are swept")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, how long in-flight requests may run before they are cancelled and their claims released")
	fs.TextVar(&cfg.logLevel, "log-level", slog.LevelInfo, "log `level`: debug, info, warn, error (debug logs idempotency keys in clear)")
	fs.BoolVar(&cfg.migrate, "migrate", true, "with a database, migrate the idem table and create the invoices table at start; false for a least-privilege role (run \"idem migrate up\" as the table's owner instead)")
	fs.StringVar(&cfg.scopeSecret, "scope-secret", "", "`secret` keying the hash of each caller's credentials in the scope (HMAC-SHA-256); set it through the environment, not the command line, and the same in every instance (empty: plain SHA-256, so low-entropy credentials could be guessed from the table)")
	fs.BoolVar(&cfg.twoPhase, "two-phase", false, "with a database, POST /invoices claims its key on its own before the handler runs and records the response with the invoice in a second transaction (the path for side effects outside the database); false: the claim, the invoice and the response commit in one transaction")
	cookies := fs.String("session-cookies", "session", "comma-separated `names` of the cookies that identify a caller; empty: no cookie does")
	fs.StringVar(&cfg.probe, "probe", "", "instead of serving, GET this `URL` and exit 0 if it answers 2xx, 1 otherwise: a container health check for images without curl")
	fs.Usage = func() {
		fmt.Fprintf(&usage, `Usage: idemdemo [flags]

The idem demo: an invoice API (POST/GET /invoices) protected by the
Idempotency-Key middleware, an MCP endpoint (/mcp) with a create_invoice tool,
/healthz and /metrics. Without a database URL it runs on the in-memory store.

Every flag can also be set by the environment variable named in brackets;
a flag on the command line wins.

Flags:
`)
		fs.VisitAll(func(f *flag.Flag) {
			name, text := flag.UnquoteUsage(f)
			line := "  -" + f.Name
			if name != "" {
				line += " " + name
			}
			if f.DefValue != "" {
				text += fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(&usage, "%s\n    \t%s [%s]\n", line, text, envVar[f.Name])
		})
	}

	// The environment first, so that flags on the command line override it.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envVar[f.Name]); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", envVar[f.Name], v, err)
			}
		}
	})
	if envErr != nil {
		return cfg, &cmdmain.UsageError{Err: envErr}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = usage.WriteTo(stdout)
			return cfg, cmdmain.ErrHelp
		}
		_, _ = usage.WriteTo(stderr)
		return cfg, &cmdmain.UsageError{Err: err}
	}
	if fs.NArg() > 0 {
		return cfg, cmdmain.Usagef("unexpected arguments: %q", fs.Args())
	}
	cfg.sessionCookies = []string{} // non-nil: the demo names its session cookies, possibly none
	for name := range strings.SplitSeq(*cookies, ",") {
		if name = strings.TrimSpace(name); name != "" {
			cfg.sessionCookies = append(cfg.sessionCookies, name)
		}
	}
	switch {
	case cfg.lease < time.Millisecond:
		return cfg, cmdmain.Usagef("-lease must be at least 1ms")
	case cfg.retention <= 0:
		return cfg, cmdmain.Usagef("-retention must be positive")
	case cfg.replayCache < 0:
		return cfg, cmdmain.Usagef("-replay-cache must not be negative")
	case cfg.sweepEvery <= 0:
		return cfg, cmdmain.Usagef("-sweep-interval must be positive")
	case cfg.shutdownTimeout <= 0:
		return cfg, cmdmain.Usagef("-shutdown-timeout must be positive")
	}
	return cfg, nil
}

// backend is what the demo runs on: the in-memory store or PostgreSQL.
type backend struct {
	name     string // "memory" or "postgres", for logs and /healthz
	store    idem.Store
	invoices invoiceStore
	// health reports whether the store can be reached.
	health func(ctx context.Context) error
	close  func()
	// inTransaction: POST /invoices claims its key inside the transaction
	// that inserts the invoice (middleware.Options.InTransaction).
	inTransaction bool
}

// run is the whole demo: it returns when ctx is cancelled (SIGINT/SIGTERM)
// and every request has finished or been cancelled, or when it cannot
// start.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfigTo(args, getenv, stdout, stderr)
	if err != nil {
		return err
	}
	if cfg.probe != "" {
		return probe(ctx, cfg.probe)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))

	var be *backend
	if cfg.databaseURL == "" {
		logger.Warn("NO DATABASE: -database-url and DATABASE_URL are empty, so claims, results and invoices live in this process's memory only. " +
			"They are lost on restart and not shared between instances. Set DATABASE_URL for the durable PostgreSQL store.")
		be = newMemoryBackend(cfg)
	} else {
		be, err = newPostgresBackend(ctx, cfg, logger)
		if err != nil {
			return err
		}
	}
	defer be.close()
	tel, err := newTelemetry(ctx, getenv, stdout, be)
	if err != nil {
		return err
	}
	defer func() {
		if err := tel.shutdown(ctx); err != nil {
			logger.Warn("flushing OpenTelemetry", "err", err)
		}
	}()

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	app := newApp(cfg, be, logger, selfURL(ln.Addr()))
	app.metrics.otel = tel.observer
	app.handler = tel.instrument(app.handler)
	return app.serve(ctx, ln, stdout)
}

// probe GETs url and reports whether it answered 2xx.
func probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return cmdmain.Usagef("-probe: %w", err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("probe: %s answered %s", url, resp.Status)
	}
	return nil
}

// selfURL is the base URL the MCP tool calls the invoice API on: the
// listener's own address, with an unspecified host (0.0.0.0, ::) replaced
// by loopback.
func selfURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String()
	}
	ip := tcp.IP
	if ip == nil || ip.IsUnspecified() {
		if ip.To4() == nil && ip != nil {
			ip = net.IPv6loopback
		} else {
			ip = net.IPv4(127, 0, 0, 1)
		}
	}
	return "http://" + net.JoinHostPort(ip.String(), fmt.Sprint(tcp.Port))
}

type app struct {
	cfg     config
	be      *backend
	owner   string // names this process in claims, for operators
	logger  *slog.Logger
	metrics *metrics
	handler http.Handler

	// Requests being served, so that shutdown can wait for the ones it
	// cancelled to release their claims.
	active atomic.Int64
	// streams is cancelled when shutdown begins: long-lived MCP streams
	// (GET /mcp) end at once instead of holding shutdown until its bound.
	streams       context.Context
	cancelStreams context.CancelFunc
	// cutOff is cancelled when the shutdown bound runs out: protected
	// handlers and tool calls, whose contexts no longer end with their
	// clients' connections, are cancelled through it (the middleware's and
	// mcphttp's Shutdown option), and their claims released.
	cutOff       context.Context
	cancelCutOff context.CancelFunc
}

func newApp(cfg config, be *backend, logger *slog.Logger, self string) *app {
	a := &app{cfg: cfg, be: be, logger: logger, metrics: newMetrics(), owner: owner()}
	a.streams, a.cancelStreams = context.WithCancel(context.Background())
	a.cutOff, a.cancelCutOff = context.WithCancel(context.Background())

	protect := middleware.New(be.store, middleware.Options{
		Engine: engine.Options{
			Lease:    cfg.lease,
			Wait:     cfg.wait,
			Shutdown: a.cutOff,
			Owner:    a.owner,
			Logger:   logger,
		},
		Observer:       a.metrics.observeHTTP,
		SessionCookies: cfg.sessionCookies,
		ScopeSecret:    scopeSecret(cfg),
		InTransaction:  be.inTransaction,
	})
	mux := http.NewServeMux()
	mux.Handle("POST /invoices", protect(http.HandlerFunc(a.createInvoice)))
	mux.HandleFunc("GET /invoices", a.listInvoices)
	mux.Handle("/mcp", a.streamsEndOnShutdown(newMCPHandler(a, self)))
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.Handle("GET /metrics", a.metrics.handler())
	a.handler = a.track(mux)
	return a
}

// scopeSecret is the key of the scope hash, nil when none is set.
func scopeSecret(cfg config) []byte {
	if cfg.scopeSecret == "" {
		return nil
	}
	return []byte(cfg.scopeSecret)
}

// owner names this process in its claims ("idemdemo@host pid 42"), so that
// an operator inspecting a stuck claim knows whose it is.
func owner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("idemdemo@%s pid %d", host, os.Getpid())
}

// track counts the requests being served.
func (a *app) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.active.Add(1)
		defer a.active.Add(-1)
		next.ServeHTTP(w, r)
	})
}

// streamsEndOnShutdown cancels GET requests (MCP's standalone SSE stream,
// which lasts as long as the client wants) when shutdown begins.
func (a *app) streamsEndOnShutdown(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(a.streams, cancel)
		defer stop()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func (a *app) serve(ctx context.Context, ln net.Listener, stdout io.Writer) error {
	// Request contexts derive from base, not from ctx: a signal must not
	// cancel running requests at once, only after the shutdown bound.
	base, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := &http.Server{
		Handler:           a.handler,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn),
	}

	var wg sync.WaitGroup
	sweepCtx, stopSweeper := context.WithCancel(ctx)
	defer stopSweeper()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.sweep(sweepCtx)
	}()
	defer wg.Wait()

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	a.logger.Info("idemdemo started", "addr", ln.Addr().String(), "store", a.be.name,
		"lease", a.cfg.lease, "wait", a.cfg.wait, "retention", a.cfg.retention,
		"scope_keyed", a.cfg.scopeSecret != "", "session_cookies", strings.Join(a.cfg.sessionCookies, ","))
	fmt.Fprintf(stdout, "idemdemo listening on http://%s (store: %s)\n", ln.Addr(), a.be.name)

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	a.logger.Info("shutting down: finishing in-flight requests", "bound", a.cfg.shutdownTimeout, "active", a.active.Load())
	a.cancelStreams()
	sctx, cancel := context.WithTimeout(context.Background(), a.cfg.shutdownTimeout)
	err := srv.Shutdown(sctx)
	cancel()
	if err != nil {
		// The bound ran out. Cancel what still runs: the invoice handler
		// stops and answers 503, which the middleware does not record, so
		// it releases the claim and a retry runs again (not waiting for
		// the lease to run out).
		a.logger.Warn("shutdown bound reached: cancelling in-flight requests; their claims are released", "active", a.active.Load())
		a.cancelCutOff()
		cancelRequests()
		a.drain(engine.DefaultStoreTimeout)
		_ = srv.Close()
	}
	<-served
	a.logger.Info("stopped")
	return nil
}

// drain waits, at most bound, for the active requests to return.
func (a *app) drain(bound time.Duration) {
	deadline := time.Now().Add(bound)
	for a.active.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := a.active.Load(); n > 0 {
		a.logger.Warn("requests still running after cancellation; their claims are left to expire with the lease", "active", n)
	}
}

// sweep removes abandoned claims and expired results, at once and then
// every sweepEvery (±50%), until ctx is done. Every instance runs it:
// pgstore's sweep is safe to run concurrently.
func (a *app) sweep(ctx context.Context) {
	sw := idem.Sweeper{
		Store:    a.be.store,
		Interval: a.cfg.sweepEvery,
		Logger:   a.logger,
		OnSweep:  func(_ context.Context, st idem.SweepStats) { a.metrics.swept(st) },
	}
	if err := sw.Run(ctx); err != nil {
		a.logger.Error("sweeper stopped", "err", err)
	}
}

func (a *app) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	w.Header().Set("Cache-Control", "no-store")
	if err := a.be.health(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "store": a.be.name, "error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "store": a.be.name})
}

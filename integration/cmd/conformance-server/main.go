// Command conformance-server serves what the official MCP conformance suite
// (@modelcontextprotocol/conformance, "server" mode) expects: its tools,
// resources, prompts, completion, logging and subscriptions, on go-sdk's
// Streamable HTTP handler in its default (stateful, SSE) mode, wrapped by
// mcphttp. The suite passing against it shows the wrapper changes nothing
// a conforming client can observe, including the tools/call it dedupes.
// With -stateless it serves go-sdk's stateless handler (protocol
// 2026-07-28), with the multi round-trip tools the 2026-07-28 requirements
// call; -derive-keys (test only) gives the suite's calls keys, so they take
// the dedupe path; scripts/conformance.sh runs both modes, bare
// (-idem=false) and wrapped, and compares.
//
//	conformance-server -addr 127.0.0.1:8080   # serves http://127.0.0.1:8080/mcp
//
// With DATABASE_URL (or -database-url) the wrapper's store is PostgreSQL,
// migrated at start; without it, the in-memory store, said at start.
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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address; the MCP endpoint is /mcp")
	dbURL := flag.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL); empty means the in-memory store")
	wrap := flag.Bool("idem", true, "wrap go-sdk's handler in mcphttp; -idem=false serves it bare, for comparison")
	stateless := flag.Bool("stateless", false, "serve go-sdk's stateless handler (protocol 2026-07-28, no sessions) instead of the stateful one")
	deriveKeys := flag.Bool("derive-keys", false, "test only: give every tools/call without a key one derived from its tool, arguments and _meta, so the suite's calls take the dedupe path")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, config{addr: *addr, dbURL: *dbURL, wrap: *wrap, stateless: *stateless, deriveKeys: *deriveKeys}, log); err != nil {
		log.Error("conformance-server", "err", err)
		os.Exit(1)
	}
}

type config struct {
	addr, dbURL                 string
	wrap, stateless, deriveKeys bool
}

func run(ctx context.Context, cfg config, log *slog.Logger) error {
	var handler http.Handler
	addr, dbURL, wrap := cfg.addr, cfg.dbURL, cfg.wrap

	server := newServer()
	watchCtx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	go notifyWatched(watchCtx, server)

	// PropagateRequestCancellation as mcphttp recommends for a stateless
	// handler (it applies from 2026-07-28 only), bare and wrapped alike;
	// ToolCancellation only with the wrapper, which it serves.
	handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: cfg.stateless, PropagateRequestCancellation: true})
	if wrap {
		store, closeStore, err := openStore(ctx, dbURL, log)
		if err != nil {
			return err
		}
		defer closeStore()
		events := &eventCounts{}
		defer events.report(log)
		server.AddReceivingMiddleware(mcphttp.ToolCancellation)
		handler = mcphttp.New(store, mcphttp.Options{Engine: engine.Options{Logger: log}, Observer: events.observe, Stateless: cfg.stateless})(handler)
		if cfg.deriveKeys {
			handler = deriveKeys(handler)
		}
	} else {
		log.Warn("serving go-sdk's handler without mcphttp")
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", handler)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("serving MCP", "url", "http://"+ln.Addr().String()+"/mcp")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func openStore(ctx context.Context, dbURL string, log *slog.Logger) (idem.Store, func(), error) {
	if dbURL == "" {
		log.Warn("no DATABASE_URL: using the in-memory store (nothing survives a restart)")
		return memstore.New(memstore.Options{}), func() {}, nil
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("migrating: %w", err)
	}
	store, err := pgstore.New(pool, pgstore.Options{})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	log.Info("using the PostgreSQL store")
	return store, func() { store.Close(); pool.Close() }, nil
}

// newServer registers everything the suite asks for.
func newServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "idem-conformance-server", Version: "1.0.0"}, &mcp.ServerOptions{
		CompletionHandler: func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}, nil
		},
		// go-sdk tracks subscriptions itself; the handlers only accept them.
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	addTools(s)
	addInputRequiredTools(s)
	addResources(s)
	addPrompts(s)
	return s
}

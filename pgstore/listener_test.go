package pgstore_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// waitBlocking starts Wait on key "a" and returns its result channel once
// it blocks on a notification.
func waitBlocking(t *testing.T, ctx context.Context, s *pgstore.Store) <-chan error {
	t.Helper()
	blocked := make(chan struct{}, 1)
	pgstore.SetWaitBlocked(s, func() {
		select {
		case blocked <- struct{}{}:
		default:
		}
	})
	errc := make(chan error, 1)
	go func() { errc <- s.Wait(ctx, "s", key("a")) }()
	select {
	case <-blocked:
	case err := <-errc:
		t.Fatalf("Wait returned %v before blocking", err)
	}
	return errc
}

// recreateTable rolls every migration back (dropping the table) and
// applies them again: the table gets a new oid, so a new channel.
func recreateTable(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) {
	t.Helper()
	pool = sessionPool(t, pool, schema)
	st, err := migrations.Status(ctx, pool, migrations.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st {
		if m.State == "applied" {
			if err := migrations.Down(ctx, pool, migrations.Options{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
}

// A table dropped and created again (migrations down and up, a restore)
// has a new oid, so a new notification channel: a LISTEN on the old one
// hears nothing. The waiter's own look at the key reports the new channel,
// and the listener follows it. The heartbeat is an hour here, so it cannot
// be what notices.
func TestListenerFollowsRecreatedTable(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, schema := migrated(t)
	holder := newStore(t, pool, pgstore.Options{})
	waiter := newStore(t, secondPool(t, schema), pgstore.Options{PollInterval: time.Hour, Heartbeat: time.Hour})
	if err := pgstore.CacheReady(ctx, waiter); err != nil {
		t.Fatal(err)
	}
	recreateTable(t, ctx, pool, schema)

	c := mustClaim(t, ctx, holder, idem.ClaimRequest{Scope: "s", Key: key("a"), Lease: time.Hour}, idem.Acquired)
	// The first wait finds the listener on the old channel: it is woken
	// while the listener moves (a notification may have been missed).
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := waiter.Wait(wctx, "s", key("a")); err != nil {
		t.Fatalf("Wait with the listener on a dropped table's channel = %v, want a wake-up", err)
	}
	// From then on the completion's NOTIFY, on the new channel, wakes it.
	if err := pgstore.CacheReady(ctx, waiter); err != nil {
		t.Fatal(err)
	}
	errc := waitBlocking(t, ctx, waiter)
	if err := holder.Complete(ctx, c.Token, idem.Result{Status: 200}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Wait after the table was re-created = %v, want woken by the NOTIFY", err)
	}
}

// A half-open LISTEN connection (the peer gone without a FIN: a dead NAT
// entry, a failed-over load balancer) reads nothing and fails nothing. The
// heartbeat notices within two intervals: the waiter is woken, the replay
// cache dropped, and a new connection hears again.
func TestListenerHeartbeatReplacesHalfOpenConnection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, schema := migrated(t)
	proxy := newFreezingProxy(t, testdb.DirectConfig(t, schema).ConnConfig)
	lcfg := testdb.DirectConfig(t, schema).ConnConfig
	lcfg.Host, lcfg.Port = proxy.host, proxy.port
	const heartbeat = 300 * time.Millisecond
	waiter := newStore(t, secondPool(t, schema), pgstore.Options{
		PollInterval: time.Hour, Heartbeat: heartbeat, ListenConfig: lcfg, ReplayCacheBytes: cacheBytes,
	})
	holder := newStore(t, pool, pgstore.Options{})
	if err := pgstore.CacheReady(ctx, waiter); err != nil {
		t.Fatal(err)
	}
	// A healthy connection answers its heartbeats and is kept.
	for pgstore.Heartbeats(waiter) < 2 {
		select {
		case <-ctx.Done():
			t.Fatal("no heartbeat came back")
		case <-time.After(heartbeat / 4):
		}
	}
	if n := proxy.connections.Load(); n != 1 {
		t.Fatalf("%d LISTEN connections after two heartbeats, want 1", n)
	}

	dropped := make(chan struct{}, 1)
	pgstore.SetCacheDropped(waiter, func() {
		select {
		case dropped <- struct{}{}:
		default:
		}
	})

	c := mustClaim(t, ctx, holder, idem.ClaimRequest{Scope: "s", Key: key("a"), Lease: time.Hour}, idem.Acquired)
	errc := waitBlocking(t, ctx, waiter)
	proxy.freeze()
	if err := holder.Complete(ctx, c.Token, idem.Result{Status: 200}); err != nil {
		t.Fatal(err)
	}
	// The completion's NOTIFY is lost in the frozen connection: only the
	// heartbeat can wake the waiter before the test's deadline.
	if err := <-errc; err != nil {
		t.Fatalf("Wait on a half-open LISTEN connection = %v, want woken once the heartbeat is missed", err)
	}
	<-dropped
	if err := pgstore.CacheReady(ctx, waiter); err != nil {
		t.Fatal(err)
	}
	if n := proxy.connections.Load(); n < 2 {
		t.Fatalf("%d LISTEN connections, want a new one", n)
	}
	mustClaim(t, ctx, waiter, idem.ClaimRequest{Scope: "s", Key: key("a")}, idem.Completed)
}

// freezingProxy forwards TCP to PostgreSQL until freeze, after which the
// connections open at that moment pass nothing either way and are not
// closed: a half-open connection, as the client sees it. Connections
// opened later work.
type freezingProxy struct {
	host        string
	port        uint16
	ln          net.Listener
	upstream    string
	connections atomic.Int32
	frozenUpTo  atomic.Int32
	wg          sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

func newFreezingProxy(t *testing.T, target *pgx.ConnConfig) *freezingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	p := &freezingProxy{host: "127.0.0.1", port: uint16(addr.Port), ln: ln,
		upstream: net.JoinHostPort(target.Host, strconv.Itoa(int(target.Port)))}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *freezingProxy) freeze() { p.frozenUpTo.Store(p.connections.Load()) }

func (p *freezingProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		id := p.connections.Add(1)
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pump(id, u, c)
		go p.pump(id, c, u)
	}
}

// pump copies src to dst until either fails; once the connection is
// frozen, what it reads is dropped.
func (p *freezingProxy) pump(id int32, dst, src net.Conn) {
	defer p.wg.Done()
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && id > p.frozenUpTo.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

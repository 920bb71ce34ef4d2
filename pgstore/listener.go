package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// listener is the one LISTEN connection of a Store, shared by all its
// waiters. It starts with the first Wait (or the replay cache's first
// claim), reconnects with backoff when the connection fails (waking every
// waiter, since notifications may have been lost meanwhile), and stops at
// Close.
//
// A LISTEN connection can also go deaf without failing: a half-open TCP
// connection reads nothing for minutes before the kernel notices, and a
// connection LISTENing on the channel of a table that was dropped and
// created again (the channel names the table's oid) hears nothing the
// statements send. Two checks replace a deaf connection:
//
//   - the heartbeat: when nothing arrived for a heartbeat interval, the
//     listener sends a notification through the pool, on the channel the
//     statements use, and expects it back within another interval;
//   - following the table: Wait's statement reports the channel the
//     statements use, and a different one than the LISTEN's makes the
//     listener reconnect at once (see follow).
//
// While the LISTEN is not in effect (connecting, reconnecting, replaced),
// waiters poll and the replay cache is dropped and bypassed.
//
// By default the connection is taken out of the pool (hijacked), so it
// neither counts against the pool's size for long nor keeps pool.Close
// waiting; Options.ListenConfig connects it directly instead, past a
// transaction-mode pooler.
type listener struct {
	listenerConfig

	mu         sync.Mutex
	started    bool
	closed     bool
	ready      chan struct{} // closed while LISTEN is in effect
	channel    string        // the channel LISTENed on; "" when not in effect
	dropConn   context.CancelFunc
	waiters    map[string]*waitSet
	cancel     context.CancelFunc
	done       chan struct{}
	heartbeats int // heartbeats answered, for tests
}

// waitSet is the waiters of one payload: ch is closed to wake them all.
type waitSet struct {
	ch chan struct{}
	n  int
}

// listenerConfig is what the listener needs of its store.
type listenerConfig struct {
	// pool is where the channel is looked up and heartbeats are sent, and
	// the connection is hijacked from without direct.
	pool *pgxpool.Pool
	// sql holds the channel and heartbeat statements.
	sql *statements
	log *slog.Logger
	// direct is Options.ListenConfig; nil hijacks a pool connection.
	direct    *pgx.ConnConfig
	heartbeat time.Duration
	// off is Options.NoListen: subscribe and start do nothing, and
	// waiters only poll.
	off bool
	// notified, when not nil, is called with each notification's payload
	// before its waiters are woken (the replay cache forgets the key).
	notified func(payload string)
	// listening, when not nil, is called with whether the LISTEN is in
	// effect each time the listener sets it up or loses it (the replay
	// cache is used only while it is).
	listening func(up bool)
}

func newListener(cfg listenerConfig) *listener {
	return &listener{listenerConfig: cfg, ready: make(chan struct{}), waiters: make(map[string]*waitSet)}
}

// subscribe registers a waiter for payload. ch is closed when a
// notification for payload arrives (or on a reconnect); ready is closed
// once the LISTEN is in effect. unsubscribe must be called. With LISTEN
// off, or after Close, both channels are nil: the waiter only polls.
func (l *listener) subscribe(payload string) (ch, ready <-chan struct{}, unsubscribe func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.off || l.closed {
		return nil, nil, func() {}
	}
	l.startLocked()
	ws := l.waiters[payload]
	if ws == nil {
		ws = &waitSet{ch: make(chan struct{})}
		l.waiters[payload] = ws
	}
	ws.n++
	return ws.ch, l.ready, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if cur := l.waiters[payload]; cur == ws {
			if ws.n--; ws.n == 0 {
				delete(l.waiters, payload)
			}
		}
	}
}

// start starts the LISTEN connection if it is not running, for the replay
// cache, which follows notifications whether or not anyone waits.
func (l *listener) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.off && !l.closed {
		l.startLocked()
	}
}

func (l *listener) startLocked() {
	if !l.started {
		l.started = true
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go l.run(ctx)
	}
}

func (l *listener) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	l.wakeAll()
}

// follow is told the channel a statement just used. If the LISTEN is on
// another one (the table was dropped and created again since it began),
// the connection is dropped at once, to reconnect on the new channel.
func (l *listener) follow(channel string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.channel != "" && l.channel != channel && l.dropConn != nil {
		l.log.Warn("pgstore: the table's notification channel changed (was it dropped and created again?); listening again",
			"listening", l.channel, "statements", channel)
		l.dropConn()
		l.dropConn = nil
	}
}

func (l *listener) dispatch(payload string) {
	if l.notified != nil {
		l.notified(payload)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ws := l.waiters[payload]; ws != nil {
		close(ws.ch)
		delete(l.waiters, payload)
	}
}

func (l *listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, ws := range l.waiters {
		close(ws.ch)
		delete(l.waiters, p)
	}
}

// setReady records whether the LISTEN on channel is in effect (channel is
// "" when it is not).
func (l *listener) setReady(channel string, dropConn context.CancelFunc) {
	up := channel != ""
	if l.listening != nil {
		l.listening(up)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.channel, l.dropConn = channel, dropConn
	select {
	case <-l.ready:
		if !up {
			l.ready = make(chan struct{})
		}
	default:
		if up {
			close(l.ready)
		}
	}
}

func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	backoff := 100 * time.Millisecond
	for {
		connected, err := l.listen(ctx)
		l.setReady("", nil)
		if ctx.Err() != nil {
			return
		}
		// Notifications may have been lost while the connection was down
		// or deaf: wake everyone to look again.
		l.wakeAll()
		l.log.Warn("pgstore: LISTEN connection lost; waiters poll until it is back", "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if connected {
			backoff = 100 * time.Millisecond
		} else {
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

// errDeaf ends a LISTEN connection whose heartbeat did not come back.
var errDeaf = errors.New("pgstore: the LISTEN connection did not hear its heartbeat")

// connect opens the LISTEN connection: a direct one with
// Options.ListenConfig, else one taken out of the pool.
func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	if l.direct != nil {
		return pgx.ConnectConfig(ctx, l.direct.Copy())
	}
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return pc.Hijack(), nil
}

// listen holds one LISTEN connection until it fails, goes deaf, is dropped
// by follow, or ctx is done. It reports whether the LISTEN was in effect.
func (l *listener) listen(ctx context.Context) (connected bool, err error) {
	// The channel names the table's oid: it is looked up on each connect,
	// through the pool (where the statements run), so that a re-created
	// table is followed, and so that a direct LISTEN connection's
	// search_path does not matter.
	row, err := l.sql.channel.query(ctx, l.pool, noParams{})
	if err != nil {
		return false, err
	}
	channel := row.channel
	conn, err := l.connect(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// channel is "idem_" and digits: no quoting needed.
	if _, err := conn.Exec(ctx, `LISTEN `+channel); err != nil {
		return false, err
	}
	connCtx, dropConn := context.WithCancel(ctx)
	defer dropConn()
	l.setReady(channel, dropConn)

	// One heartbeat is outstanding at a time: its payload, and when it is
	// due back. Any notification proves the connection alive but not that
	// it hears the statements' channel after a re-creation, so only the
	// heartbeat's own payload counts.
	var (
		beat      string
		deadline  = time.Now().Add(l.heartbeat)
		heartbeat = l.heartbeat
	)
	for {
		wctx, cancel := context.WithDeadline(connCtx, deadline)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil && n.Payload == beat && beat != "":
			l.mu.Lock()
			l.heartbeats++
			l.mu.Unlock()
			beat, deadline = "", time.Now().Add(heartbeat)
		case err == nil:
			if !isHeartbeat(n.Payload) {
				l.dispatch(n.Payload)
			}
		case connCtx.Err() != nil && ctx.Err() == nil:
			return true, errors.New("pgstore: the statements' notification channel changed")
		case !pgconn.Timeout(err) || ctx.Err() != nil:
			return true, err
		case beat != "":
			return true, fmt.Errorf("%w within %v", errDeaf, heartbeat)
		default:
			if beat, err = l.sendHeartbeat(connCtx, heartbeat); err != nil {
				return true, err
			}
			deadline = time.Now().Add(heartbeat)
		}
	}
}

// heartbeatPrefix starts every heartbeat's payload; a key's payload is hex.
const heartbeatPrefix = "heartbeat:"

func isHeartbeat(payload string) bool { return strings.HasPrefix(payload, heartbeatPrefix) }

// sendHeartbeat notifies the statements' channel, through the pool, with a
// payload only this listener knows, and returns it.
func (l *listener) sendHeartbeat(ctx context.Context, timeout time.Duration) (string, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	beat := heartbeatPrefix + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := l.sql.heartbeat.exec(ctx, l.pool, heartbeatParams{beat}); err != nil {
		return "", fmt.Errorf("pgstore: sending the LISTEN heartbeat: %w", err)
	}
	return beat, nil
}

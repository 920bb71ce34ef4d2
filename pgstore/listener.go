package pgstore

import (
	"context"
	"sync"
	"time"
)

// listener is the one LISTEN connection of a Store, shared by all its
// waiters. It starts with the first Wait, reconnects with backoff when the
// connection fails (waking every waiter, since notifications may have been
// lost meanwhile), and stops at Close.
//
// The connection is taken out of the pool (hijacked), so it neither counts
// against the pool's size for long nor keeps pool.Close waiting.
type listener struct {
	s *Store

	mu      sync.Mutex
	started bool
	closed  bool
	ready   chan struct{} // closed while LISTEN is in effect
	waiters map[string]*waitSet
	cancel  context.CancelFunc
	done    chan struct{}
}

// waitSet is the waiters of one payload: ch is closed to wake them all.
type waitSet struct {
	ch chan struct{}
	n  int
}

func newListener(s *Store) *listener {
	return &listener{s: s, ready: make(chan struct{}), waiters: make(map[string]*waitSet)}
}

// closedChan is ready forever: after Close, waiters only poll.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// subscribe registers a waiter for payload. ch is closed when a
// notification for payload arrives (or on a reconnect); ready is closed
// once the LISTEN is in effect. unsubscribe must be called.
func (l *listener) subscribe(payload string) (ch, ready <-chan struct{}, unsubscribe func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return make(chan struct{}), closedChan, func() {}
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
	if !l.closed {
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

func (l *listener) dispatch(payload string) {
	if c := l.s.cache; c != nil {
		c.invalidate(payload)
		if f := l.s.cacheInvalidated.Load(); f != nil {
			(*f)(payload)
		}
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

func (l *listener) setReady(up bool) {
	if c := l.s.cache; c != nil {
		c.setReady(up)
		if f := l.s.cacheDropped.Load(); f != nil && !up {
			(*f)()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
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
		l.setReady(false)
		if ctx.Err() != nil {
			return
		}
		// Notifications may have been lost while the connection was down:
		// wake everyone to look again.
		l.wakeAll()
		l.s.log.Warn("pgstore: LISTEN connection lost; waiters poll until it is back", "err", err, "retry_in", backoff)
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

// listen holds one LISTEN connection until it fails or ctx is done. It
// reports whether the LISTEN was in effect.
func (l *listener) listen(ctx context.Context) (connected bool, err error) {
	pc, err := l.s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// The channel names the table's oid, looked up on each connect so a
	// re-created table is followed.
	var channel string
	if err := conn.QueryRow(ctx, l.s.sql.channel).Scan(&channel); err != nil {
		return false, err
	}
	if _, err := conn.Exec(ctx, `LISTEN `+channel); err != nil {
		return false, err
	}
	l.setReady(true)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		l.dispatch(n.Payload)
	}
}

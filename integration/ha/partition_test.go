package ha_test

import (
	"io"
	"net"
	"sync"
	"testing"
)

// partitionProxy stands between one Patroni member and etcd, so that a test
// can cut that member off from the configuration store as a network
// partition would: while partitioned, bytes in either direction are dropped
// (connections stay open, so reads hang until the client's own timeout, as
// they do when packets are lost) and new connections are accepted but hear
// nothing. heal ends the partition and closes every connection that lost
// bytes, so the client reconnects on clean streams.
type partitionProxy struct {
	ln     net.Listener
	target string

	mu          sync.Mutex
	partitioned bool
	conns       map[net.Conn]struct{} // both ends of every connection
	wg          sync.WaitGroup
}

func startPartitionProxy(t testing.TB, target string) *partitionProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partitionProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// addr is what the member connects to instead of etcd.
func (p *partitionProxy) addr() string { return p.ln.Addr().String() }

func (p *partitionProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.partitioned
		p.mu.Unlock()
		if cut {
			// Accepted, as a kernel would, but nothing gets through.
			p.track(c)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				_, _ = io.Copy(io.Discard, c)
				p.untrack(c)
			}()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.track(c)
		p.track(up)
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies from src to dst, dropping what it reads while partitioned;
// when either side ends it closes both.
func (p *partitionProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		p.untrack(src)
		p.untrack(dst)
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			cut := p.partitioned
			p.mu.Unlock()
			if !cut {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *partitionProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

func (p *partitionProxy) untrack(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// partition starts dropping everything between the member and etcd.
func (p *partitionProxy) partition() {
	p.mu.Lock()
	p.partitioned = true
	p.mu.Unlock()
}

// heal lets traffic through again, closing the connections that lost bytes.
func (p *partitionProxy) heal() {
	p.mu.Lock()
	p.partitioned = false
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (p *partitionProxy) close() {
	_ = p.ln.Close()
	p.heal()
	p.wg.Wait()
}

package robustness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/idemkit/idem/integration/robustness/wire"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/testlog"
	"github.com/idemkit/idem/migrations"
)

// cluster is the system under test: a private PostgreSQL, one fault proxy
// and one service process per instance, and the effect service, with
// everything they report.
//
// Three instances of robustness/sut (its command doc lists the handlers)
// share one private PostgreSQL (local server binaries, else a container),
// each reaching it through its own toxiproxy proxy
// (github.com/Shopify/toxiproxy/v2 v2.12.0, a library in the test). POST
// /ext works up to 1.5 s ignoring its context and answers 201 naming its
// execution; the effect service numbers effects as they arrive. POST /tx
// runs with MaxExecution 500 ms and MaxRecordBytes 4 KiB, works up to
// 300 ms ignoring its context, and misbehaves as its key says, as net/http
// tolerates: status, body, then http.Error; the body before
// WriteHeader(201); a panic after the answer; work past MaxExecution; the
// transaction idle past its bound (body before status); an answer over the
// record limit (committed early, unreplayable, retries answered 410); or
// none. Panics and idle transactions come on odd row ids, so a retry gets
// through. The MCP tool runs on go-sdk, stateless, JSON responses, with
// mcphttp.ToolCancellation. Lease 1 s, wait 500 ms, store timeout 1 s, a
// sweeper every 500 ms per instance, a shutdown bound of 300 ms.
type cluster struct {
	t     testing.TB
	cfg   runConfig
	clock *clock

	pg      *testdb.Server
	pgAddr  string
	pool    *pgxpool.Pool // the harness's own connection, direct
	tox     *toxiproxy.ApiServer
	nodes   []*instance
	effects *effectService
	records *recordLog
}

// clock gives the run's times: nanoseconds on the wall clock, which the
// service processes and PostgreSQL share with the harness.
type clock struct{ start time.Time }

func (c *clock) now() int64 { return time.Now().UnixNano() }

// buildService builds robustness/sut into dir, with the idem_mutant tag
// when mutant is set.
func buildService(dir string, mutant bool, race bool) (string, error) {
	bin := filepath.Join(dir, "sut")
	args := []string{"build", "-o", bin}
	if mutant {
		args = append(args, "-tags", "idem_mutant")
	}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./sut")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the service: %w", err)
	}
	return bin, nil
}

// startPostgres starts the run's private PostgreSQL: local binaries when
// they are installed (a restart takes a fraction of a second), else a
// container.
func startPostgres(t testing.TB) *testdb.Server {
	t.Helper()
	if local, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl"); len(local) > 0 {
		return testdb.StartLocalServer(t)
	}
	if _, err := exec.LookPath("pg_ctl"); err == nil {
		return testdb.StartLocalServer(t)
	}
	return testdb.StartServer(t)
}

func newCluster(t testing.TB, cfg runConfig, bin string, clk *clock) *cluster {
	t.Helper()
	c := &cluster{t: t, cfg: cfg, clock: clk, records: &recordLog{}}
	c.pg = startPostgres(t)
	u, err := url.Parse(c.pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	c.pgAddr = u.Host

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pcfg, err := pgxpool.ParseConfig(c.pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 4
	if c.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.pool.Close)
	if err := migrations.Up(ctx, c.pool, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.pool.Exec(ctx, wire.EffectsDDL); err != nil {
		t.Fatal(err)
	}

	c.effects = startEffectService(t, clk)
	c.tox = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	for i := range cfg.instances {
		name := fmt.Sprintf("i%d", i+1)
		proxy := toxiproxy.NewProxy(c.tox, name, "127.0.0.1:0", c.pgAddr)
		if err := proxy.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(proxy.Stop)
		dbURL := *u
		dbURL.Host = proxy.Listen
		n := &instance{c: c, name: name, proxy: proxy, addr: testdb.FreeAddr(t), bin: bin}
		n.args = []string{
			"-addr", n.addr, "-database-url", dbURL.String(), "-instance", name,
			"-effect-url", c.effects.url, "-lease", cfg.lease.String(), "-wait", cfg.wait.String(),
			"-store-timeout", cfg.storeTimeout.String(), "-sweep-interval", cfg.sweepEvery.String(),
			"-shutdown-timeout", cfg.shutdownTimeout.String(),
		}
		if cfg.mutant != "" {
			n.args = append(n.args, "-mutant", cfg.mutant)
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := n.start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.stop()
		}
	})
	return c
}

// recordLog is every line the service processes wrote, in arrival order.
type recordLog struct {
	mu  sync.Mutex
	all []wire.Record
}

func (l *recordLog) add(r wire.Record) {
	l.mu.Lock()
	l.all = append(l.all, r)
	l.mu.Unlock()
}

func (l *recordLog) snapshot() []wire.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]wire.Record(nil), l.all...)
}

// instance is one service instance: its proxy to PostgreSQL and the
// process currently running it (a restart is a new process on the same
// address).
type instance struct {
	c     *cluster
	name  string
	addr  string
	bin   string
	args  []string
	proxy *toxiproxy.Proxy

	mu   sync.Mutex
	proc *process
	past []*process
}

// process is one run of the service.
type process struct {
	cmd    *exec.Cmd
	pid    int
	done   chan struct{} // closed once it exited and its stdout was read
	err    error
	stderr testlog.Buffer
	paused bool
}

func (n *instance) url() string { return "http://" + n.addr }

// start runs a new process and waits until it listens.
func (n *instance) start() error {
	p := &process{done: make(chan struct{})}
	p.cmd = exec.Command(n.bin, n.args...)
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	p.pid = p.cmd.Process.Pid
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			var r wire.Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				continue
			}
			n.c.records.add(r)
			if r.Ev == wire.EvLife && r.What == "listening" {
				once.Do(func() { close(listening) })
			}
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	select {
	case <-listening:
	case <-p.done:
		return fmt.Errorf("%s exited before listening (%v): %s", n.name, p.err, p.stderr.String())
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not listen within 30s: %s", n.name, p.stderr.String())
	}
	n.mu.Lock()
	n.proc = p
	n.past = append(n.past, p)
	n.mu.Unlock()
	return nil
}

func (n *instance) current() *process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

// signal sends sig to the current process, if it runs.
func (n *instance) signal(sig syscall.Signal) (*process, error) {
	p := n.current()
	if p == nil {
		return nil, errors.New("not running")
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return p, err
	}
	return p, nil
}

// kill sends SIGKILL and waits until the process is gone.
func (n *instance) kill() error {
	p, err := n.signal(syscall.SIGKILL)
	if err != nil {
		return err
	}
	<-p.done
	n.mu.Lock()
	n.proc = nil
	n.mu.Unlock()
	return nil
}

// terminate sends SIGTERM and waits (at most 20s) for the process to exit.
func (n *instance) terminate() error {
	p, err := n.signal(syscall.SIGTERM)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not exit within 20s of SIGTERM", n.name)
	}
	n.mu.Lock()
	n.proc = nil
	n.mu.Unlock()
	return nil
}

// pause and resume stop and continue the current process.
func (n *instance) pause() error {
	p, err := n.signal(syscall.SIGSTOP)
	if err == nil {
		p.paused = true
	}
	return err
}

func (n *instance) resume() error {
	p, err := n.signal(syscall.SIGCONT)
	if err == nil {
		p.paused = false
	}
	return err
}

// stop ends the instance at the end of the run: SIGCONT in case it is
// paused, then SIGTERM.
func (n *instance) stop() {
	if n.current() == nil {
		return
	}
	_ = n.resume()
	if err := n.terminate(); err != nil {
		n.c.t.Errorf("%v", err)
	}
}

// crashes returns what the instance's processes printed that says they
// crashed on their own: a panic, a fatal error, a data race.
func (n *instance) crashes() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, p := range n.past {
		s := p.stderr.String()
		for _, marker := range []string{"panic:", "fatal error:", "WARNING: DATA RACE"} {
			if i := strings.Index(s, marker); i >= 0 {
				end := min(len(s), i+2000)
				out = append(out, fmt.Sprintf("%s pid %d: %s", n.name, p.pid, s[i:end]))
				break
			}
		}
	}
	return out
}

// effectService is the side effect outside the database: every call is an
// effect, numbered in arrival order.
type effectService struct {
	url string
	mu  sync.Mutex
	log []effect
	srv *http.Server
}

type effect struct {
	wire.Effect
	T   int64
	Seq int64
}

func startEffectService(t testing.TB, clk *clock) *effectService {
	t.Helper()
	s := &effectService{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.url = "http://" + l.Addr().String() + "/effect"
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e wire.Effect
		if err := json.NewDecoder(r.Body).Decode(&e); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		seq := int64(len(s.log) + 1)
		s.log = append(s.log, effect{Effect: e, T: clk.now(), Seq: seq})
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(wire.EffectReply{Seq: seq})
	})}
	go func() { _ = s.srv.Serve(l) }()
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

func (s *effectService) snapshot() []effect {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]effect(nil), s.log...)
}

// pgSample is what the database looked like at one moment when something
// waited in it: lock waits and long transactions, for the event sequences.
type pgSample struct {
	T    int64
	Text string
}

// samplePostgres looks at pg_stat_activity every 250ms until ctx ends and
// keeps the moments when a backend waited on a lock or a transaction had
// been open for more than 300ms, with what blocked it.
func (c *cluster) samplePostgres(ctx context.Context) []pgSample {
	var out []pgSample
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		rows, err := c.pool.Query(qctx, `
			SELECT a.pid, a.application_name, coalesce(a.state, ''), coalesce(a.wait_event_type || ':' || a.wait_event, ''),
			       extract(epoch FROM now() - a.xact_start)::float8, left(a.query, 80), pg_blocking_pids(a.pid)::text
			FROM pg_stat_activity a
			WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL
			  AND (a.wait_event_type = 'Lock' OR now() - a.xact_start > interval '300 milliseconds')`)
		if err != nil {
			cancel()
			continue
		}
		var lines []string
		for rows.Next() {
			var pid int
			var app, state, wait, query, blockers string
			var age float64
			if rows.Scan(&pid, &app, &state, &wait, &age, &query, &blockers) == nil {
				lines = append(lines, fmt.Sprintf("pid %d %s %s %s xact %.2fs blocked by %s: %s", pid, app, state, wait, age, blockers, strings.Join(strings.Fields(query), " ")))
			}
		}
		rows.Close()
		cancel()
		if len(lines) > 0 {
			out = append(out, pgSample{T: c.clock.now(), Text: strings.Join(lines, "; ")})
		}
	}
}

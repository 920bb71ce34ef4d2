package testdb

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is a private PostgreSQL server a test owns: its own data directory
// and port, so a test can stop it (an outage, a crash) without disturbing the
// shared database every other test uses.
type Server struct {
	// URL connects to the server's database "idem" as the superuser "idem".
	// It stays the same across Stop and Start.
	URL  string
	Port int

	t testing.TB

	// A container, in a binary with Containers when a Docker engine
	// answered,
	ctr Container

	// else local binaries.
	bin     string // directory of initdb, pg_ctl, postgres
	dataDir string
	asUser  []string // command prefix that runs a program as the postgres user, when we are root
}

// BinEnv names the environment variable that points the private servers at
// one PostgreSQL's server binaries: a directory holding initdb, pg_ctl and
// postgres. Set, every private server ([StartServer] and
// [StartLocalServer]) runs those binaries as local processes, never a
// container, so that a test binary runs against the version of the
// database TEST_DATABASE_URL names (scripts/pg-matrix.sh sets both, one
// PostgreSQL version at a time, and so does `make test` for the server it
// starts itself). Unset, the binaries are found without it: the newest
// under /usr/lib/postgresql (Debian's layout), else pg_config --bindir,
// else pg_ctl on PATH.
const BinEnv = "IDEM_TEST_POSTGRES_BIN"

// StartServer initialises and starts a private PostgreSQL server, stopped and
// removed when t ends. It is a container ([Image]) in a binary with
// [Containers] (see [MainWith]) when the run uses containers (no
// TEST_DATABASE_URL, see [ErrContainersOff]), a Docker engine answers and
// [BinEnv] is unset; else PostgreSQL's server binaries run as local
// processes (see [BinEnv] for where they are found). Without either the
// test is skipped locally and fails in CI, like [URL].
func StartServer(t testing.TB) *Server {
	t.Helper()
	if os.Getenv(BinEnv) == "" && available(runningContainers()) == nil {
		return startContainerServer(t)
	}
	return StartLocalServer(t)
}

// StartLocalServer is [StartServer] with PostgreSQL's binaries run as local
// processes even when Docker answers, for a test that needs the server's
// files or tools (pg_basebackup, a data directory). Without the binaries
// the test is skipped locally and fails in CI.
func StartLocalServer(t testing.TB) *Server {
	t.Helper()
	s := newServer(t)
	s.run("initdb", "-D", s.dataDir, "-U", "idem", "--auth=trust", "--no-sync", "-E", "UTF8")
	s.Start()
	t.Cleanup(func() { s.Stop("immediate") })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://idem@127.0.0.1:%d/postgres?sslmode=disable", s.Port))
	if err != nil {
		t.Fatalf("testdb: connect to private server: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE idem"); err != nil {
		t.Fatalf("testdb: create database: %v", err)
	}
	return s
}

// StartStandby takes a base backup of s (pg_basebackup -R, so it streams
// from s) into a new server of its own, starts it as a hot standby, and
// waits until it streams. Its walreceiver connects as
// application_name name, the name synchronous_standby_names on s refers to.
// It is stopped and removed when the test ends.
func (s *Server) StartStandby(name string) *Server {
	s.t.Helper()
	if s.ctr != nil {
		s.t.Fatal("testdb: StartStandby needs a server from StartLocalServer (pg_basebackup), not a container")
	}
	if _, err := os.Stat(filepath.Join(s.bin, "pg_basebackup")); err != nil {
		// A server-only installation (the npm packages make test may
		// use): the standby cannot be made, which is no missing database.
		s.t.Skipf("needs pg_basebackup, which %s lacks", s.bin)
	}
	sb := newServer(s.t)
	s.run("pg_basebackup", "-D", sb.dataDir, "-R", "--no-sync", "-X", "stream", "-c", "fast",
		"-d", fmt.Sprintf("postgres://idem@127.0.0.1:%d/?sslmode=disable&application_name=%s", s.Port, name))
	sb.Start()
	s.t.Cleanup(func() { sb.Stop("immediate") })
	waitQuery(s.t, s.URL, "the standby "+name+" to stream",
		`SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'`, name)
	return sb
}

// WaitReplicated waits until the standby streaming as application_name name
// has flushed all the WAL s had written when called: every transaction
// committed on s before the call survives s's loss.
func (s *Server) WaitReplicated(name string) {
	s.t.Helper()
	var lsn string
	s.exec(func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	})
	waitQuery(s.t, s.URL, "the standby "+name+" to flush "+lsn,
		`SELECT coalesce(bool_or(flush_lsn >= $1::pg_lsn), false) FROM pg_stat_replication WHERE application_name = $2`, lsn, name)
}

// AlterSystem sets a server setting (ALTER SYSTEM, so it survives a
// restart) and reloads the configuration.
func (s *Server) AlterSystem(name, value string) {
	s.t.Helper()
	s.exec(func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER SYSTEM SET %s = %s", pgx.Identifier{name}.Sanitize(), quoteLiteral(value))); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, "SELECT pg_reload_conf()")
		return err
	})
}

// exec runs f on a connection to the server's database, failing the test on
// an error.
func (s *Server) exec(f func(context.Context, *pgx.Conn) error) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL)
	if err == nil {
		err = f(ctx, conn)
		_ = conn.Close(ctx)
	}
	if err != nil {
		s.t.Fatalf("testdb: %v", err)
	}
}

func quoteLiteral(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }

// Promote ends recovery on a standby (pg_ctl promote) and waits until it
// accepts writes.
func (s *Server) Promote() {
	s.t.Helper()
	s.run("pg_ctl", "promote", "-w", "-t", "60", "-D", s.dataDir)
	waitQuery(s.t, s.URL, "the promoted standby to accept writes", `SELECT NOT pg_is_in_recovery()`)
}

// waitQuery polls query (a boolean) on url until it is true, failing t
// after a minute.
func waitQuery(t testing.TB, url, what, query string, args ...any) {
	t.Helper()
	end := time.Now().Add(time.Minute)
	var last error
	for time.Now().Before(end) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var ok bool
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			err = conn.QueryRow(ctx, query, args...).Scan(&ok)
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("testdb: timed out waiting for %s (last error: %v)", what, last)
}

// newServer makes the directory and picks the port of a server not yet
// initialised; the directory is removed when t ends.
func newServer(t testing.TB) *Server {
	t.Helper()
	bin, err := serverBinDir()
	if err != nil {
		msg := SkipReason + " server binaries: " + err.Error()
		if os.Getenv("CI") != "" || os.Getenv(BinEnv) != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s := &Server{t: t, bin: bin}
	root, err := os.MkdirTemp("", "idem-pg-")
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	s.dataDir = filepath.Join(root, "data")
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root: run it as "postgres".
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("testdb: running as root needs a postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.Chmod(root, 0o755); err != nil {
			t.Fatalf("testdb: %v", err)
		}
		if err := os.Mkdir(s.dataDir, 0o700); err != nil {
			t.Fatalf("testdb: %v", err)
		}
		if err := os.Chown(s.dataDir, uid, gid); err != nil {
			t.Fatalf("testdb: %v", err)
		}
		s.asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	s.Port = FreePort(t)
	s.URL = fmt.Sprintf("postgres://idem@127.0.0.1:%d/idem?sslmode=disable", s.Port)
	return s
}

// startContainerServer is StartServer with a container, on a port fixed for
// its life so that clients reconnect to the same URL after a restart.
func startContainerServer(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := &Server{t: t}
	var ctr Container
	var err error
	// The free port can be taken before Docker binds it: pick another.
	for range 3 {
		s.Port = FreePort(t)
		ctr, err = startContainer(ctx, Spec("server", s.Port, "-c", "max_connections=200"))
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	s.URL = fmt.Sprintf("postgres://idem:idem@127.0.0.1:%d/idem?sslmode=disable", s.Port)
	if err != nil {
		t.Fatalf("testdb: private server: %v", err)
	}
	s.ctr = ctr
	t.Cleanup(func() {
		if err := removeContainer(ctr); err != nil {
			t.Errorf("testdb: remove the private server's container: %v", err)
		}
	})
	return s
}

// Start starts the server and waits until it accepts connections.
func (s *Server) Start() {
	s.t.Helper()
	if s.ctr != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := s.ctr.Start(ctx); err != nil {
			s.t.Fatalf("testdb: start the private server's container: %v", err)
		}
		// A container's readiness check may count log lines of every
		// run, and pass at once after a restart: ask the server itself.
		if err := waitAccepting(ctx, s.URL); err != nil {
			s.t.Fatalf("testdb: %v", err)
		}
		return
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories='' -c fsync=off", s.Port)
	s.run("pg_ctl", "start", "-w", "-t", "60", "-D", s.dataDir, "-o", opts, "-l", filepath.Join(s.dataDir, "server.log"))
}

// Signals [Server.Stop] sends a container's postmaster for pg_ctl's
// shutdown modes.
var stopSignals = map[string]string{"smart": "SIGTERM", "fast": "SIGINT", "immediate": "SIGQUIT"}

// Stop stops the server with pg_ctl's mode ("immediate" is a crash: no
// checkpoint, connections cut; a container's postmaster gets the signal
// pg_ctl would send). Stopping a stopped server does nothing.
func (s *Server) Stop(mode string) {
	s.t.Helper()
	if s.ctr != nil {
		sig, ok := stopSignals[mode]
		if !ok {
			s.t.Fatalf("testdb: unknown shutdown mode %q", mode)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if running, err := s.ctr.Running(ctx); err == nil && !running {
			return
		}
		if err := s.ctr.Signal(ctx, sig); err != nil {
			s.t.Fatalf("testdb: stop the private server's container: %v", err)
		}
		return
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "postmaster.pid")); err != nil {
		return
	}
	s.run("pg_ctl", "stop", "-w", "-t", "60", "-D", s.dataDir, "-m", mode)
}

// CheckStopsAndStarts fails t unless s answers a query, refuses one once
// stopped as by a crash (Stop("immediate")), and answers again on the
// same URL once started: what the tests that stop a server rely on, for a
// test of each kind of server (local, container).
func CheckStopsAndStarts(t testing.TB, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	query := func() error {
		conn, err := pgx.Connect(ctx, s.URL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		var one int
		return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	}
	if err := query(); err != nil {
		t.Fatalf("query a running server: %v", err)
	}
	s.Stop("immediate")
	if err := query(); err == nil {
		t.Fatal("query succeeded against a stopped server")
	}
	s.Start()
	if err := query(); err != nil {
		t.Fatalf("query after restart: %v", err)
	}
}

func (s *Server) run(prog string, args ...string) {
	s.t.Helper()
	argv := append(append(append([]string{}, s.asUser...), filepath.Join(s.bin, prog)), args...)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("testdb: %s: %v\n%s", prog, err, out)
	}
}

func serverBinDir() (string, error) {
	if d := os.Getenv(BinEnv); d != "" {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err != nil {
			return "", fmt.Errorf("%s=%s: %w", BinEnv, d, err)
		}
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		// A link on PATH (/usr/local/bin/pg_ctl): the directory it points
		// into holds the other programs too (pg_basebackup).
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL server binaries (pg_ctl) under /usr/lib/postgresql/*/bin, in pg_config --bindir or on PATH; install PostgreSQL's server, or set %s", BinEnv)
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// FreePort returns a port of 127.0.0.1 that nothing listened on a moment
// ago, for a process the test starts.
func FreePort(t testing.TB) int {
	t.Helper()
	addr, err := net.ResolveTCPAddr("tcp", FreeAddr(t))
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	return addr.Port
}

// FreeAddr returns an address of 127.0.0.1 (host:port) that nothing
// listened on a moment ago, for a process the test starts.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

package ha_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testdb"
)

// Patroni's timing (bootstrap.dcs, stored in etcd). Patroni requires
// loop_wait + 2*retry_timeout <= ttl. A leader that cannot update its key
// for retry_timeout demotes itself; the others may take over once the key
// expired, ttl after its last update.
const (
	patroniTTL          = 10
	patroniLoopWait     = 1
	patroniRetryTimeout = 4
	// maximumLagOnFailover is Patroni's default: a replica further behind
	// the leader's last known WAL position is never promoted.
	maximumLagOnFailover = 1 << 20
)

// HAProxy's health check of each member (Patroni's GET /primary): every
// checkInterval, down after checkFall failures, up after checkRise
// successes, and every session to a member marked down is shut down.
const (
	checkInterval = "500ms"
	checkFall     = 2
	checkRise     = 1
)

// cluster is etcd (one member), three Patroni members each managing a
// PostgreSQL 15, and HAProxy in front, all on loopback ports of their own.
type cluster struct {
	t    *testing.T
	sync bool
	root string
	as   runAs

	etcd        *proc
	etcdAddr    string
	members     []*member
	haproxy     *proc
	haproxyAddr string
	ctlConfig   string // patronictl's configuration (etcd directly)
	broken      string // the fault that did not finish, leaving the cluster as it was
}

// member is one Patroni member and the PostgreSQL it manages.
type member struct {
	c       *cluster
	name    string
	dir     string
	dataDir string
	config  string
	pgPort  int
	apiPort int
	etcd    *partitionProxy // the member reaches etcd only through it
	patroni *proc
}

// postgresBin is where Debian's PostgreSQL 15 server binaries are.
const postgresBin = "/usr/lib/postgresql/15/bin"

// requireTools skips the test (fails it in CI) unless Patroni, etcd,
// HAProxy and PostgreSQL 15's server binaries are installed.
func requireTools(t *testing.T) {
	t.Helper()
	var missing []string
	for _, bin := range []string{"patroni", "patronictl", "etcd", "haproxy"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if _, err := os.Stat(filepath.Join(postgresBin, "postgres")); err != nil {
		missing = append(missing, postgresBin+"/postgres")
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("the Patroni cluster needs %s (apt-get install patroni python3-etcd etcd-server haproxy postgresql-15)",
		strings.Join(missing, ", "))
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// startCluster starts etcd, bootstraps the three members through Patroni,
// starts HAProxy, creates the database "idem", and waits until the cluster
// is healthy. Everything is stopped and removed when t ends.
func startCluster(t *testing.T, sync bool) *cluster {
	t.Helper()
	root, err := os.MkdirTemp("", "idem-ha-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, sync: sync, root: root, as: clusterUser(t)}
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs()
		}
		c.stop()
		if os.Getenv("IDEM_TEST_HA_KEEP") != "" {
			t.Logf("IDEM_TEST_HA_KEEP: the cluster's files (logs, data) are kept in %s", root)
			return
		}
		_ = os.RemoveAll(root)
	})

	c.startEtcd()
	scope := fmt.Sprintf("idem-%d", time.Now().UnixNano())
	for i := range 3 {
		m := &member{c: c, name: fmt.Sprintf("m%d", i), pgPort: testdb.FreePort(t), apiPort: testdb.FreePort(t)}
		m.dir = filepath.Join(root, m.name)
		m.dataDir = filepath.Join(m.dir, "data")
		m.config = filepath.Join(m.dir, "patroni.yml")
		c.as.mkdir(t, m.dir)
		m.etcd = startPartitionProxy(t, c.etcdAddr)
		c.as.writeFile(t, m.config, m.patroniConfig(scope))
		c.members = append(c.members, m)
	}
	c.ctlConfig = filepath.Join(root, "patronictl.yml")
	if err := os.WriteFile(c.ctlConfig, []byte(fmt.Sprintf("scope: %s\netcd3:\n  hosts: %s\n", scope, c.etcdAddr)), 0o644); err != nil {
		t.Fatal(err)
	}
	// One member wins the race to initialise the cluster (initdb); the
	// others clone it with pg_basebackup once it leads.
	for _, m := range c.members {
		m.startPatroni()
	}
	c.startHAProxy()
	c.waitHealthy(2 * time.Minute)
	c.exec(func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CREATE DATABASE idem")
		return err
	}, "postgres")
	// Until every member has replayed it, a multi-host connection that
	// tries a lagging replica first fails: pgx (like libpq) gives up on
	// "database does not exist" rather than trying the next host.
	c.waitFor("every member to have the database", time.Minute, func() bool {
		for _, m := range c.members {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			conn, err := pgx.Connect(ctx, m.directURL("idem"))
			if err == nil {
				_ = conn.Close(ctx)
			}
			cancel()
			if err != nil {
				return false
			}
		}
		return true
	})
	return c
}

func (c *cluster) startEtcd() {
	client, peer := testdb.FreePort(c.t), testdb.FreePort(c.t)
	c.etcdAddr = fmt.Sprintf("127.0.0.1:%d", client)
	dir := filepath.Join(c.root, "etcd")
	c.etcd = start(c.t, "etcd", filepath.Join(c.root, "etcd.log"), nil, "etcd",
		"--name", "e0", "--data-dir", dir,
		"--listen-client-urls", "http://"+c.etcdAddr, "--advertise-client-urls", "http://"+c.etcdAddr,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer),
		"--initial-cluster", fmt.Sprintf("e0=http://127.0.0.1:%d", peer),
		"--log-level", "warn")
	c.waitFor("etcd to answer", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + c.etcdAddr + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// patroniConfig is the member's patroni.yml. Authentication is trust on
// loopback: the test is about failover, not passwords.
func (m *member) patroniConfig(scope string) string {
	return fmt.Sprintf(`scope: %[1]s
name: %[2]s
log:
  level: INFO
restapi:
  listen: 127.0.0.1:%[3]d
  connect_address: 127.0.0.1:%[3]d
etcd3:
  hosts: %[4]s
  # Keep talking to the address above (the member's partition proxy), not
  # to the advertised client URLs etcd reports.
  use_proxies: true
bootstrap:
  dcs:
    ttl: %[5]d
    loop_wait: %[6]d
    retry_timeout: %[7]d
    maximum_lag_on_failover: %[8]d
    synchronous_mode: %[9]t
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: 100
        # SIGKILL of a process does not lose the page cache; only a
        # machine crash would need fsync, and none is simulated.
        fsync: "off"
  initdb:
  - encoding: UTF8
  pg_hba:
  - local all all trust
  - local replication all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:%[10]d
  connect_address: 127.0.0.1:%[10]d
  data_dir: %[11]s
  bin_dir: %[12]s
  pgpass: %[13]s
  authentication:
    superuser: {username: postgres, password: postgres}
    replication: {username: replicator, password: replicator}
    rewind: {username: rewinder, password: rewinder}
  parameters:
    unix_socket_directories: %[14]s
`, scope, m.name, m.apiPort, m.etcd.addr(), patroniTTL, patroniLoopWait, patroniRetryTimeout,
		maximumLagOnFailover, m.c.sync, m.pgPort, m.dataDir, postgresBin, filepath.Join(m.dir, "pgpass"), m.dir)
}

func (m *member) startPatroni() {
	m.c.t.Helper()
	m.patroni = start(m.c.t, "patroni "+m.name, filepath.Join(m.dir, "patroni.log"), &m.c.as, "patroni", m.config)
}

func (c *cluster) startHAProxy() {
	c.haproxyAddr = fmt.Sprintf("127.0.0.1:%d", testdb.FreePort(c.t))
	var servers strings.Builder
	for _, m := range c.members {
		fmt.Fprintf(&servers, "    server %s 127.0.0.1:%d check port %d\n", m.name, m.pgPort, m.apiPort)
	}
	cfg := fmt.Sprintf(`defaults
    mode tcp
    retries 2
    timeout client 30m
    timeout server 30m
    timeout connect 2s
    timeout check 2s

listen primary
    bind %s
    option httpchk GET /primary
    http-check expect status 200
    default-server inter %s fall %d rise %d on-marked-down shutdown-sessions
%s`, c.haproxyAddr, checkInterval, checkFall, checkRise, servers.String())
	path := filepath.Join(c.root, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.haproxy = start(c.t, "haproxy", filepath.Join(c.root, "haproxy.log"), nil, "haproxy", "-db", "-f", path)
}

// haproxyURL reaches the primary through HAProxy.
func (c *cluster) haproxyURL(app string) string {
	return fmt.Sprintf("postgres://postgres@%s/idem?sslmode=disable&application_name=%s", c.haproxyAddr, app)
}

// multiHostURL names every member; libpq's rules (which pgx follows) take
// the first that accepts a read-write session.
func (c *cluster) multiHostURL(app string) string {
	var hosts []string
	for _, m := range c.members {
		hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", m.pgPort))
	}
	return fmt.Sprintf("postgres://postgres@%s/idem?sslmode=disable&target_session_attrs=read-write&connect_timeout=2&application_name=%s",
		strings.Join(hosts, ","), app)
}

// directURL reaches one member's PostgreSQL.
func (m *member) directURL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", m.pgPort, db)
}

// clusterMember is a member as Patroni's GET /cluster reports it.
type clusterMember struct {
	Name     string `json:"name"`
	Role     string `json:"role"`  // leader, sync_standby, replica
	State    string `json:"state"` // running, streaming, starting, stopped, ...
	Timeline int    `json:"timeline"`
	Lag      any    `json:"lag"` // bytes, or "unknown"
}

var apiClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// view returns the cluster as the first member whose REST API answers
// reports it (nil if none does).
func (c *cluster) view() []clusterMember {
	for _, m := range c.members {
		if ms, err := m.view(); err == nil {
			return ms
		}
	}
	return nil
}

func (m *member) view() ([]clusterMember, error) {
	resp, err := apiClient.Get(fmt.Sprintf("http://127.0.0.1:%d/cluster", m.apiPort))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v struct {
		Members []clusterMember `json:"members"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, err
	}
	return v.Members, nil
}

// leader returns the name of the member that holds the leader key, as the
// members' REST APIs report it ("" when none does).
func (c *cluster) leader() string {
	for _, m := range c.view() {
		if m.Role == "leader" && m.State == "running" {
			return m.Name
		}
	}
	return ""
}

func (c *cluster) member(name string) *member {
	for _, m := range c.members {
		if m.name == name {
			return m
		}
	}
	c.t.Fatalf("no member %q", name)
	return nil
}

// healthy reports whether every member runs, one leads, the others
// replicate it on its timeline with no lag, a synchronous standby is named
// in synchronous mode, and HAProxy routes to the leader.
func (c *cluster) healthy() bool {
	ms := c.view()
	if len(ms) != len(c.members) {
		return false
	}
	var leader *clusterMember
	syncStandby := false
	for i := range ms {
		switch {
		case ms[i].State != "running" && ms[i].State != "streaming":
			return false
		case ms[i].Role == "leader":
			leader = &ms[i]
		case ms[i].Role == "sync_standby":
			syncStandby = true
		}
	}
	if leader == nil || (c.sync && !syncStandby) {
		return false
	}
	for _, m := range ms {
		if m.Role == "leader" {
			continue
		}
		if lag, ok := m.Lag.(float64); !ok || lag != 0 || m.Timeline != leader.Timeline {
			return false
		}
	}
	return c.routesTo() == leader.Name
}

// routesTo returns the member HAProxy's connections reach ("" if none).
func (c *cluster) routesTo() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", c.haproxyAddr))
	if err != nil {
		return ""
	}
	defer conn.Close(ctx)
	var port int
	if err := conn.QueryRow(ctx, "SELECT current_setting('port')::int").Scan(&port); err != nil {
		return ""
	}
	for _, m := range c.members {
		if m.pgPort == port {
			return m.name
		}
	}
	return ""
}

// waitHealthy waits until the cluster is healthy, failing t after d.
func (c *cluster) waitHealthy(d time.Duration) {
	c.t.Helper()
	c.waitFor("a healthy cluster", d, c.healthy)
}

func (c *cluster) waitFor(what string, d time.Duration, cond func() bool) {
	c.t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			c.t.Fatalf("timed out after %v waiting for %s; cluster: %+v", d, what, c.view())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exec runs f on a connection to the leader's database db.
func (c *cluster) exec(f func(context.Context, *pgx.Conn) error, db string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.member(c.leader()).directURL(db))
	if err == nil {
		err = f(ctx, conn)
		_ = conn.Close(ctx)
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// switchover asks Patroni for a planned switchover to candidate.
func (c *cluster) switchover(leader, candidate string) {
	c.t.Helper()
	out, err := exec.Command("patronictl", "-c", c.ctlConfig, "switchover",
		"--leader", leader, "--candidate", candidate, "--force").CombinedOutput()
	if err != nil {
		c.t.Fatalf("patronictl switchover: %v\n%s", err, out)
	}
}

// postmasterPID returns the pid of the member's postmaster, 0 if none runs.
func (m *member) postmasterPID() int {
	b, err := os.ReadFile(filepath.Join(m.dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if pid <= 0 || !pidAlive(pid) {
		return 0
	}
	return pid
}

// killPostgres sends SIGKILL to the member's postmaster; its backends exit
// on their own when they notice it gone, as after an OOM kill.
func (m *member) killPostgres() {
	m.c.t.Helper()
	pid := m.postmasterPID()
	if pid == 0 {
		m.c.t.Fatalf("%s: no postmaster to kill", m.name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		m.c.t.Fatalf("%s: kill postmaster %d: %v", m.name, pid, err)
	}
	if !waitGone(pid, 10*time.Second) {
		m.c.t.Fatalf("%s: postmaster %d survived SIGKILL", m.name, pid)
	}
}

// killPatroni sends SIGKILL to the member's Patroni; the PostgreSQL it
// started runs on (Patroni starts it detached, as it must to survive a
// Patroni restart).
func (m *member) killPatroni() {
	m.c.t.Helper()
	m.patroni.kill(m.c.t)
}

// killNode is the loss of the member's machine: SIGKILL of Patroni, of the
// postmaster and of every PostgreSQL process, at once.
func (m *member) killNode() {
	m.c.t.Helper()
	pid := m.postmasterPID()
	m.patroni.kill(m.c.t)
	if pid == 0 {
		return
	}
	children := childrenOf(pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for _, p := range children {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	for _, p := range append(children, pid) {
		if !waitGone(p, 10*time.Second) {
			m.c.t.Fatalf("%s: PostgreSQL process %d survived SIGKILL", m.name, p)
		}
	}
}

// patroniLog is the member's Patroni log so far.
func (m *member) patroniLog() string {
	b, _ := os.ReadFile(filepath.Join(m.dir, "patroni.log"))
	return string(b)
}

func (c *cluster) dumpLogs() {
	for _, m := range c.members {
		c.t.Logf("--- %s patroni.log (tail) ---\n%s", m.name, tailFile(filepath.Join(m.dir, "patroni.log"), 60))
	}
	if c.etcd != nil {
		c.t.Logf("--- etcd.log (tail) ---\n%s", c.etcd.tail(20))
	}
	if c.haproxy != nil {
		c.t.Logf("--- haproxy.log (tail) ---\n%s", c.haproxy.tail(20))
	}
}

// stop ends everything at once (the test is over; nothing needs a clean
// shutdown): HAProxy, every Patroni, every PostgreSQL (immediate shutdown),
// etcd.
func (c *cluster) stop() {
	if c.haproxy != nil {
		c.haproxy.stop(5 * time.Second)
	}
	for _, m := range c.members {
		if m.patroni != nil {
			m.patroni.kill(c.t)
		}
	}
	children := map[int][]int{}
	for _, m := range c.members {
		if pid := m.postmasterPID(); pid != 0 {
			children[pid] = childrenOf(pid)
			// SIGQUIT is PostgreSQL's immediate shutdown: the
			// postmaster ends every backend, then itself.
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
	}
	for pid, kids := range children {
		if !waitGone(pid, 10*time.Second) {
			// A backend that cannot take the signal (a WAL sender a
			// failed test left stopped) holds the postmaster up.
			for _, p := range append(kids, pid) {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
	}
	if c.etcd != nil {
		c.etcd.stop(5 * time.Second)
	}
}

// query runs a one-row query on the member's PostgreSQL.
func (m *member) query(sql string, dest ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, m.directURL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql).Scan(dest...)
}

// writable reports whether the member's PostgreSQL accepts writes.
func (m *member) writable() bool {
	var recovery bool
	return m.query("SELECT pg_is_in_recovery()", &recovery) == nil && !recovery
}

// currentLSN is the member's current WAL write position, as a byte offset.
func (m *member) currentLSN() int64 {
	m.c.t.Helper()
	var lsn string
	if err := m.query("SELECT pg_current_wal_lsn()::text", &lsn); err != nil {
		m.c.t.Fatalf("%s: %v", m.name, err)
	}
	n, err := parseLSN(lsn)
	if err != nil {
		m.c.t.Fatal(err)
	}
	return n
}

// walSince is how many bytes of WAL the member wrote since lsn.
func (m *member) walSince(lsn int64) int64 { return m.currentLSN() - lsn }

// walSenders returns the pids of the member's WAL sender processes.
func (m *member) walSenders() []int {
	m.c.t.Helper()
	var pids []int32
	if err := m.query("SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_replication", &pids); err != nil {
		m.c.t.Fatalf("%s: %v", m.name, err)
	}
	if len(pids) == 0 {
		m.c.t.Fatalf("%s has no WAL senders", m.name)
	}
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out
}

// fork returns where the leader's timeline forked from its parent: the
// parent timeline and the WAL position, from the newest timeline history
// file in its pg_wal.
func (m *member) fork() (parent int, at int64, err error) {
	files, _ := filepath.Glob(filepath.Join(m.dataDir, "pg_wal", "*.history"))
	if len(files) == 0 {
		return 0, 0, fmt.Errorf("%s has no timeline history", m.name)
	}
	sort.Strings(files) // the names are the timeline in hex, zero-padded
	b, err := os.ReadFile(files[len(files)-1])
	if err != nil {
		return 0, 0, err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("%s: unexpected history line %q", files[len(files)-1], lines[len(lines)-1])
	}
	parent, err = strconv.Atoi(f[0])
	if err != nil {
		return 0, 0, err
	}
	at, err = parseLSN(f[1])
	return parent, at, err
}

// discarded reads the member's WAL of timeline tl from the position from on
// (pg_waldump): what it holds that a timeline forked at from does not, and
// pg_rewind will discard. It returns the commit records and the bytes from
// from to the end of the last record.
func (m *member) discarded(tl int, from int64) (commits int, bytes int64, err error) {
	cmd := exec.Command(filepath.Join(postgresBin, "pg_waldump"), "--path", filepath.Join(m.dataDir, "pg_wal"),
		"--timeline", strconv.Itoa(tl), "--start", formatLSN(from))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	// It exits 1 at the end of the WAL, where it finds no next record
	// (none at all: "could not find a valid record after"); only a file
	// it cannot open is a failure.
	out, _ := cmd.Output()
	if e := stderr.String(); strings.Contains(e, "could not open") || strings.Contains(e, "could not locate") {
		return 0, 0, fmt.Errorf("pg_waldump on %s: %s", m.name, stderr.String())
	}
	end := from
	for _, line := range strings.Split(string(out), "\n") {
		rec := walRecord.FindStringSubmatch(line)
		if rec == nil {
			continue
		}
		lsn, err := parseLSN(rec[2])
		if err != nil {
			return 0, 0, err
		}
		n, _ := strconv.ParseInt(rec[1], 10, 64)
		end = max(end, lsn+n)
		if strings.Contains(line, "desc: COMMIT") {
			commits++
		}
	}
	return commits, end - from, nil
}

// walRecord matches a pg_waldump line: the record's total length and LSN.
var walRecord = regexp.MustCompile(`len \(rec/tot\):\s*\d+/\s*(\d+), tx:\s*\d+, lsn: ([0-9A-F]+/[0-9A-F]+)`)

func formatLSN(n int64) string { return fmt.Sprintf("%X/%X", uint64(n)>>32, uint32(n)) }

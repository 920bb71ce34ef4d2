package ha_test

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// phase is a moment of a fault run: the fault itself, or a recovery step
// (a former leader started again), from which writes are timed.
type phase struct {
	name string
	at   time.Time
}

// faultRun is one fault injected under load.
type faultRun struct {
	t      *testing.T
	c      *cluster
	l      *load
	leader *member // the leader when the fault began
	phases []phase
	notes  []string

	logFrom map[string]int // each member's Patroni log before the fault
	// The former leader's WAL past the new leader's fork: the commit
	// records and bytes pg_rewind discards (measureDiscarded).
	measured         bool
	discardedCommits int
	discardedBytes   int64
	// While the old primary ran unfenced (its Patroni dead), reachable
	// by the multi-host URL.
	unfencedFrom, unfencedTo time.Time
	// lagging-standbys: when and where the standbys stopped receiving.
	frozenAt  time.Time
	frozenLSN int64
}

func (r *faultRun) mark(name string) { r.phases = append(r.phases, phase{name, time.Now()}) }

func (r *faultRun) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// waitNewLeader waits until a member other than the old leader leads, and
// returns it.
func (r *faultRun) waitNewLeader() *member {
	r.t.Helper()
	var name string
	r.c.waitFor("a new leader, promoted", 2*time.Minute, func() bool {
		name = r.c.leader()
		return name != "" && name != r.leader.name && r.c.member(name).writable()
	})
	return r.c.member(name)
}

// waitWrites waits until every instance wrote five probes in a row sent
// after the last phase began.
func (r *faultRun) waitWrites() {
	r.t.Helper()
	since := r.phases[len(r.phases)-1].at
	r.c.waitFor("every instance to write again", 2*time.Minute, func() bool { return r.l.writesSince(since, 5) })
}

// fault is one failure Patroni must handle, injected on the leader.
type fault struct {
	name string
	// asyncOnly: a fault that needs replicas allowed to lag.
	asyncOnly bool
	inject    func(r *faultRun)
}

var faults = []fault{
	{name: "switchover", inject: func(r *faultRun) {
		candidate := ""
		for _, m := range r.c.view() {
			if m.Role == "sync_standby" || (candidate == "" && m.Role == "replica") {
				candidate = m.Name
			}
		}
		r.mark("patronictl switchover")
		r.c.switchover(r.leader.name, candidate)
		r.waitNewLeader()
		r.waitWrites()
		r.c.waitHealthy(2 * time.Minute)
	}},
	{name: "leader-kill", inject: func(r *faultRun) {
		r.mark("leader killed (Patroni and PostgreSQL, SIGKILL)")
		r.leader.killNode()
		r.measureDiscarded(r.waitNewLeader())
		r.waitWrites()
		r.mark("former leader rejoins")
		r.leader.startPatroni()
		r.c.waitHealthy(2 * time.Minute)
		r.waitWrites()
	}},
	{name: "postgres-kill", inject: func(r *faultRun) {
		r.mark("leader's PostgreSQL killed (SIGKILL)")
		r.leader.killPostgres()
		r.waitWrites()
		r.c.waitHealthy(2 * time.Minute)
		r.note("leader afterwards: %s (Patroni restarts a crashed primary in place, primary_start_timeout)", r.c.leader())
	}},
	{name: "patroni-kill", inject: func(r *faultRun) {
		r.mark("leader's Patroni killed (SIGKILL)")
		r.unfencedFrom = time.Now()
		r.leader.killPatroni()
		next := r.waitNewLeader()
		// As an operator would, some time after the failover (Debian's
		// patroni@.service has Restart=no): meanwhile the old primary
		// runs on, unfenced.
		time.Sleep(10 * time.Second)
		r.measureDiscarded(next) // at least: it writes on until demoted
		r.mark("Patroni restarted on the former leader")
		r.leader.startPatroni()
		r.c.waitFor("the former leader to stop accepting writes", time.Minute, func() bool { return !r.leader.writable() })
		r.unfencedTo = time.Now()
		r.c.waitHealthy(2 * time.Minute)
		r.waitWrites()
	}},
	{name: "etcd-isolation", inject: func(r *faultRun) {
		r.mark("leader cut off from etcd")
		r.leader.etcd.partition()
		next := r.waitNewLeader()
		r.waitWrites()
		r.measureDiscarded(next)
		r.mark("partition healed")
		r.leader.etcd.heal()
		r.c.waitHealthy(2 * time.Minute)
		r.waitWrites()
	}},
	{name: "lagging-standbys", asyncOnly: true, inject: func(r *faultRun) {
		// The leader's WAL senders are stopped (SIGSTOP): the standbys
		// receive nothing while the leader goes on acknowledging
		// commits. Then the leader is lost.
		senders := r.leader.walSenders()
		r.frozenAt, r.frozenLSN = time.Now(), r.leader.currentLSN()
		for _, pid := range senders {
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				r.t.Fatalf("SIGSTOP WAL sender %d: %v", pid, err)
			}
		}
		r.l.waitAnswered(r.t, r.l.answered()+60, time.Minute)
		r.mark("leader killed with its standbys lagging")
		r.note("WAL the standbys lacked when the leader was killed: %d bytes", r.leader.walSince(r.frozenLSN))
		r.leader.killNode()
		r.measureDiscarded(r.waitNewLeader())
		r.waitWrites()
		r.mark("former leader rejoins")
		r.leader.startPatroni()
		r.c.waitHealthy(2 * time.Minute)
		r.waitWrites()
	}},
}

func TestPatroni(t *testing.T) {
	requireHA(t)
	var rows []string
	for _, mode := range []struct {
		name string
		sync bool
	}{
		{"synchronous", true},
		{"asynchronous", false},
	} {
		t.Run(mode.name, func(t *testing.T) {
			began := time.Now()
			c := startCluster(t, mode.sync)
			t.Logf("cluster healthy after %v", time.Since(began).Round(time.Second))
			fx := newEffects()
			instances := startInstances(t, c, fx)
			for _, f := range faults {
				if f.asyncOnly && mode.sync {
					continue
				}
				t.Run(f.name, func(t *testing.T) {
					rows = append(rows, runFault(t, c, instances, fx, f, mode.name)...)
				})
			}
			for _, in := range instances {
				t.Logf("%s logged (count, message):\n%s", in.name, summarizeLogs(in.logs.String()))
			}
		})
	}
	t.Logf("summary (mode | fault | phase | HAProxy writes again after | multi-host writes again after | answers | lost | effects doubled | WAL discarded by pg_rewind):\n%s",
		strings.Join(rows, "\n"))
}

// runFault injects f under load and checks what the clients were answered,
// returning the summary's rows.
func runFault(t *testing.T, c *cluster, instances []*instance, fx *effects, f fault, mode string) []string {
	began := time.Now()
	// The cluster's helpers fail the test running them.
	parent := c.t
	c.t = t
	defer func() { c.t = parent }()
	if c.broken != "" {
		t.Fatalf("skipped: %s left the cluster broken", c.broken)
	}
	injected := false
	defer func() {
		if !injected {
			c.broken = f.name
		}
	}()
	c.waitHealthy(2 * time.Minute)
	r := &faultRun{t: t, c: c, leader: c.member(c.leader()), logFrom: map[string]int{}}
	for _, m := range c.members {
		r.logFrom[m.name] = len(m.patroniLog())
	}
	r.l = startLoad(t, instances, fmt.Sprintf("%s-%s-%d", mode[:4], f.name, time.Now().UnixNano()), 4)
	r.l.waitAnswered(t, 40, time.Minute)
	f.inject(r)
	injected = true
	// Every request in flight at the fault is retried to its answer (a
	// claim whose release failed on the old primary waits out its lease).
	settle := time.Now()
	c.waitFor("the keys in flight at the fault to be answered", instanceLease+time.Minute, func() bool { return r.l.settled(settle) })
	r.l.waitAnswered(t, r.l.answered()+40, time.Minute)
	answers := r.l.stop(t)
	end := time.Now()
	res := check(t, c, r.l, answers, fx)
	rewind := r.rewind()

	t.Logf("%s: %d answers (%d took more than one attempt), %d lost, %d effects doubled; %s; %v in all",
		f.name, res.answers, res.inFlight, len(res.lost), len(res.doubled), rewind, time.Since(began).Round(time.Second))
	var rows []string
	for i, p := range r.phases {
		to := end
		if i+1 < len(r.phases) {
			to = r.phases[i+1].at
		}
		again := map[string]time.Duration{}
		for _, in := range instances {
			o := r.l.outage(in.name, p.at, to)
			if o.failed == 0 {
				t.Logf("  %s (%s): %s: no write failed", p.name, p.at.Format("15:04:05.000"), in.name)
				continue
			}
			d := o.recovered.Sub(p.at)
			again[in.path] = max(again[in.path], d)
			t.Logf("  %s (%s): %s: writes failed from +%v, first write again at +%v (%d probes failed)",
				p.name, p.at.Format("15:04:05.000"), in.name, o.firstFail.Sub(p.at).Round(10*time.Millisecond), d.Round(10*time.Millisecond), o.failed)
		}
		row := fmt.Sprintf("%s | %s | %s | %s | %s", mode, f.name, p.name, seconds(again["haproxy"]), seconds(again["multi-host"]))
		if i == 0 {
			row += fmt.Sprintf(" | %d | %d | %d | %s", res.answers, len(res.lost), len(res.doubled), rewind)
		}
		rows = append(rows, row)
	}
	for _, n := range r.notes {
		t.Logf("  %s", n)
	}
	for _, s := range r.l.changed {
		t.Logf("  changed during the load: %s", s)
	}
	for _, s := range sortedValues(res.lost) {
		t.Logf("  lost: %s", s)
	}
	for _, s := range sortedValues(res.doubled) {
		t.Logf("  doubled: %s", s)
	}
	r.assert(res, answers, mode == "synchronous", f)
	return rows
}

// assert checks what the mode promises for the fault.
func (r *faultRun) assert(res checked, answers []answer, sync bool, f fault) {
	t := r.t
	if res.inFlight == 0 {
		t.Errorf("no request needed a second attempt: the fault interrupted nothing, the test did not exercise requests in flight")
	}
	byKey := map[string]answer{}
	for _, a := range answers {
		byKey[a.key] = a
	}
	for _, what := range sortedValues(res.doubled) {
		if strings.HasPrefix(what, "invoice") {
			t.Errorf("two invoices for one key (the database lost its consistency): %s", what)
		}
	}
	// A loss the fault explains: an answer given by a path that could
	// still reach the old primary while nothing fenced it.
	unfenced := func(a answer) bool {
		return !r.unfencedFrom.IsZero() && a.via != "" && strings.HasSuffix(a.via, "/multi-host") &&
			!a.at.Before(r.unfencedFrom) && !a.at.After(r.unfencedTo)
	}
	if sync {
		for key, what := range res.lost {
			if !unfenced(byKey[key]) {
				t.Errorf("synchronous mode: an answer a client received was lost: %s", what)
			}
		}
		for key, what := range res.doubled {
			if _, lost := res.lost[key]; !strings.HasPrefix(what, "invoice") && (!lost || !unfenced(byKey[key])) {
				t.Errorf("synchronous mode: an effect ran twice: %s", what)
			}
		}
		for _, s := range r.l.changed {
			t.Errorf("synchronous mode: an answer changed during the load: %s", s)
		}
		return
	}
	switch f.name {
	case "switchover", "postgres-kill":
		// A switchover waits for the candidate to receive the old
		// primary's shutdown checkpoint; a crashed primary restarted in
		// place recovers its own WAL.
		for _, what := range sortedValues(res.lost) {
			t.Errorf("asynchronous mode, %s: an answer was lost: %s", f.name, what)
		}
	case "leader-kill", "etcd-isolation", "lagging-standbys":
		if r.discardedBytes > maximumLagOnFailover {
			t.Errorf("the former leader's WAL held %d bytes past the fork (%d commits), more than maximum_lag_on_failover (%d)",
				r.discardedBytes, r.discardedCommits, maximumLagOnFailover)
		}
	}
	if f.name == "lagging-standbys" {
		if len(res.lost) == 0 {
			t.Errorf("no answer lost although the standbys lagged: the test did not make them lag")
		}
		for key, what := range res.lost {
			// Streaming takes well under a second: what was answered
			// a second before the standbys stopped had reached them.
			if byKey[key].at.Before(r.frozenAt.Add(-time.Second)) {
				t.Errorf("an answer given before the standbys lagged was lost: %s", what)
			}
		}
	}
}

func seconds(d time.Duration) string {
	if d == 0 {
		return "no write failed"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// measureDiscarded reads, once next leads, what the former leader's WAL
// holds past the point where next's timeline forked from it: what pg_rewind
// will discard when it rejoins.
func (r *faultRun) measureDiscarded(next *member) {
	r.t.Helper()
	parent, at, err := next.fork()
	if err != nil {
		r.t.Fatal(err)
	}
	commits, bytes, err := r.leader.discarded(parent, at)
	if err != nil {
		r.t.Fatal(err)
	}
	r.discardedCommits, r.discardedBytes, r.measured = commits, bytes, true
}

// rewind says whether a member's Patroni ran pg_rewind during the fault,
// and what the former leader's WAL held past the fork.
func (r *faultRun) rewind() string {
	var ran []string
	for _, m := range r.c.members {
		if strings.Contains(m.patroniLog()[r.logFrom[m.name]:], "running pg_rewind") {
			ran = append(ran, m.name)
		}
	}
	s := "no pg_rewind"
	if len(ran) > 0 {
		s = "pg_rewind on " + strings.Join(ran, ", ")
	}
	if r.measured {
		s += fmt.Sprintf(" (%d commits, %d bytes of WAL past the fork)", r.discardedCommits, r.discardedBytes)
	}
	return s
}

// parseLSN reads a WAL position (hi/lo in hex) as a byte offset.
func parseLSN(s string) (int64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("not an LSN: %q", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, err
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, err
	}
	return int64(h<<32 | l), nil
}

// summarizeLogs counts each distinct message (msg=...) of a log.
func summarizeLogs(logs string) string {
	counts := map[string]int{}
	var order []string
	for _, line := range strings.Split(logs, "\n") {
		i := strings.Index(line, "msg=")
		if i < 0 {
			continue
		}
		msg := line[i+4:]
		if strings.HasPrefix(msg, `"`) {
			if j := strings.Index(msg[1:], `"`); j >= 0 {
				msg = msg[:j+2]
			}
		} else if j := strings.IndexByte(msg, ' '); j >= 0 {
			msg = msg[:j]
		}
		if counts[msg] == 0 {
			order = append(order, msg)
		}
		counts[msg]++
	}
	var b strings.Builder
	for _, m := range order {
		fmt.Fprintf(&b, "  %5d %s\n", counts[m], m)
	}
	return b.String()
}

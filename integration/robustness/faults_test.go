package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"
)

// Fault kinds injected by the schedule. The clients' own faults (hang-ups,
// bodies cut short, retries to another instance, the same key with another
// body) are part of every run.
//
// The schedule is drawn from the seed (FAULTS=all, a list, or rotate: four
// kinds, at least one network and one process fault), one fault at a time
// per target, every 1–3 s:
//
//	latency   toxiproxy latency, both directions, 100–1000 ms        1–4 s
//	          (jitter a quarter)
//	timeout   toxiproxy timeout 0: a black hole, connections held    1.5–4 leases
//	reset     toxiproxy reset_peer on data                           0.5–2 s
//	limit     toxiproxy limit_data 200–5000 bytes per connection     1–3 s
//	kill      SIGKILL, restart on the same address                   down 0.2–2 s
//	pause     SIGSTOP, then SIGCONT (twice as likely as the others)  1.5–3 leases
//	term      SIGTERM: the 300 ms shutdown bound cuts the work off   down 0.2–1 s
//	          (engine.ErrShutdown), restart
//	pg-crash  pg_ctl stop -m immediate, then start                   down 0.5–3 s
//	stall     not injected: the machine stopped (a VM snapshot,      the gap
//	          memory reclaim), seen as a gap of 500 ms or more in a
//	          10 ms ticker; explains what a pause of every instance
//	          and PostgreSQL at once explains (faultStall)
const (
	faultLatency = "latency"  // toxiproxy latency, both directions
	faultTimeout = "timeout"  // toxiproxy timeout 0: a black hole, connections held open
	faultReset   = "reset"    // toxiproxy reset_peer: connections reset on data
	faultLimit   = "limit"    // toxiproxy limit_data: connections closed after a few bytes
	faultKill    = "kill"     // SIGKILL, restart after a pause
	faultPause   = "pause"    // SIGSTOP longer than the lease, then SIGCONT
	faultTerm    = "term"     // SIGTERM with a shutdown bound shorter than the work, restart
	faultPGCrash = "pg-crash" // pg_ctl stop -m immediate, start after a pause
)

var allFaults = []string{faultLatency, faultTimeout, faultReset, faultLimit, faultKill, faultPause, faultTerm, faultPGCrash}

// fault is one scheduled fault: its kind, its target (an instance, or
// PostgreSQL), when it starts (from the start of the load) and how long it
// lasts; Param is the kind's parameter (latency in ms, bytes for limit).
type fault struct {
	Kind     string
	Target   int // instance index; -1 for PostgreSQL
	At       time.Duration
	For      time.Duration
	Param    int
	targetNm string
}

func (f fault) String() string {
	s := fmt.Sprintf("+%6.2fs %-8s %-3s for %.2fs", f.At.Seconds(), f.Kind, f.targetNm, f.For.Seconds())
	switch f.Kind {
	case faultLatency:
		s += fmt.Sprintf(" (%dms)", f.Param)
	case faultLimit:
		s += fmt.Sprintf(" (%d bytes)", f.Param)
	}
	return s
}

// pickFaults returns the fault kinds of a run: spec is "all", a
// comma-separated list, or "rotate" (four kinds chosen by the seed, always
// including one process fault and one network fault, so that a CI run
// covers a different subset each day).
func pickFaults(spec string, seed int64) ([]string, error) {
	switch spec {
	case "", "all":
		return allFaults, nil
	case "none":
		return nil, nil
	case "rotate":
		r := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
		network := []string{faultLatency, faultTimeout, faultReset, faultLimit}
		process := []string{faultKill, faultPause, faultTerm, faultPGCrash}
		picked := []string{network[r.IntN(len(network))], process[r.IntN(len(process))]}
		rest := []string{}
		for _, k := range allFaults {
			if k != picked[0] && k != picked[1] {
				rest = append(rest, k)
			}
		}
		r.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
		picked = append(picked, rest[:2]...)
		sort.Slice(picked, func(i, j int) bool { return indexOf(allFaults, picked[i]) < indexOf(allFaults, picked[j]) })
		return picked, nil
	}
	var out []string
	for k := range strings.SplitSeq(spec, ",") {
		k = strings.TrimSpace(k)
		if indexOf(allFaults, k) < 0 {
			return nil, fmt.Errorf("unknown fault %q (want all, rotate, none or some of %s)", k, strings.Join(allFaults, ","))
		}
		out = append(out, k)
	}
	return out, nil
}

func indexOf(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}

// schedule draws the faults of a run from its seed: a pure function of
// (seed, load duration, kinds, instances, lease), so that the same
// arguments give the same schedule. Faults on one target never overlap;
// faults on different targets may. None starts in the first two seconds or
// ends in the last three, so that the run starts and ends healthy.
func schedule(seed int64, load time.Duration, kinds []string, instances int, lease time.Duration) []fault {
	if len(kinds) == 0 {
		return nil
	}
	r := rand.New(rand.NewPCG(uint64(seed), 0xfa17))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }
	free := make([]time.Duration, instances+1) // per target, when it is free again; the last is PostgreSQL
	var out []fault
	for t := 2 * time.Second; ; {
		t += between(time.Second, 3*time.Second)
		kind := weighted(r, kinds)
		f := fault{Kind: kind, At: t, Target: r.IntN(instances)}
		switch kind {
		case faultLatency:
			f.For, f.Param = between(time.Second, 4*time.Second), 100+r.IntN(900)
		case faultTimeout:
			f.For = between(lease+lease/2, 4*lease)
		case faultReset:
			f.For = between(500*time.Millisecond, 2*time.Second)
		case faultLimit:
			f.For, f.Param = between(time.Second, 3*time.Second), 200+r.IntN(4800)
		case faultKill:
			f.For = between(200*time.Millisecond, 2*time.Second)
		case faultPause:
			f.For = between(lease+lease/2, 3*lease)
		case faultTerm:
			f.For = between(200*time.Millisecond, time.Second)
		case faultPGCrash:
			f.Target, f.For = -1, between(500*time.Millisecond, 3*time.Second)
		}
		if f.At+f.For > load-3*time.Second {
			break
		}
		slot := f.Target
		if slot < 0 {
			slot = instances
		}
		if free[slot] > f.At {
			continue
		}
		// Leave the target a healthy second before its next fault.
		free[slot] = f.At + f.For + time.Second
		if f.Target < 0 {
			f.targetNm = "pg"
		} else {
			f.targetNm = fmt.Sprintf("i%d", f.Target+1)
		}
		out = append(out, f)
	}
	return out
}

// weighted picks a kind, a pause twice as often as any other: a pause
// longer than the lease during a handler's work is what leads to a
// takeover and then a stale completion, the path the fence exists for.
func weighted(r *rand.Rand, kinds []string) string {
	var pool []string
	for _, k := range kinds {
		pool = append(pool, k)
		if k == faultPause {
			pool = append(pool, k)
		}
	}
	return pool[r.IntN(len(pool))]
}

// appliedFault is a fault as it happened: when it began and ended, on the
// run's clock, and anything that went wrong injecting it.
type appliedFault struct {
	fault
	Begin, End int64
	Err        string
}

// injector applies a schedule to a cluster.
type injector struct {
	c   *cluster
	mu  sync.Mutex
	log []appliedFault
	wg  sync.WaitGroup
}

// run starts every fault of sched at its time after begin, each on its own
// goroutine; wait waits for all to be over (reverted).
func (in *injector) run(ctx context.Context, begin time.Time, sched []fault) {
	for _, f := range sched {
		in.wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(begin.Add(f.At))):
			}
			in.apply(f)
		})
	}
}

func (in *injector) wait() { in.wg.Wait() }

func (in *injector) record(a appliedFault) {
	in.mu.Lock()
	in.log = append(in.log, a)
	in.mu.Unlock()
}

func (in *injector) applied() []appliedFault {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := append([]appliedFault(nil), in.log...)
	sort.Slice(out, func(i, j int) bool { return out[i].Begin < out[j].Begin })
	return out
}

func (in *injector) apply(f fault) {
	c := in.c
	a := appliedFault{fault: f, Begin: c.clock.now()}
	fail := func(err error) {
		if err != nil && a.Err == "" {
			a.Err = err.Error()
		}
	}
	switch f.Kind {
	case faultLatency, faultTimeout, faultReset, faultLimit:
		n := c.nodes[f.Target]
		names, err := addToxics(n, f)
		fail(err)
		time.Sleep(f.For)
		for _, name := range names {
			fail(n.proxy.Toxics.RemoveToxic(context.Background(), name))
		}
	case faultKill:
		n := c.nodes[f.Target]
		fail(n.kill())
		time.Sleep(f.For)
		fail(n.start())
	case faultPause:
		n := c.nodes[f.Target]
		fail(n.pause())
		time.Sleep(f.For)
		fail(n.resume())
	case faultTerm:
		n := c.nodes[f.Target]
		fail(n.terminate())
		time.Sleep(f.For)
		fail(n.start())
	case faultPGCrash:
		c.pg.Stop("immediate")
		time.Sleep(f.For)
		c.pg.Start()
	}
	a.End = c.clock.now()
	in.record(a)
}

// addToxics adds the toxics of a network fault to the instance's proxy and
// returns their names.
func addToxics(n *instance, f fault) ([]string, error) {
	type toxic struct{ typ, stream, attrs string }
	var ts []toxic
	switch f.Kind {
	case faultLatency:
		attrs := fmt.Sprintf(`{"latency":%d,"jitter":%d}`, f.Param, f.Param/4)
		ts = []toxic{{"latency", "downstream", attrs}, {"latency", "upstream", attrs}}
	case faultTimeout:
		ts = []toxic{{"timeout", "downstream", `{"timeout":0}`}, {"timeout", "upstream", `{"timeout":0}`}}
	case faultReset:
		ts = []toxic{{"reset_peer", "upstream", `{"timeout":0}`}}
	case faultLimit:
		ts = []toxic{{"limit_data", "downstream", fmt.Sprintf(`{"bytes":%d}`, f.Param)}}
	}
	var names []string
	for _, x := range ts {
		name := x.typ + "_" + x.stream
		body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, x.typ, x.stream, x.attrs)
		if _, err := n.proxy.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			return names, fmt.Errorf("adding %s: %w", name, err)
		}
		names = append(names, name)
	}
	return names, nil
}

package robustness

import (
	"context"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/integration/robustness/wire"
	"github.com/idemkit/idem/middleware"
)

// The checker's own tests: histories built by hand, each one the checker
// must pass or must flag. They need no database.

func TestStep(t *testing.T) {
	t.Parallel()
	main, probe := opInput{Attempt: "a"}, opInput{Attempt: "p", Probe: true}
	ran := opInput{Attempt: "a", Exec: "x1", MayRecord: true}
	for _, tc := range []struct {
		name  string
		state string
		in    opInput
		out   opOutput
		want  []string
	}{
		{"a time-out changes nothing", "", main, opOutput{Outcome: outError}, []string{""}},
		{"a time-out that ran may have recorded", "", ran, opOutput{Outcome: outError}, []string{"", "x1"}},
		{"a time-out that ran after a record changes nothing", "x0", ran, opOutput{Outcome: outError}, []string{"x0"}},
		{"409 changes nothing", "x0", main, opOutput{Outcome: outInFlight}, []string{"x0"}},
		{"a fresh answer records", "", ran, opOutput{Outcome: outAnswer, Exec: "x1", Fate: "rec"}, []string{"x1"}},
		{"a second fresh answer is impossible", "x0", ran, opOutput{Outcome: outAnswer, Exec: "x1", Fate: "rec"}, nil},
		{"an answer whose completion failed may not be recorded", "", ran, opOutput{Outcome: outAnswer, Exec: "x1", Fate: "maybe"}, []string{"", "x1"}},
		{"an answer whose completion failed, after another recorded", "x0", ran, opOutput{Outcome: outAnswer, Exec: "x1", Fate: "maybe"}, []string{"x0"}},
		{"a fenced owner's answer changes nothing", "x0", ran, opOutput{Outcome: outAnswer, Exec: "x1", Fate: "superseded"}, []string{"x0"}},
		{"an answer from another execution than the attempt's", "", ran, opOutput{Outcome: outAnswer, Exec: "x2", Fate: "rec"}, nil},
		{"a replay of the record", "x0", main, opOutput{Outcome: outReplay, Exec: "x0"}, []string{"x0"}},
		{"a replay of something else", "x0", main, opOutput{Outcome: outReplay, Exec: "x1"}, nil},
		{"a replay before any record", "", main, opOutput{Outcome: outReplay, Exec: "x1"}, nil},
		{"422 for the other body", "x0", probe, opOutput{Outcome: outMismatch}, []string{"x0"}},
		{"422 for the same body", "x0", main, opOutput{Outcome: outMismatch}, nil},
		{"the other body ran", "x0", opInput{Attempt: "p", Probe: true, Exec: "x9"}, opOutput{Outcome: outAnswer, Exec: "x9", Fate: "rec"}, nil},
	} {
		if got := step(tc.state, tc.in, tc.out); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: step(%q) = %q, want %q", tc.name, tc.state, got, tc.want)
		}
	}
}

func TestFateOf(t *testing.T) {
	t.Parallel()
	ev := func(what, op, err string) wire.Record { return wire.Record{What: what, Op: op, Err: err} }
	for _, tc := range []struct {
		name    string
		events  []wire.Record
		stopped bool
		want    string
	}{
		{"completed", []wire.Record{ev("claimed", "", ""), ev("completed", "", "")}, true, fateRecorded},
		{"completion failed", []wire.Record{ev("claimed", "", ""), ev("store error", "complete", "x")}, true, fateCompleteFailed},
		{"renewal failed, then completed", []wire.Record{ev("claimed", "", ""), ev("store error", "renew", "x"), ev("completed", "", "")}, true, fateRecorded},
		{"lost, released", []wire.Record{ev("claimed", "", ""), ev("lease lost", "", "x"), ev("released", "", "lease lost")}, true, fateReleased},
		{"lost, release failed", []wire.Record{ev("claimed", "", ""), ev("lease lost", "", "x"), ev("store error", "release", "x")}, true, fateReleased},
		{"lost, then taken over", []wire.Record{ev("claimed", "", ""), ev("lease lost", "", "x")}, true, fateSuperseded},
		{"completion stale", []wire.Record{ev("claimed", "", ""), ev("stale", "", "x")}, true, fateSuperseded},
		{"killed", []wire.Record{ev("claimed", "", "")}, false, fateCrashed},
		{"never ended", []wire.Record{ev("claimed", "", "")}, true, fateUnended},
	} {
		if got, _, _ := fateOf(tc.events, tc.stopped); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// builder makes a history of one key, one execution at a time.
type builder struct {
	h   history
	now int64
}

func newBuilder() *builder {
	return &builder{h: history{lease: time.Second, instances: []string{"i1", "i2"}, recorded: map[string]string{}}, now: int64(time.Hour)}
}

func (b *builder) tick(d time.Duration) int64 {
	b.now += int64(d)
	return b.now
}

// run adds an attempt on key that ran execution exec at instance inst,
// with the given outcome and the adapter's end event.
func (b *builder) run(key, kind, id, exec, inst string, outcome string, end ...wire.Record) *attempt {
	a := attempt{ID: id, Key: key, Kind: kind, Variant: "main", Start: b.tick(time.Millisecond), Outcome: outcome}
	if outcome == outAnswer {
		a.Exec, a.Status = exec, 201
	}
	pid := 100
	if inst == "i2" {
		pid = 200
	}
	gen := int64(len(b.h.attempts) + 1)
	sent := b.tick(time.Millisecond)
	b.h.records = append(b.h.records,
		wire.Record{Ev: wire.EvStore, Op: "claim", What: "acquired", Attempt: id, Key: key, Gen: gen, Sent: sent, T: b.tick(time.Millisecond), Instance: inst, PID: pid},
		wire.Record{Ev: wire.EvIdem, What: "claimed", Attempt: id, Key: key, T: b.now, Instance: inst, PID: pid},
		wire.Record{Ev: wire.EvExec, Op: wire.OpStart, Attempt: id, Key: key, Exec: exec, Gen: gen, T: b.now, Instance: inst, PID: pid, Variant: "main"},
		wire.Record{Ev: wire.EvExec, Op: wire.OpEffect, Attempt: id, Key: key, Exec: exec, T: b.tick(time.Millisecond), Instance: inst, PID: pid},
		wire.Record{Ev: wire.EvExec, Op: wire.OpAnswer, Attempt: id, Key: key, Exec: exec, Code: 201, T: b.tick(time.Millisecond), Instance: inst, PID: pid},
	)
	if kind != kindDB && kind != kindTx {
		b.h.effects = append(b.h.effects, effect{Effect: wire.Effect{Key: key, Exec: exec, Attempt: id, Instance: inst, Variant: "main"}, T: b.now, Seq: int64(len(b.h.effects) + 1)})
	}
	for _, e := range end {
		e.Attempt, e.Key, e.T, e.Instance, e.PID = id, key, b.tick(time.Millisecond), inst, pid
		if e.Ev == "" {
			e.Ev = wire.EvIdem
		}
		b.h.records = append(b.h.records, e)
	}
	a.End = b.tick(time.Millisecond)
	b.h.attempts = append(b.h.attempts, a)
	return &b.h.attempts[len(b.h.attempts)-1]
}

func (b *builder) replay(key, kind, id, exec string) {
	b.h.attempts = append(b.h.attempts, attempt{ID: id, Key: key, Kind: kind, Variant: "main", Start: b.tick(time.Millisecond), Outcome: outReplay, Exec: exec, End: b.tick(time.Millisecond)})
}

func (b *builder) fault(kind string, target int) {
	b.h.faults = append(b.h.faults, appliedFault{fault: fault{Kind: kind, Target: target}, Begin: b.now - int64(10*time.Millisecond), End: b.tick(time.Millisecond)})
}

func (b *builder) stopped(pids ...int) *history {
	for _, pid := range pids {
		b.h.records = append(b.h.records, wire.Record{Ev: wire.EvLife, What: "stopped", PID: pid, T: b.tick(time.Millisecond)})
	}
	b.h.end = b.tick(time.Second)
	return &b.h
}

var (
	completed = wire.Record{What: "completed"}
	released  = wire.Record{What: "released", Err: "shutdown: engine: the server is shutting down"}
	stale     = wire.Record{What: "stale", Err: "stale"}
)

func kinds(rep *report) []string {
	var out []string
	for _, v := range rep.violations {
		if !slices.Contains(out, v.Kind) {
			out = append(out, v.Kind)
		}
	}
	slices.Sort(out)
	return out
}

func TestCheckPassesAPlainHistory(t *testing.T) {
	t.Parallel()
	b := newBuilder()
	b.run("k", kindExt, "a1", "x1", "i1", outAnswer, completed)
	b.replay("k", kindExt, "a2", "x1")
	b.h.recorded["k"] = "x1"
	rep := check(b.stopped(100, 200))
	if len(rep.violations) != 0 {
		t.Fatalf("violations %+v, want none", rep.violations)
	}
}

// The shutdown/lease-loss defect: a whole answer given, the key released,
// the retry runs and answers otherwise.
func TestCheckFlagsAReleasedAnswer(t *testing.T) {
	t.Parallel()
	b := newBuilder()
	b.run("k", kindExt, "a1", "x1", "i1", outAnswer, wire.Record{Ev: wire.EvStore, Op: "release", Gen: 1}, released)
	b.run("k", kindExt, "a2", "x2", "i2", outAnswer, completed)
	b.replay("k", kindExt, "a3", "x2")
	b.h.recorded["k"] = "x2"
	got := kinds(check(b.stopped(100, 200)))
	want := []string{vLinearizability, vDoubleEffect}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("violations %q, want %q", got, want)
	}
}

// An MCP call cut off by a shutdown while its tool ran, after its effect,
// its key released: the retry runs the effect again. That was once
// mcphttp's documented gap (go-sdk dropped the answer of a cut-off call);
// it is a double effect now, fault or not.
func TestCheckFlagsACutOffMCPCallReleased(t *testing.T) {
	t.Parallel()
	b := newBuilder()
	b.run("k", kindMCP, "a1", "x1", "i1", outError, wire.Record{Ev: wire.EvStore, Op: "release", Gen: 1}, released)
	b.fault(faultTerm, 0)
	b.run("k", kindMCP, "a2", "x2", "i2", outAnswer, completed)
	b.replay("k", kindMCP, "a3", "x2")
	b.h.recorded["k"] = "x2"
	if got := kinds(check(b.stopped(100, 200))); !reflect.DeepEqual(got, []string{vDoubleEffect}) {
		t.Fatalf("violations %q, want %q", got, vDoubleEffect)
	}
}

// An MCP call answered HTTP 200 with no JSON-RPC response is an answer the
// promise does not allow: the client cannot tell what happened.
func TestCheckFlagsAnEmptyMCPAnswer(t *testing.T) {
	t.Parallel()
	b := newBuilder()
	a := b.run("k", kindMCP, "a1", "x1", "i1", outAnswer, completed)
	classifyMCP(a, http.StatusOK, []byte("  \n"), false)
	b.h.recorded["k"] = "x1"
	if got := kinds(check(b.stopped(100))); !slices.Contains(got, vUnexpected) {
		t.Fatalf("violations %q, want %q among them", got, vUnexpected)
	}
}

// A process killed after its effect, before its record: the retry may run
// again, and a kill explains it.
func TestCheckAllowsTheCrashWindow(t *testing.T) {
	t.Parallel()
	b := newBuilder()
	b.run("k", kindExt, "a1", "x1", "i1", outError)
	b.fault(faultKill, 0)
	b.tick(2 * time.Second)
	b.run("k", kindExt, "a2", "x2", "i2", outAnswer, completed)
	b.replay("k", kindExt, "a3", "x2")
	b.h.recorded["k"] = "x2"
	rep := check(b.stopped(200))
	if len(rep.violations) != 0 || rep.windows["process killed between the effect and the record"] != 1 {
		t.Fatalf("violations %+v, windows %v: want none, and one crash window", rep.violations, rep.windows)
	}
}

// A completion that failed is a documented window only with a fault to
// explain it.
func TestCheckWantsAFaultForAWindow(t *testing.T) {
	t.Parallel()
	b := newBuilder()
	b.run("k", kindExt, "a1", "x1", "i1", outAnswer, wire.Record{What: "store error", Op: "complete", Err: "x"})
	b.tick(2 * time.Second)
	b.run("k", kindExt, "a2", "x2", "i2", outAnswer, completed)
	b.replay("k", kindExt, "a3", "x2")
	b.h.recorded["k"] = "x2"
	if got := kinds(check(b.stopped(100, 200))); !reflect.DeepEqual(got, []string{vUnexplained}) {
		t.Fatalf("violations %q, want %q", got, vUnexplained)
	}
}

// An owner fenced after a pause: its client has its answer, the key the
// next owner's; allowed, with the pause to explain it.
func TestCheckAllowsAFencedOwner(t *testing.T) {
	t.Parallel()
	b := newBuilder()
	b.run("k", kindExt, "a1", "x1", "i1", outAnswer, wire.Record{What: "lease lost", Err: "x"}, stale)
	b.fault(faultPause, 0)
	b.tick(2 * time.Second)
	b.run("k", kindExt, "a2", "x2", "i2", outAnswer, completed)
	b.replay("k", kindExt, "a3", "x2")
	b.h.recorded["k"] = "x2"
	rep := check(b.stopped(100, 200))
	if len(rep.violations) != 0 || rep.windows["owner fenced after its lease ran out"] != 1 {
		t.Fatalf("violations %+v, windows %v", rep.violations, rep.windows)
	}
}

// The same window the other way round: an owner whose process paused
// after its claim, past its lease, runs its effect when it resumes, after
// the successor that took the key over recorded; fenced, its completion
// is stale. Allowed with the pause to explain it; without one, flagged.
//
// Its completion may also fail outright (PostgreSQL down when it tries):
// fenced all the same, its successor having taken the key over with a
// newer generation.
func TestCheckAllowsAFencedOwnerAfterItsSuccessor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		paused bool
		ended  wire.Record
	}{
		{true, stale}, {false, stale},
		{true, wire.Record{What: "store error", Op: "complete", Err: "x"}},
		{false, wire.Record{What: "store error", Op: "complete", Err: "x"}},
	} {
		paused := c.paused
		b := newBuilder()
		b.run("k", kindExt, "a2", "x2", "i2", outAnswer, completed)
		b.run("k", kindExt, "a1", "x1", "i1", outAnswer, wire.Record{What: "lease lost", Err: "x"}, c.ended)
		if paused {
			b.fault(faultPause, 0) // from before a1's claim to after its effect
		}
		for i, r := range b.h.records {
			// Its claim was the older generation, acquired before a2's:
			// the builder numbers claims in the order it runs them, and
			// the claim checks are not what this tests.
			switch {
			case r.Attempt == "a1" && r.Ev == wire.EvStore:
				b.h.records[i].Gen = 0
			case r.Attempt == "a1" && r.Gen != 0:
				b.h.records[i].Gen = 1
			case r.Attempt == "a2" && r.Gen != 0:
				b.h.records[i].Gen = 2
			}
		}
		b.replay("k", kindExt, "a3", "x2")
		b.h.recorded["k"] = "x2"
		rep := check(b.stopped(100, 200))
		switch got := kinds(rep); {
		case paused && (len(got) != 0 || rep.windows["owner fenced after its lease ran out, its effect after its successor's"] != 1):
			t.Errorf("paused, then %s: violations %+v, windows %v; want none, the window counted", c.ended.What, rep.violations, rep.windows)
		case !paused && !slices.Equal(got, []string{vUnexplained}):
			t.Errorf("no fault, then %s: violations %q, want %q", c.ended.What, got, vUnexplained)
		}
	}
}

// An owner fenced with no fault injected on its instance or PostgreSQL,
// but while the whole machine stalled (the harness's clock jumped): the
// stall explains the window as a pause would, on any instance; without it
// the same history is a violation (TestCheckWantsAFaultForAWindow).
func TestCheckExplainsAWindowByAMachineStall(t *testing.T) {
	t.Parallel()
	fenced := func(stall bool) *report {
		b := newBuilder()
		b.run("k", kindMCP, "a1", "x1", "i2", outError, wire.Record{What: "lease lost", Err: "x"}, stale)
		if stall {
			b.fault(faultStall, -1)
		}
		b.tick(2 * time.Second)
		b.run("k", kindMCP, "a2", "x2", "i2", outAnswer, completed)
		b.replay("k", kindMCP, "a3", "x2")
		b.h.recorded["k"] = "x2"
		return check(b.stopped(100, 200))
	}
	if rep := fenced(true); len(rep.violations) != 0 || rep.windows["owner fenced after its lease ran out"] != 1 {
		t.Fatalf("with a stall: violations %+v, windows %v; want none, and one fenced window", rep.violations, rep.windows)
	}
	if got := kinds(fenced(false)); !reflect.DeepEqual(got, []string{vUnexplained}) {
		t.Fatalf("without a stall: violations %q, want %q", got, vUnexplained)
	}
}

// The watcher records a gap in its own ticks as a stall of the machine,
// and nothing while its ticks keep time.
func TestStallWatcherSeesAGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The bubble's clock never stalls: the machine's stop is an
		// offset added to the clock the watcher reads.
		var offset atomic.Int64
		now := func() int64 { return time.Now().UnixNano() + offset.Load() }
		ctx, cancel := context.WithCancel(t.Context())
		w := watchStalls(ctx, now(), now)
		time.Sleep(2 * time.Second) // ticks every stallTick: no stall
		synctest.Wait()
		offset.Add(int64(3 * time.Second)) // the machine stops for 3 s
		time.Sleep(2 * stallTick)
		synctest.Wait()
		cancel()
		got := w.stop()
		if len(got) != 1 || got[0].Kind != faultStall || got[0].Target != -1 || got[0].For < 3*time.Second {
			t.Fatalf("stalls %+v, want one of 3 s or more on every instance", got)
		}
	})
}

// A second acquisition while the first claim's lease was still confirmed
// (what a claim that looks, then writes, allows), and a stale generation's
// completion accepted (what an unfenced completion does).
func TestCheckClaims(t *testing.T) {
	t.Parallel()
	b := newBuilder()
	b.run("k", kindExt, "a1", "x1", "i1", outAnswer, stale)
	b.run("k", kindExt, "a2", "x2", "i2", outAnswer, completed)
	b.h.recorded["k"] = "x2"
	got := kinds(check(b.stopped(100, 200)))
	if !slices.Contains(got, vTwoLive) {
		t.Errorf("violations %q, want %q", got, vTwoLive)
	}

	b = newBuilder()
	b.run("k", kindExt, "a1", "x1", "i1", outError)
	b.tick(3 * time.Second)
	b.run("k", kindExt, "a2", "x2", "i2", outAnswer, completed)
	b.h.records = append(b.h.records, wire.Record{Ev: wire.EvStore, Op: "complete", Key: "k", Gen: 1, Sent: b.tick(time.Millisecond), T: b.tick(time.Millisecond), Instance: "i1", PID: 100})
	got = kinds(check(b.stopped(200)))
	if !slices.Contains(got, vStaleAccepted) {
		t.Errorf("violations %q, want %q", got, vStaleAccepted)
	}
}

func TestCheckDBEffects(t *testing.T) {
	t.Parallel()
	b := newBuilder()
	b.run("d", kindDB, "a1", "x1", "i1", outAnswer, completed)
	b.h.dbRows = []dbEffect{{Key: "d", Exec: "x1", Variant: "main", Gen: 1}}
	b.h.recorded["d"] = "x1"
	if rep := check(b.stopped(100, 200)); len(rep.violations) != 0 {
		t.Fatalf("one row, recorded: violations %+v", rep.violations)
	}
	b.h.dbRows = append(b.h.dbRows, dbEffect{Key: "d", Exec: "x9", Variant: "main", Gen: 9})
	if got := kinds(check(&b.h)); !reflect.DeepEqual(got, []string{vDBEffect}) {
		t.Fatalf("two rows: violations %q, want %q", got, vDBEffect)
	}
}

// TestCheckSuccessRows: a client of the one-commit path told it
// succeeded must find the rows of that answer in the database. A success
// line with another body (the status escaped before a commit that
// failed), or an answer whose row rolled back, is caught; an answer
// committed early as unreplayable, then answered 410, is not.
func TestCheckSuccessRows(t *testing.T) {
	t.Parallel()
	b := newBuilder()
	a := b.run("t", kindTx, "a1", "x1", "i1", outUnexpected, released)
	a.Status, a.Detail = 201, `201 with body "{\"type\":\"...TypeCommitFailed\"}"`
	if got := kinds(check(b.stopped(100, 200))); !reflect.DeepEqual(got, []string{vSuccessNoRows, vUnexpected}) {
		t.Errorf("a 201 with the commit's failure as its body: violations %q, want %q and %q", got, vSuccessNoRows, vUnexpected)
	}

	b = newBuilder()
	b.run("t", kindTx, "a1", "x1", "i1", outAnswer, released)
	if got := kinds(check(b.stopped(100, 200))); !slices.Contains(got, vSuccessNoRows) {
		t.Errorf("an answer whose row rolled back: violations %q, want %q", got, vSuccessNoRows)
	}

	b = newBuilder()
	b.run("t", kindTx, "a1", "x1", "i1", outAnswer, completed)
	b.h.attempts = append(b.h.attempts, attempt{ID: "a2", Key: "t", Kind: kindTx, Variant: "main", Start: b.tick(time.Millisecond), Outcome: outUnreplayable, Status: 410, End: b.tick(time.Millisecond)})
	b.h.dbRows = []dbEffect{{Key: "t", Exec: "x1", Variant: "main", Gen: 1}}
	b.h.recorded["t"] = recordedUnreplayable
	if rep := check(b.stopped(100, 200)); len(rep.violations) != 0 {
		t.Errorf("an unreplayable answer and its row: violations %+v", rep.violations)
	}
}

func TestSchedule(t *testing.T) {
	t.Parallel()
	a := schedule(42, 2*time.Minute, allFaults, 3, time.Second)
	b := schedule(42, 2*time.Minute, allFaults, 3, time.Second)
	if !reflect.DeepEqual(a, b) || len(a) < 20 {
		t.Fatalf("two schedules of seed 42: %d and %d faults, equal %v: want the same, at least 20", len(a), len(b), reflect.DeepEqual(a, b))
	}
	if c := schedule(43, 2*time.Minute, allFaults, 3, time.Second); reflect.DeepEqual(a, c) {
		t.Error("seeds 42 and 43 gave the same schedule")
	}
	busy := map[int]time.Duration{}
	seen := map[string]bool{}
	for _, f := range a {
		seen[f.Kind] = true
		if f.At < busy[f.Target] {
			t.Errorf("%v overlaps the previous fault on its target", f)
		}
		busy[f.Target] = f.At + f.For
		if f.At < 2*time.Second || f.At+f.For > 2*time.Minute-3*time.Second {
			t.Errorf("%v is outside the run's faulty middle", f)
		}
		if (f.Kind == faultPause || f.Kind == faultTimeout) && f.For <= time.Second {
			t.Errorf("%v is not longer than the lease", f)
		}
	}
	if len(seen) != len(allFaults) {
		t.Errorf("two minutes of all faults used %d kinds, want %d", len(seen), len(allFaults))
	}
	for seed := int64(0); seed < 50; seed++ {
		kinds, err := pickFaults("rotate", seed)
		if err != nil || len(kinds) != 4 {
			t.Fatalf("rotate, seed %d: %v, %v", seed, kinds, err)
		}
		network, process := 0, 0
		for _, k := range kinds {
			switch k {
			case faultLatency, faultTimeout, faultReset, faultLimit:
				network++
			default:
				process++
			}
		}
		if network == 0 || process == 0 {
			t.Errorf("rotate, seed %d: %s, want a network fault and a process fault", seed, strings.Join(kinds, ","))
		}
	}
	if _, err := pickFaults("latency,nope", 1); err == nil {
		t.Error(`pickFaults("latency,nope") did not fail`)
	}
}

// TestClassifyTransactionLimit: POST /tx answered 500 because a bound ended
// its transaction took no effect and may be retried; any other 500 is an
// answer the promise does not allow.
func TestClassifyTransactionLimit(t *testing.T) {
	limit := []byte(`{"type":"` + middleware.TypeTransactionLimit + `","status":500}`)
	for _, tc := range []struct {
		kind string
		body []byte
		want string
	}{
		{kindTx, limit, outUnavailable},
		{kindTx, []byte("internal error"), outUnexpected},
		{kindDB, limit, outUnexpected},
	} {
		a := &attempt{Kind: tc.kind, Key: tc.kind + "-1"}
		classifyHTTP(a, http.StatusInternalServerError, tc.body, false)
		if a.Outcome != tc.want {
			t.Errorf("%s, %q: outcome %q, want %q", tc.kind, tc.body, a.Outcome, tc.want)
		}
	}
}

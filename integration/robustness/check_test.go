package robustness

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemkit/idem/integration/robustness/wire"
)

// history is everything a run recorded, as the checker reads it.
type history struct {
	lease    time.Duration
	attempts []attempt
	records  []wire.Record
	effects  []effect   // outside the database, from the effect service
	dbRows   []dbEffect // robust_effects, after the run
	faults   []appliedFault
	// instanceOf names each instance by index, for faults' targets.
	instances []string
	// recorded is each key's recorded answer after the run (the execution
	// its result names), "" for a key absent from idem's table.
	recorded map[string]string
	// left is every key still claimed once the faults stopped, the clients
	// settled and the sweepers ran.
	left []string
	// unsettled is every key no client could get an answer for after the
	// faults stopped.
	unsettled []string
	// crashes is what instances printed that says they crashed by
	// themselves.
	crashes []string
	// pgSamples are the moments something waited in the database.
	pgSamples []pgSample
	end       int64
}

type dbEffect struct {
	Key, Exec, Variant string
	Gen                int64
}

// violation is one way a history breaks the promise.
type violation struct {
	Kind   string
	Key    string
	At     int64 // when it was in the history: the latest event it needs
	Detail string
}

// Kinds of violation.
const (
	vLinearizability = "answers not linearizable (porcupine)"
	vDoubleEffect    = "effect outside the database ran twice"
	vUnexplained     = "effect ran twice in a documented window, but no fault explains it"
	vDBEffect        = "effect in the database not exactly once, or not the answer"
	vSuccessNoRows   = "a client was told it succeeded, and the rows of that answer are not in the database"
	vTwoLive         = "two live claims on one key"
	vStaleAccepted   = "a stale generation was renewed or completed"
	vProbeRan        = "the same key with another body ran"
	vTruncatedRan    = "a request whose body never arrived ran"
	vLeftClaimed     = "a key claimed after the faults stopped and the sweepers ran"
	vUnsettled       = "a key not answered after the faults stopped"
	vUnexpected      = "an answer the promise does not allow"
	vCrash           = "an instance crashed by itself"
	vUnended         = "an execution that never ended"
)

// Fates of an execution: how its claim ended, from its adapter's events
// (for /db, from the database: its row commits with its answer).
const (
	fateRecorded       = "recorded"        // completed with its answer
	fateCompleteFailed = "complete-failed" // the completion failed: may or may not have been recorded
	fateCrashed        = "crashed"         // its process was killed before it reported
	fateSuperseded     = "superseded"      // its claim was taken over: a completion or release found it stale
	fateReleased       = "released"        // its key was released (or the release failed)
	fateLeft           = "left"            // its claim was left to its lease: the work may still run (an MCP stream ended before the response)
	fateUnended        = "unended"         // no end, and its process ended cleanly
)

// execution is one run of a handler, joined from the service's records.
type execution struct {
	ID, Key, Kind, Attempt, Instance, Variant string
	PID                                       int
	Gen                                       int64
	ClaimSent, Start, Effect, AnswerT         int64
	AnswerCode                                int
	EffectSeq                                 int64
	Fate                                      string
	Cause                                     string // why it was released, or its completion failed
	EndT                                      int64  // when its fate was reported (zero if it never was)
	events                                    []wire.Record
}

// answered reports whether the handler gave its whole answer (a 201, or the
// tool's result).
func (x *execution) answered() bool { return x.AnswerCode == 201 }

// report is the checker's verdict on a history.
type report struct {
	violations []violation
	// windows counts the effects that ran again in a documented window,
	// by the window.
	windows map[string]int
	execs   map[string]*execution
	byKey   map[string][]*attempt
	// porcupine's result per key, for the visualization of a violation.
	linear map[string]porcupine.LinearizationInfo
	ops    map[string][]porcupine.Operation
}

func (r *report) add(v violation) { r.violations = append(r.violations, v) }

// check checks a history. First porcupine (v1.3.1), per key, against the
// model (step): a key is absent or done(the execution it records); an
// attempt without an answer (time-out, hang-up, 409, 503) changes nothing,
// unless it started an execution that may have been recorded, whose answer
// may then appear any time after it began; a fresh answer records; a
// replay must be the recorded answer; 422 only for the other body. Then
// the effect logs; the claims, from every store call's sending and return
// (a generation acquired before the previous one's last confirmed lease
// ran out, or a stale generation's renewal or completion that succeeded, is
// a violation); the rows of robust_effects against the answers and
// records; every 2xx a client of /db or /tx got, which must name an
// execution whose row is in the database; idem_keys once the faults
// stopped, every key answered and the sweepers ran; the instances' stderr
// for panics and races.
//
// The documented windows in which an effect outside the database may run
// again, each counted and required to coincide with a fault on that
// instance or on PostgreSQL: the earlier execution's process was killed
// between the effect and the record (middleware's package doc: Commit
// closes the window); its completion failed (docs/design.md, "What is
// recorded": a complete that still fails leaves the claim to its lease);
// its owner lost the lease and was fenced (docs/design.md, "Fencing is by
// generation"); the later execution is such an owner, paused or stalled
// past its lease while a successor recorded, whose work did not honour its
// context (package engine: work must honour its context); its context
// ended (Shutdown, a lost lease) without a success and it was released
// (docs/design.md, "What is recorded"); an MCP call's inner handler
// returned no response after a cut-off, left to its lease (docs/design.md,
// "MCP calls cut off"). In the first three the client may hold the
// earlier, unrecorded answer; the model allows it.
func check(h *history) *report {
	rep := &report{windows: map[string]int{}, execs: map[string]*execution{}, byKey: map[string][]*attempt{},
		linear: map[string]porcupine.LinearizationInfo{}, ops: map[string][]porcupine.Operation{}}
	for i := range h.attempts {
		a := &h.attempts[i]
		rep.byKey[a.Key] = append(rep.byKey[a.Key], a)
	}
	execs := joinExecutions(h)
	rep.execs = execs
	byAttempt := map[string]*execution{}
	for _, x := range execs {
		byAttempt[x.Attempt] = x
	}

	for _, a := range h.attempts {
		if a.Outcome == outUnexpected {
			rep.add(violation{Kind: vUnexpected, Key: a.Key, At: a.End, Detail: fmt.Sprintf("attempt %s at %s: %s", a.ID, h.instName(a.Instance), a.Detail)})
		}
		if x := byAttempt[a.ID]; x != nil && a.Fault == "midbody" {
			rep.add(violation{Kind: vTruncatedRan, Key: a.Key, At: x.Start, Detail: fmt.Sprintf("attempt %s ran as execution %s", a.ID, x.ID)})
		}
	}
	for _, x := range execs {
		if x.Variant != "" && x.Variant != "main" {
			rep.add(violation{Kind: vProbeRan, Key: x.Key, At: x.Start, Detail: fmt.Sprintf("execution %s ran body %s (attempt %s)", x.ID, x.Variant, x.Attempt)})
		}
		if x.Fate == fateUnended {
			rep.add(violation{Kind: vUnended, Key: x.Key, At: h.end, Detail: fmt.Sprintf("execution %s (attempt %s, %s pid %d)", x.ID, x.Attempt, x.Instance, x.PID)})
		}
	}

	checkLinearizable(h, rep, byAttempt)
	checkEffects(h, rep, execs)
	checkDBEffects(h, rep, execs)
	checkSuccessRows(h, rep)
	checkClaims(h, rep)
	for _, k := range h.left {
		rep.add(violation{Kind: vLeftClaimed, Key: k, At: h.end})
	}
	for _, k := range h.unsettled {
		rep.add(violation{Kind: vUnsettled, Key: k, At: h.end})
	}
	for _, c := range h.crashes {
		rep.add(violation{Kind: vCrash, At: h.end, Detail: c})
	}
	sort.SliceStable(rep.violations, func(i, j int) bool { return rep.violations[i].At < rep.violations[j].At })
	return rep
}

func (h *history) instName(i int) string {
	if i < 0 || i >= len(h.instances) {
		return "pg"
	}
	return h.instances[i]
}

// joinExecutions builds the executions from the service's records: their
// start, effect and answer, their generation (from the claim their attempt
// acquired) and their fate (from their attempt's events).
func joinExecutions(h *history) map[string]*execution {
	execs := map[string]*execution{}
	var order []*execution
	acquired := map[string]wire.Record{} // attempt → the claim that acquired
	events := map[string][]wire.Record{}
	stopped := map[int]bool{} // pids that stopped cleanly
	for _, r := range h.records {
		switch r.Ev {
		case wire.EvExec:
			x := execs[r.Exec]
			if x == nil {
				x = &execution{ID: r.Exec, Key: r.Key, Attempt: r.Attempt, Instance: r.Instance, PID: r.PID}
				execs[r.Exec] = x
				order = append(order, x)
			}
			switch r.Op {
			case wire.OpStart:
				x.Start, x.Gen, x.Variant = r.T, r.Gen, r.Variant
			case wire.OpEffect:
				x.Effect, x.EffectSeq = r.T, r.Seq
			case wire.OpAnswer:
				x.AnswerT, x.AnswerCode = r.T, r.Code
			}
		case wire.EvStore:
			if r.Op == "claim" && r.What == "acquired" && r.Attempt != "" {
				acquired[r.Attempt] = r
			}
		case wire.EvIdem:
			if r.Attempt != "" {
				events[r.Attempt] = append(events[r.Attempt], r)
			}
		case wire.EvLife:
			if r.What == "stopped" {
				stopped[r.PID] = true
			}
		}
	}
	kinds := map[string]string{}
	for _, a := range h.attempts {
		kinds[a.Key] = a.Kind
	}
	committed := map[string]bool{}
	for _, row := range h.dbRows {
		committed[row.Exec] = true
	}
	for _, x := range order {
		x.Kind = kinds[x.Key]
		if c, ok := acquired[x.Attempt]; ok {
			x.ClaimSent = c.Sent
			if x.Gen == 0 {
				x.Gen = c.Gen
			}
		}
		x.events = events[x.Attempt]
		x.Fate, x.Cause, x.EndT = fateOf(x.events, stopped[x.PID])
		if x.Kind == kindDB || x.Kind == kindTx {
			// The row and the recorded answer commit together.
			if committed[x.ID] {
				x.Fate = fateRecorded
			} else if x.Fate == fateRecorded || x.Fate == fateCompleteFailed {
				x.Fate = fateReleased
			}
		}
	}
	return execs
}

// fateOf reads how an execution's claim ended from its attempt's events,
// and when that was reported.
func fateOf(events []wire.Record, stoppedCleanly bool) (fate, cause string, at int64) {
	lost, lostAt := "", int64(0)
	for _, e := range events {
		switch e.What {
		case "completed":
			return fateRecorded, "", e.T
		case "stale":
			return fateSuperseded, e.Err, e.T
		case "released":
			return fateReleased, e.Err, e.T
		case "left":
			return fateLeft, "", e.T
		case "store error":
			switch e.Op {
			case "complete":
				return fateCompleteFailed, e.Err, e.T
			case "release":
				if lost != "" {
					return fateReleased, "lease lost, then the release failed: " + e.Err, e.T
				}
				return fateReleased, "the release failed: " + e.Err, e.T
			}
		case "lease lost":
			lost, lostAt = e.Err, e.T
		}
	}
	switch {
	case lost != "":
		// Lost, then nothing: the release (or, fenced, the completion)
		// found the key taken over, which is not reported again.
		return fateSuperseded, lost, lostAt
	case !stoppedCleanly:
		return fateCrashed, "", 0
	}
	return fateUnended, "", 0
}

// The model of the promise, for porcupine. A key's state is the execution
// whose answer is recorded, "" while none is. Each attempt is an operation.
type opInput struct {
	Attempt   string
	Probe     bool
	Exec      string // the execution the attempt started, if any
	MayRecord bool   // whether that execution's answer may have been recorded
}

type opOutput struct {
	Outcome string
	Exec    string
	// Fate is the answering execution's fate, for an answer that is not a
	// replay: "rec" (recorded, or released although the client got it: the
	// promise is that it stands), "maybe" (its recording failed or its
	// process died: it may have been recorded), "superseded" (its owner was
	// fenced after its lease ran out: never recorded).
	Fate string
}

// step returns the states a key may be in after an operation, or none if
// the operation is impossible in state:
//   - an attempt without an answer (time-out, hang-up, 409, 503) changes
//     nothing, unless it started an execution that may have been recorded;
//   - a fresh answer is recorded if the key was absent; one that may not
//     have been recorded may also leave it absent; a superseded one changes
//     nothing, in any state;
//   - a replay must be the recorded answer;
//   - 422 is only for the other body, which must never run.
func step(state string, in opInput, out opOutput) []string {
	switch out.Outcome {
	case outError, outInFlight, outUnavailable, outUnexpected:
		if in.Exec != "" && in.MayRecord && state == "" {
			return []string{"", in.Exec}
		}
		return []string{state}
	case outMismatch:
		if !in.Probe {
			return nil
		}
		return []string{state}
	case outAnswer:
		if in.Probe || out.Exec != in.Exec {
			return nil
		}
		switch out.Fate {
		case "rec":
			if state == "" {
				return []string{out.Exec}
			}
			return nil
		case "maybe":
			if state == "" {
				return []string{"", out.Exec}
			}
			return []string{state}
		default: // superseded
			return []string{state}
		}
	case outReplay:
		if !in.Probe && state == out.Exec {
			return []string{state}
		}
		return nil
	case outUnreplayable:
		if !in.Probe && state != "" {
			return []string{state}
		}
		return nil
	}
	return nil
}

var model = (&porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{""} },
	Step: func(state, input, output interface{}) []interface{} {
		var out []interface{}
		for _, s := range step(state.(string), input.(opInput), output.(opOutput)) {
			out = append(out, s)
		}
		return out
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(opInput), output.(opOutput)
		s := in.Attempt
		if in.Probe {
			s += " (other body)"
		}
		s += " → " + out.Outcome
		if out.Exec != "" {
			s += " " + out.Exec
		}
		if out.Fate != "" && out.Fate != "rec" {
			s += " [" + out.Fate + "]"
		}
		return s
	},
	DescribeState: func(state interface{}) string {
		if state.(string) == "" {
			return "absent"
		}
		return "done(" + state.(string) + ")"
	},
}).ToModel()

// operations turns a key's attempts into porcupine operations. An attempt
// whose outcome the client never saw may take effect at any time after it
// began: it returns at the end of the history.
func operations(h *history, attempts []*attempt, byAttempt map[string]*execution) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, a := range attempts {
		in := opInput{Attempt: a.ID, Probe: a.probe()}
		if x := byAttempt[a.ID]; x != nil {
			in.Exec = x.ID
			in.MayRecord = x.Fate == fateRecorded || x.Fate == fateCompleteFailed || x.Fate == fateCrashed || x.Fate == fateUnended
		}
		out := opOutput{Outcome: a.Outcome, Exec: a.Exec}
		ret := a.End
		switch a.Outcome {
		case outAnswer:
			x := byAttempt[a.ID]
			switch {
			case x == nil:
				out.Fate = "rec"
			case x.Fate == fateCompleteFailed || x.Fate == fateCrashed || x.Fate == fateUnended:
				out.Fate = "maybe"
			case x.Fate == fateSuperseded:
				out.Fate = "superseded"
			default:
				out.Fate = "rec"
			}
		case outError, outInFlight, outUnavailable, outUnexpected:
			ret = h.end + 1
		}
		ops = append(ops, porcupine.Operation{ClientId: a.Worker, Input: in, Call: a.Start, Output: out, Return: ret})
	}
	return ops
}

func checkLinearizable(h *history, rep *report, byAttempt map[string]*execution) {
	keys := make([]string, 0, len(rep.byKey))
	for k := range rep.byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ops := operations(h, rep.byKey[k], byAttempt)
		res, info := porcupine.CheckOperationsVerbose(model, ops, time.Minute)
		switch res {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			rep.add(violation{Kind: vLinearizability, Key: k, At: h.end, Detail: "porcupine timed out on this key's history"})
		default:
			rep.linear[k], rep.ops[k] = info, ops
			rep.add(violation{Kind: vLinearizability, Key: k, At: firstIllegal(ops), Detail: describeAnswers(rep.byKey[k])})
		}
	}
}

// firstIllegal is the earliest time by which ops, cut there, are no longer
// linearizable: the return of the operation that makes them so.
func firstIllegal(ops []porcupine.Operation) int64 {
	var times []int64
	for _, op := range ops {
		times = append(times, op.Return)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	cut := func(t int64) []porcupine.Operation {
		var out []porcupine.Operation
		for _, op := range ops {
			if op.Return <= t {
				out = append(out, op)
			}
		}
		return out
	}
	i := sort.Search(len(times), func(i int) bool { return !porcupine.CheckOperations(model, cut(times[i])) })
	if i == len(times) {
		return times[len(times)-1]
	}
	return times[i]
}

func describeAnswers(as []*attempt) string {
	seen := map[string]bool{}
	var parts []string
	for _, a := range as {
		if a.Exec != "" && !seen[a.Exec+a.Outcome] {
			seen[a.Exec+a.Outcome] = true
			parts = append(parts, fmt.Sprintf("%s %s (first by %s)", a.Outcome, a.Exec, a.ID))
		}
	}
	return "answers: " + strings.Join(parts, ", ")
}

// checkEffects checks the effects outside the database: a key's effect may
// run again only after an execution that ended in a documented window (its
// process killed before it recorded, its completion failed, its owner
// fenced after its lease ran out, its claim left to its lease, released
// before it answered), and a fault must explain that ending. An MCP call
// cut off while its tool ran is not one of them: its tool's answer is
// recorded like any other, or its claim left to its lease.
func checkEffects(h *history, rep *report, execs map[string]*execution) {
	byKey := map[string][]effect{}
	for _, e := range h.effects {
		byKey[e.Key] = append(byKey[e.Key], e)
	}
	for k, es := range byKey {
		sort.Slice(es, func(i, j int) bool { return es[i].Seq < es[j].Seq })
		for i := 1; i < len(es); i++ {
			prev, cur := execs[es[i-1].Exec], es[i]
			if prev == nil {
				rep.add(violation{Kind: vDoubleEffect, Key: k, At: cur.T, Detail: fmt.Sprintf("effect %d by %s after an effect by %s, which logged nothing", cur.Seq, cur.Exec, es[i-1].Exec)})
				continue
			}
			window := ""
			switch {
			case prev.Fate == fateCrashed:
				window = "process killed between the effect and the record"
			case prev.Fate == fateCompleteFailed:
				window = "the completion failed"
			case prev.Fate == fateSuperseded:
				window = "owner fenced after its lease ran out"
			case prev.Fate == fateReleased && !prev.answered():
				window = "released before it answered"
			case prev.Fate == fateLeft:
				window = "left to its lease (its stream ended before the response)"
			}
			explained := prev
			if later := execs[cur.Exec]; window == "" && later != nil && fencedBy(later, prev) {
				// The same window the other way round: the later effect is
				// a fenced owner's, whose lease ran out before its effect
				// (its process paused or stalled past the lease after its
				// work began; work whose lease ran out before it began is
				// not called) while a successor took the key over and
				// recorded; its work did not honour its context.
				window, explained = "owner fenced after its lease ran out, its effect after its successor's", execs[cur.Exec]
			}
			if window == "" {
				what := fmt.Sprintf("its claim was %s", prev.Fate)
				if prev.Fate == fateReleased {
					what = "it answered 201 and its key was released (" + prev.Cause + ")"
				}
				rep.add(violation{Kind: vDoubleEffect, Key: k, At: max(cur.T, prev.EndT),
					Detail: fmt.Sprintf("effect %d by %s (attempt %s) after %s (attempt %s) ran the effect: %s", cur.Seq, cur.Exec, cur.Attempt, prev.ID, prev.Attempt, what)})
				continue
			}
			if f := h.explaining(explained, cur.T); f == nil {
				rep.add(violation{Kind: vUnexplained, Key: k, At: max(cur.T, prev.EndT),
					Detail: fmt.Sprintf("effect %d by %s after %s (%s, %s): no fault on %s or PostgreSQL between", cur.Seq, cur.Exec, prev.ID, window, explained.Cause, explained.Instance)})
				continue
			}
			rep.windows[window]++
		}
	}
}

// fencedBy reports whether x, which ran its effect after prev's, was a
// fenced owner: its claim taken over (superseded), or its lease lost and
// prev's claim a newer generation than its own, so that its completion
// could only be refused as stale, even if it failed (PostgreSQL down when
// it tried) before it was.
func fencedBy(x, prev *execution) bool {
	if x.Fate == fateSuperseded {
		return true
	}
	lost := slices.ContainsFunc(x.events, func(e wire.Record) bool { return e.What == "lease lost" })
	return lost && x.Gen != 0 && x.Gen < prev.Gen
}

// explaining returns a fault that touched x's instance (or PostgreSQL)
// between the claim x ran under and until, or nil.
func (h *history) explaining(x *execution, until int64) *appliedFault {
	from := x.Start
	if x.ClaimSent != 0 {
		from = min(from, x.ClaimSent)
	}
	for i := range h.faults {
		f := &h.faults[i]
		if f.End < from || f.Begin > until {
			continue
		}
		if f.Target < 0 || h.instName(f.Target) == x.Instance {
			return f
		}
	}
	return nil
}

// checkDBEffects checks the effect in the database: at most one row per
// key, and it is the recorded answer; none for a key recorded without one.
func checkDBEffects(h *history, rep *report, execs map[string]*execution) {
	rows := map[string][]dbEffect{}
	for _, r := range h.dbRows {
		rows[r.Key] = append(rows[r.Key], r)
	}
	keys := map[string]bool{}
	for k := range rows {
		keys[k] = true
	}
	for k, as := range rep.byKey {
		if len(as) > 0 && (as[0].Kind == kindDB || as[0].Kind == kindTx) {
			keys[k] = true
		}
	}
	for k := range keys {
		rs, rec := rows[k], h.recorded[k]
		if rec == recordedUnreplayable && len(rs) == 1 {
			// Completed without a body to name its execution: its one
			// row says which it was.
			rec = rs[0].Exec
		}
		switch {
		case len(rs) > 1:
			var xs []string
			for _, r := range rs {
				xs = append(xs, r.Exec)
			}
			rep.add(violation{Kind: vDBEffect, Key: k, At: h.end, Detail: fmt.Sprintf("%d rows: %s", len(rs), strings.Join(xs, ", "))})
		case len(rs) == 1 && rs[0].Exec != rec:
			rep.add(violation{Kind: vDBEffect, Key: k, At: h.end, Detail: fmt.Sprintf("the row is %s's, the recorded answer %q's", rs[0].Exec, rec)})
		case len(rs) == 0 && rec != "":
			rep.add(violation{Kind: vDBEffect, Key: k, At: h.end, Detail: fmt.Sprintf("recorded answer %s without its row", rec)})
		}
		for _, a := range rep.byKey[k] {
			if (a.Outcome == outAnswer || a.Outcome == outReplay) && a.Exec != rec {
				rep.add(violation{Kind: vDBEffect, Key: k, At: a.End, Detail: fmt.Sprintf("attempt %s was answered %s, the database holds %q", a.ID, a.Exec, rec)})
			}
		}
	}
}

// checkClaims checks the claims as the service's store calls saw them: a
// claim is acquired only once the previous generation's claim may have
// ended (its last confirmed lease ran out, or it was completed or
// released), and no call with a generation older than the newest acquired
// one succeeds once that one is acquired.
func checkClaims(h *history, rep *report) {
	type genOps struct {
		acquired *wire.Record
		ops      []wire.Record
	}
	byKey := map[string]map[int64]*genOps{}
	for _, r := range h.records {
		if r.Ev != wire.EvStore || r.Gen == 0 || r.Key == "" {
			continue
		}
		if byKey[r.Key] == nil {
			byKey[r.Key] = map[int64]*genOps{}
		}
		g := byKey[r.Key][r.Gen]
		if g == nil {
			g = &genOps{}
			byKey[r.Key][r.Gen] = g
		}
		g.ops = append(g.ops, r)
		if r.Op == "claim" && r.What == "acquired" {
			rr := r
			g.acquired = &rr
		}
	}
	const slack = int64(20 * time.Millisecond)
	for k, gens := range byKey {
		var order []int64
		for g, ops := range gens {
			if ops.acquired != nil {
				order = append(order, g)
			}
		}
		sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
		for i := 1; i < len(order); i++ {
			a, b := gens[order[i-1]], gens[order[i]]
			// a's claim was certainly live until its last confirmed lease
			// ran out, unless it was ended before (the first completion or
			// release sent, whatever its result).
			live := int64(0)
			end := int64(1<<63 - 1)
			for _, op := range a.ops {
				switch op.Op {
				case "claim", "renew":
					if op.Err == "" && (op.Op == "renew" || op.What == "acquired") {
						live = max(live, op.Sent+int64(h.lease))
					}
				case "complete", "completeTx", "release":
					end = min(end, op.Sent)
				}
			}
			if b.acquired.T < min(live, end)-slack {
				rep.add(violation{Kind: vTwoLive, Key: k, At: b.acquired.T, Detail: fmt.Sprintf(
					"generation %d acquired (attempt %s, %s) %v before generation %d's confirmed lease ran out (attempt %s)",
					order[i], b.acquired.Attempt, b.acquired.Instance, time.Duration(min(live, end)-b.acquired.T), order[i-1], a.acquired.Attempt)})
			}
		}
		// Fencing: once a generation is acquired, every older one is stale.
		for i := 1; i < len(order); i++ {
			newer := gens[order[i]].acquired
			for j := 0; j < i; j++ {
				for _, op := range gens[order[j]].ops {
					if op.Err == "" && op.Sent > newer.T && (op.Op == "renew" || op.Op == "complete" || op.Op == "completeTx") {
						rep.add(violation{Kind: vStaleAccepted, Key: k, At: op.T, Detail: fmt.Sprintf(
							"%s of generation %d (%s, attempt %s) succeeded, sent %v after generation %d was acquired",
							op.Op, order[j], op.Instance, op.Attempt, time.Duration(op.Sent-newer.T), order[i])})
					}
				}
			}
		}
	}
}

// checkSuccessRows checks what the clients of the in-database effect were
// told: every success (2xx) a client got names the execution whose row is
// in the database. A success without a readable answer, or whose
// execution's row did not commit, is a client told "done" for work that
// was rolled back.
func checkSuccessRows(h *history, rep *report) {
	committed := map[string]bool{}
	for _, r := range h.dbRows {
		committed[r.Exec] = true
	}
	for _, a := range h.attempts {
		if (a.Kind != kindDB && a.Kind != kindTx) || a.Status < 200 || a.Status > 299 {
			continue
		}
		switch {
		case a.Exec == "":
			rep.add(violation{Kind: vSuccessNoRows, Key: a.Key, At: a.End, Detail: fmt.Sprintf("attempt %s at %s was answered %d without an answer: %s", a.ID, h.instName(a.Instance), a.Status, a.Detail)})
		case !committed[a.Exec]:
			rep.add(violation{Kind: vSuccessNoRows, Key: a.Key, At: a.End, Detail: fmt.Sprintf("attempt %s at %s was answered %d by %s, whose row did not commit", a.ID, h.instName(a.Instance), a.Status, a.Exec)})
		}
	}
}

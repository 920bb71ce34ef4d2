// Package wire is what the robustness harness and its service under test
// (robustness/sut) say to each other: the service's log lines, the bodies
// of its requests and answers, and the effect service's calls.
package wire

// Record is one line of a service instance's log (JSON, one per line).
// Times are Unix nanoseconds on the machine's wall clock, which every
// process of a run and the database share.
type Record struct {
	T        int64  `json:"t"`
	Instance string `json:"i"`
	PID      int    `json:"pid"`
	// Ev is the kind of line: EvStore, EvIdem, EvExec, EvSweep, EvLife.
	Ev      string `json:"ev"`
	Attempt string `json:"a,omitempty"`
	// Key is the client's key (the Idempotency-Key header or
	// _meta.idempotencyKey), without idem's "key/" form tag.
	Key string `json:"k,omitempty"`
	// Op is the store operation (EvStore), the store operation of an
	// idem.EventStoreError (EvIdem), or the execution's phase (EvExec).
	Op  string `json:"op,omitempty"`
	Gen int64  `json:"gen,omitempty"`
	// What is the claim's status (EvStore claim), the idem.EventKind
	// (EvIdem), or the life event (EvLife).
	What     string `json:"w,omitempty"`
	Code     int    `json:"code,omitempty"`
	Err      string `json:"err,omitempty"`
	Takeover bool   `json:"to,omitempty"`
	Cached   bool   `json:"cached,omitempty"`
	// Sent is when a store call was sent (T is when it returned).
	Sent     int64  `json:"sent,omitempty"`
	LeaseEnd int64  `json:"le,omitempty"`
	Exec     string `json:"x,omitempty"`
	Seq      int64  `json:"seq,omitempty"`
	Adapter  string `json:"ad,omitempty"`
	Variant  string `json:"v,omitempty"`
	// Abandoned and Expired are a sweep's counts.
	Abandoned int    `json:"ab,omitempty"`
	Expired   int    `json:"ex,omitempty"`
	Msg       string `json:"msg,omitempty"`
}

// Kinds of [Record].
const (
	EvStore = "store" // a store call, as the engine made it
	EvIdem  = "idem"  // an idem.Event the adapter reported
	EvExec  = "exec"  // a handler's execution: OpStart, OpEffect, OpAnswer
	EvSweep = "sweep" // a sweep round that removed something
	EvLife  = "life"  // the process: listening, shutting down, cutting off, stopped
)

// Phases of an execution (EvExec's Op).
const (
	OpStart  = "start"
	OpEffect = "effect"
	OpAnswer = "answer"
)

// Request is the body of POST /ext and /db, and the arguments of the MCP
// tool "ext". Every request for one key carries the same Request, except
// the harness's probes, whose Variant differs (the same key with another
// body: it must be refused, never run).
type Request struct {
	Key     string `json:"key"`
	Variant string `json:"variant"`
	// WorkMS is how long the handler works after its effect, ignoring its
	// context: the effect happened, so the answer must be given.
	WorkMS int `json:"work_ms"`
	// HonorCtx makes the handler check its context before the effect and
	// answer 503 without it when the context ended.
	HonorCtx bool `json:"honor_ctx,omitempty"`
	// Misbehave is how the handler of POST /tx (the one-commit path)
	// misbehaves: one of the Misbehave* constants, "" for none.
	Misbehave string `json:"misbehave,omitempty"`
}

// Misbehaviours of the POST /tx handler, each one net/http tolerates. Those
// that would fail every execution (a panic, a transaction left idle past
// its bound) misbehave only on executions whose row id is odd, so that a
// retry, with a new id, gets through.
const (
	// MisbehaveTwice: the status, the body, then http.Error: a second
	// status and more body.
	MisbehaveTwice = "twice"
	// MisbehaveWriteFirst: the body, then WriteHeader(201), which comes
	// too late (the write implied 200).
	MisbehaveWriteFirst = "write-first"
	// MisbehavePanic: the whole answer, then a panic (odd ids).
	MisbehavePanic = "panic"
	// MisbehaveOvertime: works past the route's MaxExecution, ignoring its
	// context, but within the transaction's idle bound, then answers as
	// MisbehaveTwice does.
	MisbehaveOvertime = "overtime"
	// MisbehaveIdle: leaves the transaction idle past its bound, which
	// PostgreSQL then ends (odd ids), then answers as MisbehaveWriteFirst
	// does: the commit fails, and no status may have reached the client.
	MisbehaveIdle = "idle"
	// MisbehaveBig: an answer over the route's record limit, committed
	// early and recorded as unreplayable.
	MisbehaveBig = "big"
)

// Answer is the body of a 201 (and of the MCP tool's text result): which
// execution answered.
type Answer struct {
	Key     string `json:"key"`
	Exec    string `json:"exec"`
	Variant string `json:"variant"`
	// Seq is the effect service's number for the effect (/ext, MCP), or
	// the robust_effects row's id (/db, /tx).
	Seq int64 `json:"seq"`
	// Pad makes the answer of MisbehaveBig larger than the record limit.
	Pad string `json:"pad,omitempty"`
}

// Effect is the body of a call to the effect service.
type Effect struct {
	Key      string `json:"key"`
	Exec     string `json:"exec"`
	Attempt  string `json:"attempt"`
	Instance string `json:"instance"`
	Variant  string `json:"variant"`
}

// EffectReply is the effect service's answer.
type EffectReply struct {
	Seq int64 `json:"seq"`
}

// EffectsDDL is the table of the in-database effect: one row per execution
// of /db or /tx that committed. No unique constraint: a second execution must show
// as a second row, not as an error.
const EffectsDDL = `CREATE TABLE IF NOT EXISTS robust_effects (
    id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key   text   NOT NULL,
    exec  text   NOT NULL,
    gen   bigint NOT NULL,
    variant text NOT NULL,
    at    timestamptz NOT NULL DEFAULT clock_timestamp()
)`

package mcphttp

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/idemkit/idem"
)

// JSON-RPC error codes the wrapper answers with itself. Its own codes
// (-31090 to -31093) are outside the range JSON-RPC reserves (-32768 to
// -32000), as MCP 2026-07-28 asks of codes a specification does not define:
// that revision keeps -32000 to -32019 for legacy use and -32020 to -32099
// for codes of its own. The others are JSON-RPC's. Each error carries
// data.reason, a stable string to branch on; the errors of a call in flight
// and of a reused key carry data.type too ([TypeInProgress],
// [TypeConflict]).
const (
	// CodeKeyReused: a _meta.idempotencyKey was reused for a different call
	// (another tool, or other arguments) than the one it first named.
	// data.reason is "idempotency_key_reused", data.type
	// "idempotency_key_conflict". The tool was not run.
	CodeKeyReused = -31090
	// CodeInFlight: the call is a duplicate of one still running, which
	// did not finish within Options.Engine.Wait (data.reason "in_flight"), or
	// the call itself was cut off before it answered (data.reason
	// "cut_off": its lease was lost, its deadline passed, the server is
	// shutting down) and may still be running. data.type is
	// "idempotency_key_in_progress", and data.retryAfterMs suggests when
	// to retry with the same key; the retry then gets the original's
	// result, or runs the call once the original's claim ran out.
	CodeInFlight = -31091
	// CodeUnreplayable: the call was already executed, but its response
	// could not be recorded (it was larger than [Options.MaxRecordBytes]),
	// so it is neither run again nor replayed. data.reason is
	// "unreplayable".
	CodeUnreplayable = -31092
	// CodeUnavailable: the store could not be reached or is full, or the
	// server is shutting down (it claims nothing more, or cancelled the
	// call's request while it waited), or the call's claim ended before the
	// call began (its lease or deadline ran out), so the call was not run
	// (it never runs without a claim). data.reason is "store_unavailable";
	// data.retryAfterMs suggests when to retry.
	CodeUnavailable = -31093
	// CodeInvalidParams is JSON-RPC's invalid params, answered with
	// data.reason "invalid_idempotency_key" for a _meta.idempotencyKey that
	// is not 1 to 255 printable ASCII characters.
	CodeInvalidParams = -32602
	// CodeInvalidRequest is JSON-RPC's invalid request, answered (with
	// HTTP 400) with data.reason "unsupported_id" for a deduplicated call
	// whose numeric id is not an integer within ±(2^53-1), and
	// "duplicate_member" for one that repeats a member name. go-sdk holds
	// ids as float64 before int64, so it answers 1.5 as 1 and rounds larger
	// integers (9007199254740993 as 9007199254740992): neither the client
	// nor the wrapper could recognise the response, and the call would run
	// unrecorded. The call is not run.
	CodeInvalidRequest = -32600
)

// Types in data.type of the wrapper's errors for a call in flight and a
// reused key: stable strings to branch on, the names the closed SEP-3182
// proposal gave these errors.
const (
	TypeInProgress = "idempotency_key_in_progress"
	TypeConflict   = "idempotency_key_conflict"
)

// Reasons in data.reason of the wrapper's errors.
const (
	ReasonKeyReused = "idempotency_key_reused"
	ReasonInFlight  = "in_flight"
	// ReasonCutOff: the call was cut off before it answered (see
	// [CodeInFlight]).
	ReasonCutOff        = "cut_off"
	ReasonUnreplayable  = "unreplayable"
	ReasonUnavailable   = "store_unavailable"
	ReasonInvalidKey    = "invalid_idempotency_key"
	ReasonUnsupportedID = "unsupported_id"
	// ReasonDuplicateMember: the call's envelope, params or _meta repeat
	// a member name (see [CodeInvalidRequest]).
	ReasonDuplicateMember = "duplicate_member"
)

// supportedID reports whether id can be keyed and comes back from the
// server as sent: a string, or an integer of magnitude at most 2^53-1.
// go-sdk holds a numeric id as a float64 before making it an int64, so a
// fraction comes back truncated (1.5 as 1) and an integer beyond 2^53
// rounded (9007199254740993 as 9007199254740992), and JavaScript clients
// hold ids as float64 too: integers within ±(2^53-1) are the ones every
// JSON implementation keeps exactly.
func supportedID(id idem.RequestID) bool {
	if id.IsZero() {
		return false
	}
	if id.IsString() {
		return true
	}
	n, err := strconv.ParseInt(id.String(), 10, 64)
	return err == nil && n >= -maxSafeInteger && n <= maxSafeInteger
}

// maxSafeInteger is 2^53-1, the largest integer a float64 holds with every
// smaller one.
const maxSafeInteger = 1<<53 - 1

type rpcError struct {
	Code    int       `json:"code"`
	Message string    `json:"message"`
	Data    errorData `json:"data"`
}

type errorData struct {
	Reason       string `json:"reason"`
	Type         string `json:"type,omitempty"`
	RetryAfterMs int64  `json:"retryAfterMs,omitempty"`
}

func errorResponse(rawID json.RawMessage, e rpcError) []byte {
	data, _ := json.Marshal(e)
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(rawID)
	b.WriteString(`,"error":`)
	b.Write(data)
	b.WriteByte('}')
	return b.Bytes()
}

// wrapperError is errorResponse for replayBody: an error the wrapper made,
// never a replay.
func wrapperError(rawID json.RawMessage, e rpcError) ([]byte, bool) {
	return errorResponse(rawID, e), false
}

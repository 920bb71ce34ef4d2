package mcphttp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/idemkit/idem/agentkey"
)

// Multi round-trip calls (MCP 2026-07-28, SEP-2322, see [SessionlessProtocol]
// for the link). A tool that needs input answers round 1 with resultType
// "input_required", inputRequests and a requestState; the client retries
// the original call, under a new id, with inputResponses and the
// requestState echoed. Every round carries the
// call's key. The rounds are told apart by what the client sent back: each
// round is its own claim, keyed by the call's key and a digest of the
// round's requestState and inputResponses ([idem.ParseClientRoundKey]). So the
// input_required answer of round 1 is round 1's recorded result (a lost
// round-1 response retried replays it), round 2 runs once, and the final
// round's result is what a retry of that round gets.

// Members of a tools/call's params that belong to the round or to the key,
// not to what the call asks for: the fingerprint leaves them out, so every
// round of one call has the same fingerprint.
const (
	paramInputResponses = "inputResponses"
	paramRequestState   = "requestState"
	paramIdempotencyKey = "idempotencyKey"
)

// takeRound removes the round members from params and returns the round's
// digest: empty for a first round (neither member, or both null), else the
// hex SHA-256 of the canonical requestState and inputResponses.
func takeRound(params map[string]json.RawMessage) string {
	state, responses := params[paramRequestState], params[paramInputResponses]
	delete(params, paramRequestState)
	delete(params, paramInputResponses)
	if isAbsent(state) && isAbsent(responses) {
		return ""
	}
	h := sha256.New()
	for _, part := range []json.RawMessage{state, responses} {
		canon, err := agentkey.CanonicalJSON(orNull(part))
		if err != nil {
			// Not canonicalisable: the exact bytes still tell rounds
			// apart.
			h.Write([]byte{1})
			canon = part
		}
		h.Write(canon)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// takeParamKey removes params.idempotencyKey and returns it. present
// reports the member was there at all: a value that is not a string is an
// invalid key, not "no key".
func takeParamKey(params map[string]json.RawMessage) (key string, present bool) {
	raw, ok := params[paramIdempotencyKey]
	delete(params, paramIdempotencyKey)
	if !ok || isAbsent(raw) {
		return "", false
	}
	if json.Unmarshal(raw, &key) != nil {
		return "", true
	}
	return key, true
}

func isAbsent(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

func orNull(raw json.RawMessage) json.RawMessage {
	if isAbsent(raw) {
		return json.RawMessage("null")
	}
	return raw
}

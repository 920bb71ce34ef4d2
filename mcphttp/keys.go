package mcphttp

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/idemkit/idem/middleware"
)

// Where a call's idempotency key can come from, in the order the wrapper
// reports them.
const (
	// SourceMeta is params._meta.idempotencyKey (seed 003), what go-sdk
	// tool handlers read back with [FromCallToolRequest].
	SourceMeta = "_meta.idempotencyKey"
	// SourceParams is params.idempotencyKey, the shape of the closed
	// SEP-3182 proposal that some clients send.
	SourceParams = "params.idempotencyKey"
	// SourceHeader is the Idempotency-Key header of the HTTP POST, an
	// RFC 8941 string (or a bare token) as the [middleware] package reads
	// it.
	SourceHeader = middleware.KeyHeader
)

// ReasonConflictingKeys is data.reason of the [CodeInvalidParams] error for
// a call whose key sources name different keys.
const ReasonConflictingKeys = "conflicting_idempotency_keys"

// keySource is one place a call carried a key.
type keySource struct {
	name  string
	value string
	err   error // the value could not be read as a key at all
}

// errConflictingKeys is wrapped by the error of a call whose sources
// disagree.
var errConflictingKeys = errors.New("conflicting idempotency keys")

// callKey returns a call's idempotency key and where it came from, looking
// at every source. present is false when the call carries none. Two sources
// with different keys are an error that names both: the wrapper cannot
// know which one the client meant, and guessing could merge two calls.
func callKey(r *http.Request, c call) (key, source string, present bool, err error) {
	var found []keySource
	if c.hasKey {
		found = append(found, keySource{name: SourceMeta, value: c.idemKey})
	}
	if c.hasParamKey {
		found = append(found, keySource{name: SourceParams, value: c.paramKey})
	}
	if lines, ok := r.Header[SourceHeader]; ok {
		s := keySource{name: SourceHeader}
		if len(lines) != 1 {
			s.err = fmt.Errorf("%s appears %d times; it takes one key", SourceHeader, len(lines))
		} else if s.value, s.err = middleware.ParseKeyHeader(lines[0]); s.err != nil {
			s.err = fmt.Errorf("%s: %w", SourceHeader, s.err)
		}
		found = append(found, s)
	}
	if len(found) == 0 {
		return "", "", false, nil
	}
	first := found[0]
	for _, s := range found {
		if s.err != nil {
			return "", s.name, true, s.err
		}
		if s.value != first.value {
			return "", s.name, true, fmt.Errorf("%w: %s and %s name different keys", errConflictingKeys, first.name, s.name)
		}
	}
	return first.value, first.name, true, nil
}

// invalidKeyResponse is the [CodeInvalidParams] error of a call whose key
// is not a key, or whose sources disagree.
func invalidKeyResponse(c call, source string, err error) []byte {
	if errors.Is(err, errConflictingKeys) {
		return errorResponse(c.rawID, rpcError{
			Code: CodeInvalidParams, Message: err.Error() + "; send one key, or the same key in each",
			Data: errorData{Reason: ReasonConflictingKeys},
		})
	}
	return errorResponse(c.rawID, rpcError{
		Code: CodeInvalidParams, Message: "invalid " + source + ": " + err.Error(),
		Data: errorData{Reason: ReasonInvalidKey},
	})
}

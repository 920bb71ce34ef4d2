package mcphttp

import (
	"net/http"

	"github.com/idemkit/idem"
)

// ReasonUnscopedCookies is the data.reason of the [CodeInternalError] that
// refuses a call carrying cookies but no credential the wrapper knows, to a
// server that has not named its session cookies (Options.SessionCookies) or
// its principal (Options.Principal): the wrapper cannot tell whose call it
// is. The call was not run. It is a configuration error of the server.
const ReasonUnscopedCookies = "unscoped_cookies"

// CodeInternalError is JSON-RPC's internal error, answered with
// data.reason [ReasonUnscopedCookies] or [ReasonTransactionLimit].
const CodeInternalError = -32603

// refusal is the JSON-RPC error for a call whose key or scope could not be
// made, and the reason of its [idem.EventRefused].
func (m *wrapper) refusal(r *http.Request, c call, source string, err error) (body []byte, reason string) {
	if m.scope.Unscoped(r.Context(), err,
		"mcphttp refused a call with cookies but no known credential: set Options.SessionCookies to the names of your session cookies (an empty list if no cookie identifies a caller) or Options.Principal; logged once") {
		return errorResponse(c.rawID, rpcError{
			Code: CodeInternalError, Message: "the server cannot tell whose call this is, so it did not run it: " + err.Error(),
			Data: errorData{Reason: ReasonUnscopedCookies},
		}), idem.RefusedUnscopedCookies
	}
	return invalidKeyResponse(c, source, err), idem.RefusedInvalidKey
}

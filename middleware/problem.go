package middleware

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem types: the "type" member of the application/problem+json (RFC
// 9457) responses the middleware writes. Each URI is stable and resolves to
// this documentation. Clients branch on the type, not on the title or detail.
const (
	// TypeMissingKey (400): a protected request carries no key
	// (Idempotency-Key, or what Options.Key reads).
	TypeMissingKey = "https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeMissingKey"
	// TypeInvalidKey (400): the key is empty, longer than 255 characters, a
	// list, not printable ASCII, or not a valid structured-field string;
	// or Idempotency-Key and X-Idempotency-Key disagree.
	TypeInvalidKey = "https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeInvalidKey"
	// TypeBodyTooLarge (413): the request body is larger than
	// Options.MaxBodyBytes. The handler did not run.
	TypeBodyTooLarge = "https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeBodyTooLarge"
	// TypeBodyUnreadable (400): the request body could not be read.
	TypeBodyUnreadable = "https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeBodyUnreadable"
	// TypeMismatch (422): the key was used for a different request (another
	// fingerprint). The handler did not run. Do not retry with this key.
	TypeMismatch = "https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeMismatch"
	// TypeInFlight (409): a request with this key is still running. Retry
	// after Retry-After seconds to get its result.
	TypeInFlight = "https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeInFlight"
	// TypeUnreplayable (410): a request with this key already ran, but its
	// response was larger than Options.MaxRecordBytes and was not recorded.
	// The handler does not run again; retrying cannot help. The member
	// "original_status" holds the original response's status.
	TypeUnreplayable = "https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeUnreplayable"
	// TypeStoreUnavailable (503): the idempotency store could not be
	// reached, or is full, or the server cancelled the request before it
	// was processed (shutting down, or its claim's lease or deadline ran
	// out before the handler began). The handler did not run. Retry after
	// Retry-After seconds.
	TypeStoreUnavailable = "https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeStoreUnavailable"
	// TypeCommitFailed (503): the request's transaction (Options.InTransaction,
	// or [Commit]'s record function) did not commit, or the outcome of its
	// commit is unknown (the connection was lost during it). Retry after
	// Retry-After seconds with the same key: the retry replays the result
	// if the commit went through, and runs the handler again if it did not.
	TypeCommitFailed = "https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeCommitFailed"
	// TypeTransactionLimit (500): under Options.InTransaction, PostgreSQL
	// ended the request's transaction at one of its bounds (the handler
	// paused between two statements longer than
	// Options.Engine.IdleInTransaction, or a statement ran longer than its
	// statement_timeout), so nothing of the request took effect. The
	// detail names the bound and the setting to raise. A retry runs the
	// handler again, and meets the same bound if it takes as long: no
	// Retry-After.
	TypeTransactionLimit = "https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeTransactionLimit"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type           string `json:"type"`
	Title          string `json:"title"`
	Status         int    `json:"status"`
	Detail         string `json:"detail,omitempty"`
	OriginalStatus int    `json:"original_status,omitempty"`
}

var titles = map[string]string{
	TypeMissingKey:       "Idempotency-Key required",
	TypeUnscopedCookies:  "Caller cannot be identified",
	TypeInvalidKey:       "Invalid Idempotency-Key",
	TypeBodyTooLarge:     "Request body too large",
	TypeBodyUnreadable:   "Request body unreadable",
	TypeMismatch:         "Idempotency-Key reused for a different request",
	TypeInFlight:         "Request with this Idempotency-Key in progress",
	TypeUnreplayable:     "Response not replayable",
	TypeStoreUnavailable: "Idempotency store unavailable",
	TypeCommitFailed:     "Commit failed",
	TypeTransactionLimit: "Transaction ended by the database",
}

// writeProblem writes a problem+json response. retryAfter, when not empty,
// is the Retry-After value in seconds.
func writeProblem(w http.ResponseWriter, p problem, retryAfter string) {
	p.Title = titles[p.Type]
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: strings and ints
		body = []byte(`{"type":"about:blank","status":500}`)
	}
	body = append(body, '\n') // a body read at a terminal ends its line
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	if retryAfter != "" {
		h.Set("Retry-After", retryAfter)
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// retryAfterSeconds renders d as a Retry-After delay: whole seconds, rounded
// up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}

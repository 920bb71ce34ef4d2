package middleware

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem"
)

// EventKind says what happened to a protected request.
type EventKind int

// Event kinds, in roughly the order a request meets them.
const (
	// EventClaimed: the request claimed its key; the handler runs.
	// Duration is the claim's latency (including any wait).
	EventClaimed EventKind = iota + 1
	// EventReplayed: the key was completed; the recorded response was
	// replayed (or, if unreplayable, answered 410). Duration is the claim's
	// latency (including any wait).
	EventReplayed
	// EventInFlight: the key was still claimed by another request after
	// the wait; answered 409. Duration is the time spent claiming and
	// waiting.
	EventInFlight
	// EventMismatch: the key was used for a different request; answered
	// 422.
	EventMismatch
	// EventCompleted: the handler's response was recorded. Duration is the
	// handler's run time. Status is the recorded status.
	EventCompleted
	// EventReleased: the key was released (panic, a status the record
	// policy does not record, or a failed [Commit]), so a retry runs the
	// handler again. Duration is the handler's run time.
	EventReleased
	// EventStale: the claim was lost while the handler ran (its lease ran
	// out and another request took the key over, or an operator forgot
	// it). The handler's context was cancelled with [ErrLeaseLost], and
	// its response is not recorded.
	EventStale
	// EventStoreError: a store call failed. Op names it ("claim",
	// "renew", "complete", "release"); Err holds the error.
	EventStoreError
)

func (k EventKind) String() string {
	switch k {
	case EventClaimed:
		return "claimed"
	case EventReplayed:
		return "replayed"
	case EventInFlight:
		return "in flight"
	case EventMismatch:
		return "mismatch"
	case EventCompleted:
		return "completed"
	case EventReleased:
		return "released"
	case EventStale:
		return "stale"
	case EventStoreError:
		return "store error"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event describes something that happened to a protected request.
type Event struct {
	Kind EventKind
	// Scope and Key identify the request's key. They may carry client
	// data: hash them before using them as metric labels.
	Scope string
	Key   idem.Key
	// Status is the response status, when there is one.
	Status int
	// Duration is documented per [EventKind]; zero when none applies.
	Duration time.Duration
	// Op is the store operation of an EventStoreError.
	Op string
	// Err is the error of an EventStoreError or EventStale.
	Err error
}

// Observer receives events, for metrics: for example a Prometheus counter
// by r.Pattern and e.Kind, and a histogram of e.Duration.
type Observer func(r *http.Request, e Event)

// keyHash is how keys appear in logs above debug level: the first 16 hex
// digits of SHA-256 over scope and key, enough to correlate log lines
// without disclosing a client's key.
func keyHash(scope string, key idem.Key) string {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(key.String()))
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:8])
}

package middleware

import (
	"net/http"

	"github.com/idemkit/idem"
)

// Observer receives the [idem.Event]s of protected requests, for metrics:
// for example a Prometheus counter by r.Pattern and e.Kind, and a histogram
// of e.Duration.
type Observer func(r *http.Request, e idem.Event)

package mcphttp

import (
	"net/http"
	"testing"

	"github.com/idemkit/idem/middleware"
)

// The upstream's middleware must read the forwarded key as the same key,
// whatever printable characters it holds.
func TestSetHeadersKeyRoundTripsThroughTheMiddlewareParser(t *testing.T) {
	t.Parallel()
	keys := []string{
		"8e03978e40d543e8bc936894a57f9324",
		"order 42",
		`"quoted"`,
		`back\slash`,
		"a,b",
		" leading and trailing ",
		`\"`,
	}
	for _, k := range keys {
		h := http.Header{}
		Meta{IdempotencyKey: k}.SetHeaders(h)
		got, err := middleware.ParseKeyHeader(h.Get(IdempotencyKeyHeader))
		if err != nil || got != k {
			t.Errorf("key %q sent as %q parses as %q, %v", k, h.Get(IdempotencyKeyHeader), got, err)
		}
	}
}

package mcphttp_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
)

// TestLargeNotificationThenStreamEnds: a notification larger than
// MaxRecordBytes, then the call's SSE stream ends without its response. The
// response was never seen, so it was not "too large to record": the key
// must not be marked unreplayable (which would refuse every retry for the
// retention) but left to its lease, as any stream that ends early.
func TestLargeNotificationThenStreamEnds(t *testing.T) {
	t.Parallel()
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "text/event-stream")
		if req.Method != "tools/call" {
			io.WriteString(w, `event: message`+"\n"+`data: {"jsonrpc":"2.0","id":`+string(req.ID)+`,"result":{}}`+"\n\n")
			return
		}
		big := strings.Repeat("x", 4096)
		io.WriteString(w, `event: message`+"\n"+`data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`+big+`"}}`+"\n\n")
		// The stream ends here: the session closed, or the server
		// closed it for the client to resume.
	})
	h := mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{MaxRecordBytes: 1024, Engine: engine.Options{Wait: -1}})(inner)
	call := func(id int) string {
		body := `{"jsonrpc":"2.0","id":` + string(rune('0'+id)) + `,"method":"tools/call","params":{"name":"t","_meta":{"idempotencyKey":"big-notification"}}}`
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Body.String()
	}
	call(1)
	retry := call(2)
	if !strings.Contains(retry, `"code":`+strconv.Itoa(mcphttp.CodeInFlight)) {
		t.Fatalf("retry got %s, want code %d (in flight: the claim is left to its lease)", retry, mcphttp.CodeInFlight)
	}
}

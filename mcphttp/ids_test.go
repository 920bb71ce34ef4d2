package mcphttp_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/mcphttp"
)

// Numeric ids that go-sdk cannot hold (fractions, beyond int64) are refused
// before the tool runs: go-sdk would answer them under another id, and the
// call would run unrecorded. Integral ids in any spelling work.
func TestUnsupportedIDsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	session := h.initialize(t)
	for _, id := range []string{`1.5`, `123456789012345678901234567890`, `-1e300`} {
		resp := h.post(t, session, callBody(json.RawMessage(id), "echo", map[string]any{"text": "id " + id}, nil), nil)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got struct {
			ID    json.RawMessage
			Error struct {
				Code int
				Data struct{ Reason string }
			}
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("id %s: %d %s: %v", id, resp.StatusCode, body, err)
		}
		if resp.StatusCode != http.StatusBadRequest || got.Error.Code != mcphttp.CodeInvalidRequest || got.Error.Data.Reason != mcphttp.ReasonUnsupportedID || !bytes.Equal(got.ID, []byte(id)) {
			t.Errorf("id %s: %d %s, want 400 with code %d reason %s and the id echoed", id, resp.StatusCode, body, mcphttp.CodeInvalidRequest, mcphttp.ReasonUnsupportedID)
		}
		if n := h.runs.get("echo:id " + id); n != 0 {
			t.Errorf("id %s: the tool ran %d times", id, n)
		}
	}
	// 2.0 is the integer 2: deduplicated like any id.
	for range 2 {
		msgs := readMessages(t, h.post(t, session, callBody(json.RawMessage(`2.0`), "echo", map[string]any{"text": "two"}, nil), nil))
		if len(msgs) != 1 || msgs[0].text() != "echo two #1" {
			t.Fatalf("id 2.0: %+v", msgs)
		}
	}
}

// TestUnsafeIntegerIDsRefused: go-sdk holds a numeric id as a float64 before
// making it an int64, so an integer beyond 2^53 comes back rounded
// (9007199254740993 is answered as 9007199254740992). Such ids passed the
// int64 check: the tool ran, the wrapper never saw the response to the
// call's id, and the client got an answer under an id it never sent. They are
// refused now, like the other ids no server answers under; the largest safe
// integers work.
func TestUnsafeIntegerIDsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	session := h.initialize(t)
	for _, id := range []string{`9007199254740993`, `-9007199254740993`, `9223372036854775807`, `9007199254740992`} {
		meta := map[string]any{"idempotencyKey": "unsafe-" + id}
		resp := h.post(t, session, callBody(json.RawMessage(id), "echo", map[string]any{"text": "id " + id}, meta), nil)
		if resp.StatusCode == http.StatusOK {
			msgs := readMessages(t, resp)
			t.Errorf("id %s: run and answered %+v, want it refused before the tool runs", id, msgs)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(body, []byte(mcphttp.ReasonUnsupportedID)) {
			t.Errorf("id %s: %d %s, want 400 %s", id, resp.StatusCode, body, mcphttp.ReasonUnsupportedID)
		}
		if n := h.runs.get("echo:id " + id); n != 0 {
			t.Errorf("id %s: the tool ran %d times", id, n)
		}
	}
	for _, id := range []string{`9007199254740991`, `-9007199254740991`} {
		for range 2 {
			got := h.call(t, session, json.RawMessage(id), "echo", map[string]any{"text": "safe " + id}, nil)
			if got.text() != "echo safe "+id+" #"+strconv.Itoa(h.runs.seq) || h.runs.get("echo:safe "+id) != 1 {
				t.Fatalf("id %s: %s, runs %d", id, got.raw, h.runs.get("echo:safe "+id))
			}
		}
	}
}

// TestLongStringIDRuns: a valid call whose string id is long (1 KiB, within
// what JSON-RPC allows and go-sdk answers under) is keyed by a digest of the
// id, so its key stays within idem.MaxKeyLen: it runs once and its retry
// replays. The id as is would make a key longer than MaxKeyLen, and the
// call would be refused with -32602 without running.
func TestLongStringIDRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	session := h.initialize(t)
	for _, n := range []int{65, 1024, 64 << 10} {
		id := strings.Repeat("i", n)
		text := "long id " + strconv.Itoa(n)
		first := h.call(t, session, id, "echo", map[string]any{"text": text}, nil)
		retry := h.call(t, session, id, "echo", map[string]any{"text": text}, nil)
		if first.Error != nil || first.text() == "" || retry.text() != first.text() {
			t.Errorf("id of %d bytes: first %.300s, retry %.300s; want a result, replayed", n, first.raw[len(first.raw)-min(len(first.raw), 300):], retry.raw[len(retry.raw)-min(len(retry.raw), 300):])
		}
		if runs := h.runs.get("echo:" + text); runs != 1 {
			t.Errorf("id of %d bytes: the tool ran %d times, want 1", n, runs)
		}
	}
	// Two long ids that differ only at the end are two calls.
	a, b := strings.Repeat("j", 2000)+"a", strings.Repeat("j", 2000)+"b"
	h.call(t, session, a, "echo", map[string]any{"text": "twins"}, nil)
	h.call(t, session, b, "echo", map[string]any{"text": "twins"}, nil)
	if runs := h.runs.get("echo:twins"); runs != 2 {
		t.Errorf("two long ids differing in their last byte ran the tool %d times, want 2", runs)
	}
}

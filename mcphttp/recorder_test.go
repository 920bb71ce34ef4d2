package mcphttp

import (
	"bytes"
	"testing"

	"github.com/idemkit/idem"
)

// FuzzSSEScanner: however the inner handler splits its writes, and
// whatever events come before, the scanner finds the call's response in an
// SSE stream, byte for byte, and only that.
func FuzzSSEScanner(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}`), []byte{3, 17, 40}, uint8(0))
	f.Add([]byte(`{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage"}`), []byte{1}, uint8(1))
	f.Add([]byte("not json\r\nat all"), []byte{0, 0, 5}, uint8(2))
	f.Fuzz(func(t *testing.T, noise []byte, splits []byte, variant uint8) {
		final := []byte(`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"a\nb"}]}}`)
		var stream bytes.Buffer
		// Noise as an event of another type, and as a message event
		// (split into data lines at its line breaks).
		stream.WriteString("event: ping\ndata: ")
		stream.Write(bytes.ReplaceAll(bytes.ReplaceAll(noise, []byte("\r"), nil), []byte("\n"), nil))
		stream.WriteString("\n\n")
		stream.WriteString("event: message\n")
		for _, line := range bytes.Split(bytes.ReplaceAll(noise, []byte("\r"), nil), []byte("\n")) {
			stream.WriteString("data: ")
			stream.Write(line)
			stream.WriteString("\n")
		}
		stream.WriteString("\n")
		if variant%2 == 0 {
			stream.WriteString("id: 1\nevent: message\n")
		}
		stream.WriteString("data: ")
		stream.Write(final)
		stream.WriteString("\n\n")
		data := stream.Bytes()

		s := newScanner(idem.IntRequestID(7), 1<<20, "text/event-stream; charset=utf-8")
		for _, n := range splits {
			k := min(int(n), len(data))
			s.write(data[:k])
			data = data[k:]
		}
		s.write(data)
		s.finish()
		noiseIsFinal, _ := responseTo(bytes.ReplaceAll(bytes.ReplaceAll(noise, []byte("\r"), nil), []byte("\n"), []byte("\n")), idem.IntRequestID(7))
		if noiseIsFinal {
			return // the noise itself answers id 7; first one wins
		}
		if !bytes.Equal(s.final, final) || s.finalError {
			t.Fatalf("found %q (error %v), want %q", s.final, s.finalError, final)
		}
	})
}

func TestScannerJSONBodies(t *testing.T) {
	id := idem.StringRequestID("x")
	tests := []struct {
		body    string
		found   bool
		isError bool
	}{
		{`{"jsonrpc":"2.0","id":"x","result":{}}`, true, false},
		{`{"jsonrpc":"2.0","id":"x","error":{"code":-1,"message":"m"}}`, true, true},
		{`[{"jsonrpc":"2.0","id":"y","result":{}},{"jsonrpc":"2.0","id":"x","result":{"ok":true}}]`, true, false},
		{`{"jsonrpc":"2.0","id":"x","method":"ping"}`, false, false},
		{`{"jsonrpc":"2.0","id":"y","result":{}}`, false, false},
		{`{"jsonrpc":"2.0","id":"x"}`, false, false},
	}
	for _, tt := range tests {
		s := newScanner(id, 1<<10, "application/json")
		s.write([]byte(tt.body))
		s.finish()
		if (s.final != nil) != tt.found || s.finalError != tt.isError {
			t.Errorf("%s: found %q error %v", tt.body, s.final, s.finalError)
		}
	}
	s := newScanner(id, 8, "application/json")
	s.write([]byte(`{"jsonrpc":"2.0","id":"x","result":{}}`))
	s.finish()
	if s.final != nil || !s.oversize {
		t.Errorf("oversize body: final %q oversize %v", s.final, s.oversize)
	}
}

// TestNamesMethod: an oversized message is told apart from the response by
// a top-level "method" in its first bytes, however the rest is cut off.
func TestNamesMethod(t *testing.T) {
	for prefix, want := range map[string]bool{
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"xxx`: true,
		`{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","par`:          true,
		`{ "method" : "x"`: true,
		`{"jsonrpc":"2.0","id":1,"result":{"method":"not top-level","content":[`: false,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"xx`: false,
		`{"a\"method":1,"b":"method","c":["method"],"d":{"method":1}`:            false,
		`{"params":{"data":"` + string(bytes.Repeat([]byte("x"), 64)):            false,
		``:       false,
		`{"meth`: false,
	} {
		if got := namesMethod([]byte(prefix)); got != want {
			t.Errorf("namesMethod(%q) = %v, want %v", prefix, got, want)
		}
	}
}

package adapter

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// sink records what a CaptureWriter shows it, and holds back what it is
// told to.
type sink struct {
	status   int
	captured strings.Builder
	holdHead bool
	holdBody bool
}

func (s *sink) Begin(status int, _ http.Header) bool { s.status = status; return !s.holdHead }
func (s *sink) Capture(p []byte) bool                { s.captured.Write(p); return !s.holdBody }
func (s *sink) Holding() bool                        { return s.holdBody }

// hangUp is a client that takes the first n bytes and then is gone.
type hangUp struct {
	*httptest.ResponseRecorder
	n       int
	flushes int
}

var errGone = errors.New("client gone")

func (h *hangUp) Write(p []byte) (int, error) {
	if h.Body.Len()+len(p) > h.n {
		return 0, errGone
	}
	return h.ResponseRecorder.Write(p)
}

func (h *hangUp) FlushError() error {
	if h.Body.Len() >= h.n {
		return errGone
	}
	h.flushes++
	return nil
}

func TestCaptureWriterPassesThroughAndCaptures(t *testing.T) {
	rec := httptest.NewRecorder()
	s := &sink{}
	c := &CaptureWriter{W: rec, Sink: s}
	c.WriteHeader(http.StatusCreated)
	if _, err := c.Write([]byte("hello ")); err != nil {
		t.Fatal(err)
	}
	c.Flush()
	if !rec.Flushed {
		t.Error("Flush did not reach the client's writer")
	}
	if _, err := c.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	if c.Status != http.StatusCreated || s.status != http.StatusCreated || rec.Code != http.StatusCreated {
		t.Errorf("status %d, sink %d, client %d; want 201 for all", c.Status, s.status, rec.Code)
	}
	if got := rec.Body.String(); got != "hello world" {
		t.Errorf("client got %q", got)
	}
	if got := s.captured.String(); got != "hello world" {
		t.Errorf("sink captured %q", got)
	}
	if c.Unwrap() != rec {
		t.Error("Unwrap does not return the client's writer")
	}
}

// statusLog is a client's writer that logs the statuses it is sent
// (httptest.ResponseRecorder takes a 1xx for the final status).
type statusLog struct {
	http.ResponseWriter
	sent []int
}

func (l *statusLog) WriteHeader(code int) { l.sent = append(l.sent, code) }

// An informational status is sent and is not the final one; a second
// final status is passed on (net/http reports it as superfluous) and
// changes nothing.
func TestCaptureWriterStatuses(t *testing.T) {
	client := &statusLog{ResponseWriter: httptest.NewRecorder()}
	s := &sink{}
	c := &CaptureWriter{W: client, Sink: s}
	c.WriteHeader(http.StatusEarlyHints)
	if c.Status != 0 || s.status != 0 {
		t.Fatalf("103 taken as the final status: Status %d, sink %d", c.Status, s.status)
	}
	c.WriteHeader(http.StatusCreated)
	c.WriteHeader(http.StatusTeapot)
	if c.Status != http.StatusCreated || s.status != http.StatusCreated {
		t.Errorf("final status %d, sink %d; want 201", c.Status, s.status)
	}
	if want := []int{103, 201, 418}; !slices.Equal(client.sent, want) {
		t.Errorf("client was sent %v, want %v", client.sent, want)
	}
}

func TestCaptureWriterWriteWithoutHeaderIs200(t *testing.T) {
	rec := httptest.NewRecorder()
	s := &sink{}
	c := &CaptureWriter{W: rec, Sink: s}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if c.Status != http.StatusOK || s.status != http.StatusOK || rec.Code != http.StatusOK {
		t.Errorf("status %d, sink %d, client %d; want 200", c.Status, s.status, rec.Code)
	}
}

// A client that hangs up: the handler is not told (its writes succeed),
// everything it writes is captured, nothing more is sent; with ReportGone
// it is told, by the first write's error.
func TestCaptureWriterClientGone(t *testing.T) {
	for _, report := range []bool{false, true} {
		client := &hangUp{ResponseRecorder: httptest.NewRecorder(), n: 4}
		s := &sink{}
		c := &CaptureWriter{W: client, Sink: s, ReportGone: report}
		if _, err := c.Write([]byte("abcd")); err != nil {
			t.Fatalf("report %v: first write: %v", report, err)
		}
		n, err := c.Write([]byte("efgh"))
		switch {
		case report && !errors.Is(err, errGone):
			t.Errorf("report %v: write to a gone client: %d, %v; want errGone", report, n, err)
		case !report && (err != nil || n != 4):
			t.Errorf("report %v: write to a gone client: %d, %v; want 4, nil", report, n, err)
		}
		if err := c.FlushError(); report != (err != nil) {
			t.Errorf("report %v: flush to a gone client: %v", report, err)
		}
		_, _ = c.Write([]byte("ijkl"))
		if !errors.Is(c.Gone, errGone) {
			t.Errorf("report %v: Gone = %v", report, c.Gone)
		}
		if got := client.Body.String(); got != "abcd" {
			t.Errorf("report %v: the gone client got %q", report, got)
		}
		if got := s.captured.String(); got != "abcdefghijkl" {
			t.Errorf("report %v: captured %q, want every write", report, got)
		}
	}
}

// A flush that fails marks the client gone too.
func TestCaptureWriterFlushFailureIsGone(t *testing.T) {
	client := &hangUp{ResponseRecorder: httptest.NewRecorder(), n: 0}
	c := &CaptureWriter{W: client, Sink: &sink{}}
	c.WriteHeader(http.StatusOK)
	if err := c.FlushError(); err != nil {
		t.Fatalf("flush without ReportGone: %v", err)
	}
	if !errors.Is(c.Gone, errGone) {
		t.Fatalf("Gone = %v after a failed flush", c.Gone)
	}
}

// What the Sink holds back is neither sent nor flushed, and the handler's
// writes succeed.
func TestCaptureWriterHolding(t *testing.T) {
	client := &hangUp{ResponseRecorder: httptest.NewRecorder(), n: 1 << 20}
	s := &sink{holdHead: true, holdBody: true}
	c := &CaptureWriter{W: client, Sink: s}
	c.WriteHeader(http.StatusAccepted)
	if n, err := c.Write([]byte("held")); err != nil || n != 4 {
		t.Fatalf("held write: %d, %v", n, err)
	}
	if err := c.FlushError(); err != nil {
		t.Fatal(err)
	}
	if client.Body.Len() != 0 || client.flushes != 0 || client.Code != http.StatusOK /* recorder's default: never written */ {
		t.Errorf("held answer reached the client: body %q, %d flushes, code %d", client.Body, client.flushes, client.Code)
	}
	if c.Status != http.StatusAccepted || s.captured.String() != "held" {
		t.Errorf("status %d, captured %q", c.Status, s.captured.String())
	}
}

// A writer without flushing reports http.ErrNotSupported and is not gone.
func TestCaptureWriterFlushNotSupported(t *testing.T) {
	c := &CaptureWriter{W: struct{ http.ResponseWriter }{httptest.NewRecorder()}, Sink: &sink{}}
	if err := c.FlushError(); !errors.Is(err, http.ErrNotSupported) {
		t.Fatalf("FlushError = %v, want ErrNotSupported", err)
	}
	if c.Gone != nil {
		t.Fatalf("Gone = %v", c.Gone)
	}
}

// wireLog is a client's writer that logs everything that reaches it.
type wireLog struct {
	header http.Header
	sent   []string
}

func (l *wireLog) Header() http.Header {
	if l.header == nil {
		l.header = http.Header{}
	}
	return l.header
}
func (l *wireLog) WriteHeader(code int) { l.sent = append(l.sent, "status "+http.StatusText(code)) }
func (l *wireLog) Write(p []byte) (int, error) {
	l.sent = append(l.sent, "body "+string(p))
	return len(p), nil
}
func (l *wireLog) FlushError() error { l.sent = append(l.sent, "flush"); return nil }

// While the Sink holds the answer back, nothing the handler does reaches
// the client, in whatever order it calls the writer: not a second status
// (ignored, as net/http ignores it), not an informational one (it would
// send the headers set so far), not a flush. The first final status is
// the answer's.
func TestCaptureWriterHoldingKeepsEverything(t *testing.T) {
	for name, handler := range map[string]func(w http.ResponseWriter){
		"status twice": func(w http.ResponseWriter) {
			w.Header().Set("Location", "/invoices/1")
			w.WriteHeader(http.StatusCreated)
			http.Error(w, "oops", http.StatusInternalServerError)
		},
		"write then status": func(w http.ResponseWriter) {
			_, _ = w.Write([]byte("{}"))
			w.Header().Set("Location", "/invoices/1")
			w.WriteHeader(http.StatusCreated)
		},
		"flushes": func(w http.ResponseWriter) {
			w.(http.Flusher).Flush()
			w.WriteHeader(http.StatusCreated)
			_ = http.NewResponseController(w).Flush()
			w.WriteHeader(http.StatusAccepted)
			w.(http.Flusher).Flush()
		},
		"early hints": func(w http.ResponseWriter) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusCreated)
		},
	} {
		client := &wireLog{}
		s := &sink{holdHead: true, holdBody: true}
		c := &CaptureWriter{W: client, Sink: s}
		handler(c)
		if len(client.sent) > 0 {
			t.Errorf("%s: while held, the client was sent %q", name, client.sent)
		}
		want := http.StatusCreated
		if name == "write then status" || name == "flushes" {
			want = http.StatusOK // implied by the first write or flush, as net/http does
		}
		if c.Status != want || s.status != want {
			t.Errorf("%s: status %d, sink %d; want %d, the first final one", name, c.Status, s.status, want)
		}
	}
}

package mcphttp

import (
	"net/http"
	"sync"
	"time"
)

// sessionCalls tracks the deduplicated calls the inner handler is running,
// by Mcp-Session-Id, so that a DELETE of their session waits for them.
//
// Closing a session while one of its calls runs loses the call's answer:
// go-sdk lets the tool finish, but drops its result with the session and
// ends the call's POST without a response. The client that closes a session
// mid-call is typically one whose connection dropped, and it retries the
// call from a new session; the retry must get the tool's answer, not run the
// tool again. So the wrapper passes a session's DELETE to the inner handler
// only once the calls it runs on that session answered (their answers are
// then recorded), for at most Options.Engine.Wait.
type sessionCalls struct {
	mu    sync.Mutex
	calls map[string]map[*runningCall]struct{}
}

type runningCall struct{ done chan struct{} }

// start registers a call running on session and returns the function that
// ends it. An empty session registers nothing.
func (s *sessionCalls) start(session string) (end func()) {
	if session == "" {
		return func() {}
	}
	c := &runningCall{done: make(chan struct{})}
	s.mu.Lock()
	if s.calls == nil {
		s.calls = map[string]map[*runningCall]struct{}{}
	}
	if s.calls[session] == nil {
		s.calls[session] = map[*runningCall]struct{}{}
	}
	s.calls[session][c] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.calls[session], c)
		if len(s.calls[session]) == 0 {
			delete(s.calls, session)
		}
		s.mu.Unlock()
		close(c.done)
	}
}

// running returns the done channels of the calls running on session now.
func (s *sessionCalls) running(session string) []chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	var done []chan struct{}
	for c := range s.calls[session] {
		done = append(done, c.done)
	}
	return done
}

// holdDelete waits, for at most wait, until the calls running on the
// session a DELETE names when it arrives have answered, or until the
// DELETE's client goes away. Calls that start on the session meanwhile are
// not waited for. A call still running when the wait ends loses its answer
// to the closed session; its claim is then left to its lease (see
// recorder.verdict), never released.
func (m *wrapper) holdDelete(r *http.Request) {
	if m.wait <= 0 {
		return
	}
	done := m.sessions.running(r.Header.Get("Mcp-Session-Id"))
	if len(done) == 0 {
		return
	}
	timer := time.NewTimer(m.wait)
	defer timer.Stop()
	for _, d := range done {
		select {
		case <-d:
		case <-timer.C:
			return
		case <-r.Context().Done():
			return
		}
	}
}

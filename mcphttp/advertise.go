package mcphttp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/idemkit/idem"
)

// The wrapper advertises itself ([ExtensionID]) in the answers to the
// requests with which a client learns what a server can do: initialize
// (before SessionlessProtocol, in capabilities.experimental) and server/discover
// (from it on, in capabilities.extensions). It adds its member to the inner
// handler's answer and changes nothing else.
const methodInitialize = "initialize"

// retentionReporter is a store that says how long it keeps results
// (memstore and pgstore do): negative means until forgotten.
type retentionReporter interface {
	Retention() time.Duration
}

// extensionSettings is the settings object of [ExtensionID].
func extensionSettings(methods map[string]bool, store idem.Store) json.RawMessage {
	settings := struct {
		Methods          []string `json:"methods"`
		KeySources       []string `json:"keySources"`
		RetentionSeconds int64    `json:"retentionSeconds,omitempty"`
		ReplayedMeta     string   `json:"replayedMeta"`
	}{
		KeySources:   []string{SourceMeta, SourceParams, SourceHeader, SourceParamHeader},
		ReplayedMeta: ReplayedMetaKey,
	}
	for m := range methods {
		settings.Methods = append(settings.Methods, m)
	}
	slices.Sort(settings.Methods)
	if r, ok := store.(retentionReporter); ok && r.Retention() > 0 {
		settings.RetentionSeconds = int64(r.Retention() / time.Second)
	}
	b, _ := json.Marshal(settings)
	return b
}

// advertised reports whether body is an initialize or a server/discover
// request, and returns its id.
func advertised(body []byte) (method string, id idem.RequestID, ok bool) {
	env, _, err := members(bytes.TrimSpace(body))
	if err != nil {
		return "", id, false
	}
	if json.Unmarshal(env["method"], &method) != nil || (method != methodInitialize && method != probeDiscover) {
		return "", id, false
	}
	id, err = idem.ParseRequestID(env["id"])
	return method, id, err == nil
}

// advertise serves an initialize or server/discover request through the
// inner handler and adds [ExtensionID] to the capabilities of its answer.
// The answer is held until the inner handler returns (it is one message),
// up to MaxRecordBytes; a longer one passes unchanged.
func (m *wrapper) advertise(w http.ResponseWriter, r *http.Request, method string, id idem.RequestID) {
	aw := &advertiseWriter{w: w, limit: m.maxRecord, buf: newResponseBuffer(m.maxRecord + 1)}
	m.next.ServeHTTP(aw, r)
	if aw.passing {
		return
	}
	capt := aw.buf
	body := capt.body.Bytes()
	where := "experimental"
	if method == probeDiscover {
		where = "extensions"
	}
	add := func(msg []byte) []byte {
		if ok, isErr := responseTo(msg, id); !ok || isErr {
			return msg
		}
		out, err := addCapability(msg, where, m.extension)
		if err != nil {
			return msg
		}
		return out
	}
	if isSSE(capt.header.Get("Content-Type")) {
		body = rewriteSSEData(body, add)
	} else if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '{' {
		body = add(t)
	}
	if capt.header.Get("Content-Length") != "" {
		capt.header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	capt.body.Reset()
	capt.body.Write(body)
	if capt.status == 0 {
		capt.status = http.StatusOK
	}
	capt.writeTo(w)
}

// addCapability returns the JSON-RPC response msg with
// result.capabilities[where][ExtensionID] set to settings.
func addCapability(msg []byte, where string, settings json.RawMessage) ([]byte, error) {
	result, _ := memberOf(msg, "result")
	caps, ok := memberOf(result, "capabilities")
	if !ok {
		return nil, errNotObject
	}
	group, _ := memberOf(caps, where)
	group, err := setMember(group, ExtensionID, settings)
	if err == nil {
		caps, err = setMember(caps, where, group)
	}
	if err == nil {
		result, err = setMember(result, "capabilities", caps)
	}
	if err != nil {
		return nil, err
	}
	return setMember(msg, "result", result)
}

// rewriteSSEData returns the SSE stream body with the value of each data
// line replaced by rewrite(value); line endings and every other line are
// kept. A message is one data line in every MCP server seen.
func rewriteSSEData(body []byte, rewrite func([]byte) []byte) []byte {
	var out bytes.Buffer
	for len(body) > 0 {
		line, rest, found := bytes.Cut(body, []byte("\n"))
		body = rest
		content, cr := bytes.CutSuffix(line, []byte("\r"))
		if value, ok := bytes.CutPrefix(content, []byte("data:")); ok {
			value = bytes.TrimPrefix(value, []byte(" "))
			out.WriteString("data: ")
			out.Write(rewrite(value))
			if cr {
				out.WriteByte('\r')
			}
		} else {
			out.Write(line)
		}
		if found {
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}

// advertiseWriter holds the inner handler's answer to an initialize or
// server/discover in buf; past limit it sends what it held and passes the
// rest through.
type advertiseWriter struct {
	w       http.ResponseWriter
	limit   int
	buf     *responseBuffer
	passing bool
}

func (a *advertiseWriter) Header() http.Header {
	if a.passing {
		return a.w.Header()
	}
	return a.buf.Header()
}

func (a *advertiseWriter) WriteHeader(code int) {
	if a.passing {
		a.w.WriteHeader(code)
		return
	}
	a.buf.WriteHeader(code)
}

func (a *advertiseWriter) Write(p []byte) (int, error) {
	if a.passing {
		return a.w.Write(p)
	}
	if a.buf.body.Len()+len(p) <= a.limit {
		return a.buf.Write(p)
	}
	a.passing = true
	a.buf.writeTo(a.w)
	return a.w.Write(p)
}

// Flush is held back with the answer, and passes once the answer does.
func (a *advertiseWriter) Flush() {
	if a.passing {
		_ = http.NewResponseController(a.w).Flush()
	}
}

var _ http.Flusher = (*advertiseWriter)(nil)

package mcphttp

import (
	"bytes"
	"net/http"

	"github.com/idemkit/idem"
)

// Probe methods: the one request every MCP server answers without effect,
// by protocol revision. SessionlessProtocol removed ping and made server/discover
// mandatory.
const (
	probePing     = "ping"
	probeDiscover = "server/discover"
)

// probeMethod is the method that probes a call made at the call's
// protocol version.
func probeMethod(r *http.Request, c call) string {
	if modern(r, c) {
		return probeDiscover
	}
	return probePing
}

// probe asks the inner handler whether it accepts the request, without
// running the call: it sends the same HTTP request (method, URL, headers,
// session, credentials, context) with the body replaced by a probe under
// the same id and _meta: ping, or server/discover from SessionlessProtocol on
// (with Mcp-Method saying so). Both have no effect and every server of
// their revision answers them, so the inner handler's answer is its verdict
// on everything but the call itself: Host and Origin checks,
// authentication, Content-Type and Accept, the protocol version and its
// _meta, the session, and a duplicate of an id still in flight. accepted
// reports a JSON-RPC result to the probe; otherwise the captured answer is
// the inner handler's rejection, for the client as is, and the rejection is
// logged and reported as [idem.EventRejected].
func (m *wrapper) probe(r *http.Request, c call) (*responseBuffer, bool) {
	method := probeMethod(r, c)
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(c.rawID)
	b.WriteString(`,"method":"` + method + `"`)
	if c.meta != nil {
		b.WriteString(`,"params":{"_meta":`)
		b.Write(c.meta)
		b.WriteByte('}')
	}
	b.WriteByte('}')
	// A modern call reaches the probe only with its Mcp-Method header
	// (headersAgree), which sibling sets to the probe's method.
	pr := sibling(r.Context(), r, b.Bytes(), method)
	capt := newResponseBuffer(m.maxRecord)
	m.next.ServeHTTP(capt, pr)
	if capt.status == 0 {
		capt.status = http.StatusOK
	}
	accepted := false
	if capt.status == http.StatusOK {
		s := newScanner(c.id, m.maxRecord, capt.header.Get("Content-Type"))
		s.write(capt.body.Bytes())
		if s.sse {
			s.write([]byte("\n\n")) // dispatch a last event left unterminated
		}
		s.finish()
		accepted = s.final != nil && !s.finalError
	}
	if !accepted {
		m.log.Info("mcphttp: the inner handler refused the request; its answer goes to the client", "probe", method, "status", capt.status)
		m.observe(r, idem.Event{Kind: idem.EventRejected, Status: capt.status, Adapter: AdapterName})
	}
	return capt, accepted
}

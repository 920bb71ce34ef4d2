package mcphttp

import (
	"context"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem/internal/adapter"
)

// DerivedKeyHeader is the request header through which the wrapper hands a
// deduplicated call's forwarded key (see [Meta.IdempotencyKey]) to the inner
// handler, where [FromCallToolRequest] reads it. The wrapper deletes it from
// every incoming request first, so a client cannot set it.
const DerivedKeyHeader = "Idem-Derived-Key"

// Upstream headers: the _meta fields of a tools/call, as the
// headers of the HTTP calls the tool makes to its upstream API.
const (
	SessionIDHeader      = "X-Session-Id"
	IdempotencyKeyHeader = adapter.KeyHeaderAlias
)

// Meta is what a tool handler forwards to the upstream API it calls, so the
// upstream can dedupe the call too (see docs/design.md, "Forwarding credentials upstream").
// The zero Meta forwards nothing.
type Meta struct {
	// SessionID is the call's _meta.sessionId. Empty means the call
	// carried none, and no X-Session-Id is sent.
	SessionID string
	// IdempotencyKey is the key the call forwards upstream, 64 hex
	// characters, so the upstream's own idem middleware dedupes the retry
	// of this call too: the wrapper binds the call's key (its
	// _meta.idempotencyKey, params.idempotencyKey or header, or the key it
	// derived from the session, the request id, the tool and its
	// arguments) to the caller's scope, a keyed hash of both. So two
	// callers who send one key never share a result upstream, even where
	// the upstream cannot tell them apart (no Upstreams, the server calling
	// with its own token), and the same caller's retry forwards the same
	// value. Empty means the call was not deduplicated by the wrapper, and
	// no X-Idempotency-Key is sent: the client's key as sent is never
	// forwarded.
	IdempotencyKey string
	// Authorization and APIKey are the Authorization and X-Api-Key
	// headers the call carried, forwarded as MCP servers generated from a
	// REST API do, but only to the upstream origins a [Transport] is
	// configured with, for the upstream to authenticate the same caller.
	// Empty means the call carried none, and the header is not sent.
	Authorization string
	APIKey        string
}

// APIKeyHeader is the credential header forwarded besides Authorization.
const APIKeyHeader = "X-Api-Key"

// SetHeaders sets X-Session-Id and X-Idempotency-Key on h for the fields
// that are not empty: the headers that let any upstream dedupe the call,
// safe to send wherever the tool sends its request. The key is sent as a
// bare token when it is one, and otherwise as an RFC 8941 string (quoted,
// with '"' and '\\' escaped), so a key with spaces or quotes reaches the
// upstream's Idempotency-Key parser as the same key. The credentials are
// not set: see [Meta.SetCredentials] and [Transport].
func (m Meta) SetHeaders(h http.Header) {
	if m.SessionID != "" {
		h.Set(SessionIDHeader, m.SessionID)
	}
	if m.IdempotencyKey != "" {
		h.Set(IdempotencyKeyHeader, keyHeaderValue(m.IdempotencyKey))
	}
}

// SetCredentials sets Authorization and X-Api-Key on h for the fields that
// are not empty. Call it only for a request to the resource the caller's
// credentials were issued for; [Transport] does so for the origins it is
// configured with, and never on a redirect to another origin.
func (m Meta) SetCredentials(h http.Header) {
	if m.Authorization != "" {
		h.Set("Authorization", m.Authorization)
	}
	if m.APIKey != "" {
		h.Set(APIKeyHeader, m.APIKey)
	}
}

// keyHeaderValue renders an idempotency key as a header value: bare when
// every byte is visible ASCII other than ',', '"' and '\\' (what a bare key
// may hold), else as a structured-field string.
func keyHeaderValue(k string) string {
	bare := true
	for i := 0; i < len(k) && bare; i++ {
		c := k[i]
		bare = c > 0x20 && c < 0x7f && c != ',' && c != '"' && c != '\\'
	}
	if bare {
		return k
	}
	var b strings.Builder
	b.Grow(len(k) + 2)
	b.WriteByte('"')
	for i := 0; i < len(k); i++ {
		if k[i] == '"' || k[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(k[i])
	}
	b.WriteByte('"')
	return b.String()
}

// FromCallToolRequest returns the Meta of a go-sdk tools/call, for use in a
// tool handler. go-sdk runs tool handlers on the session's context, not on
// the HTTP request's, so values the wrapper puts in the request context do
// not reach them; what does reach them is the call's _meta
// (req.Params.Meta, for _meta.sessionId) and the HTTP request's headers
// (req.Extra.Header), which is where the wrapper leaves the forwarded key
// ([DerivedKeyHeader]). A call the wrapper did not deduplicate has none:
// its _meta.idempotencyKey, unbound, is not forwarded.
func FromCallToolRequest(req *mcp.CallToolRequest) Meta {
	var m Meta
	if req == nil {
		return m
	}
	if req.Params != nil {
		meta := req.Params.GetMeta()
		if s, ok := meta["sessionId"].(string); ok {
			m.SessionID = s
		}
	}
	if req.Extra != nil && req.Extra.Header != nil {
		m.IdempotencyKey = req.Extra.Header.Get(DerivedKeyHeader)
		m.Authorization = req.Extra.Header.Get("Authorization")
		m.APIKey = req.Extra.Header.Get(APIKeyHeader)
	}
	return m
}

type metaKey struct{}

// NewContext returns a context carrying m, for [Transport] to forward.
func NewContext(ctx context.Context, m Meta) context.Context {
	return context.WithValue(ctx, metaKey{}, m)
}

// FromContext returns the Meta ctx carries. The wrapper puts it in the
// context of every deduped request it passes to the inner handler, for
// inner handlers that run tools on the request's context; go-sdk tool
// handlers use [FromCallToolRequest] and [NewContext] instead.
func FromContext(ctx context.Context) (Meta, bool) {
	m, ok := ctx.Value(metaKey{}).(Meta)
	return m, ok
}

package mcphttp

import "net/http"

// SessionlessProtocol is the first MCP protocol revision without sessions and
// without initialize ([SEP-2575], [SEP-2567]): every request carries its
// version in the MCP-Protocol-Version header and in
// _meta["io.modelcontextprotocol/protocolVersion"], the Mcp-Method and
// Mcp-Name headers mirror the body, a retry is a new request with a new
// JSON-RPC id, and a tool may answer input_required (multi round-trip
// requests, [SEP-2322]). Revisions are dated, so a later one compares greater.
//
// [SEP-2322]: https://github.com/modelcontextprotocol/modelcontextprotocol/issues/2322
// [SEP-2567]: https://github.com/modelcontextprotocol/modelcontextprotocol/pull/2567
// [SEP-2575]: https://github.com/modelcontextprotocol/modelcontextprotocol/issues/2575
const SessionlessProtocol = "2026-07-28"

// ExtensionID names the extension the wrapper advertises, so that a client
// can tell that the server deduplicates calls before it sends a key: in
// capabilities.extensions of the server/discover result (from
// [SessionlessProtocol] on), and in capabilities.experimental of the initialize
// result (before). Its settings are an object:
//
//	{
//	  "methods": ["tools/call"],             // the deduplicated methods
//	  "keySources": ["_meta.idempotencyKey", // where the key may come from,
//	    "params.idempotencyKey",             // one key in any of them
//	    "Idempotency-Key",                   // (HTTP headers)
//	    "Mcp-Param-Idempotency-Key"],
//	  "retentionSeconds": 86400,             // how long a result replays
//	  "replayedMeta": "io.github.idemkit/replayed"
//	}
//
// retentionSeconds is there when the store reports a finite retention
// (memstore and pgstore do). The identifier carries a vendor prefix, as
// the MCP rules for extension identifiers require.
const ExtensionID = "io.github.idemkit/idempotency"

// metaProtocolVersion is the _meta member that carries a modern request's
// protocol version.
const metaProtocolVersion = "io.modelcontextprotocol/protocolVersion"

// modernHeader reports whether the request's MCP-Protocol-Version header
// names SessionlessProtocol or later.
func modernHeader(r *http.Request) bool {
	return r.Header.Get("Mcp-Protocol-Version") >= SessionlessProtocol
}

// modern reports whether a call is made at SessionlessProtocol or later, by
// either the header or its _meta: there, neither Mcp-Session-Id (which the
// server ignores) nor the request id (new on every retry) can key it.
func modern(r *http.Request, c call) bool {
	return modernHeader(r) || c.metaVersion >= SessionlessProtocol
}

// routedAround reports whether a modern request's Mcp-Method header says
// it is neither a call to dedupe nor a server/discover (whose answer the
// wrapper adds its extension to), so the wrapper passes it through without
// reading its body. A body that disagrees with its Mcp-Method header is
// the inner handler's to refuse (the spec requires servers to), and the
// wrapper never runs or answers it. Before SessionlessProtocol the headers are
// optional and unchecked, so the body decides.
func (m *wrapper) routedAround(r *http.Request) bool {
	method := r.Header.Get("Mcp-Method")
	return modernHeader(r) && !m.methods[method] && method != probeDiscover
}

// ByVersion returns a handler that sends requests made at [SessionlessProtocol]
// or later (by their MCP-Protocol-Version header) to modern, and every
// other request to legacy. go-sdk serves 2026-07-28 only on a stateless
// handler, and earlier revisions' sessions only on a stateful one; with
// ByVersion one endpoint serves both, each client at the version it picks,
// and mcphttp in front dedupes both:
//
//	stateful := mcp.NewStreamableHTTPHandler(getServer, nil)
//	stateless := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true})
//	handler := mcphttp.New(store, opts)(mcphttp.ByVersion(stateful, stateless))
//
// A client's first request (initialize, or server/discover, which a
// client that wants 2026-07-28 sends with that version's header) picks the
// handler, and so the version the two settle on.
func ByVersion(legacy, modern http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if modernHeader(r) {
			modern.ServeHTTP(w, r)
			return
		}
		legacy.ServeHTTP(w, r)
	})
}

// standardHeadersPresent reports whether a modern call carries the headers
// the spec requires of it: Mcp-Method, and Mcp-Name for a method with a
// name. A call without them is the inner handler's to refuse, and the
// wrapper must not answer it from the store: the probe (server/discover,
// without Mcp-Name) cannot show that the call itself would be refused.
func standardHeadersPresent(r *http.Request, c call) bool {
	if r.Header.Get("Mcp-Method") == "" {
		return false
	}
	named := c.name != "" || c.method == "tools/call" || c.method == "prompts/get" || c.method == "resources/read"
	return !named || r.Header.Get("Mcp-Name") != ""
}

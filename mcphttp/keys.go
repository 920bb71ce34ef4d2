package mcphttp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/adapter"
)

// Where a call's idempotency key can come from, in the order the wrapper
// reports them.
const (
	// SourceMeta is params._meta.idempotencyKey ([agentkey.Derive]), what go-sdk
	// tool handlers read back with [FromCallToolRequest].
	SourceMeta = "_meta.idempotencyKey"
	// SourceParams is params.idempotencyKey, the shape of the closed
	// [SEP-3182] proposal that some clients send.
	//
	// [SEP-3182]: https://github.com/modelcontextprotocol/modelcontextprotocol/issues/3182
	SourceParams = "params.idempotencyKey"
	// SourceHeader is the Idempotency-Key header of the HTTP POST, an
	// RFC 8941 string (or a bare token) as package middleware reads it.
	SourceHeader = adapter.KeyHeader
	// SourceParamHeader is the Mcp-Param-Idempotency-Key header: from MCP
	// 2026-07-28 a tool may have a parameter mirrored into an
	// Mcp-Param-{Name} header ("x-mcp-header" in its input schema, the
	// header's name after Mcp-Param-), and a tool whose idempotencyKey
	// argument is mirrored as "Idempotency-Key" gets it here. Its value
	// is plain or "=?base64?…?=" (base64 of the key), as the spec encodes
	// parameter headers.
	SourceParamHeader = "Mcp-Param-Idempotency-Key"
)

// ReasonConflictingKeys is data.reason of the [CodeInvalidParams] error for
// a call whose key sources name different keys.
const ReasonConflictingKeys = "conflicting_idempotency_keys"

// keySource is one place a call carried a key.
type keySource struct {
	name  string
	value string
	err   error // the value could not be read as a key at all
}

// errConflictingKeys is wrapped by the error of a call whose sources
// disagree.
var errConflictingKeys = errors.New("conflicting idempotency keys")

// callKey returns a call's idempotency key and where it came from, looking
// at every source. present is false when the call carries none. Two sources
// with different keys are an error that names both: the wrapper cannot
// know which one the client meant, and guessing could merge two calls.
func callKey(r *http.Request, c call) (key, source string, present bool, err error) {
	var found []keySource
	if c.hasKey {
		found = append(found, keySource{name: SourceMeta, value: c.idemKey})
	}
	if c.hasParamKey {
		found = append(found, keySource{name: SourceParams, value: c.paramKey})
	}
	if lines, ok := r.Header[SourceHeader]; ok {
		s := keySource{name: SourceHeader}
		if len(lines) != 1 {
			s.err = fmt.Errorf("%s appears %d times; it takes one key", SourceHeader, len(lines))
		} else if s.value, s.err = adapter.ParseKeyHeader(lines[0]); s.err != nil {
			s.err = fmt.Errorf("%s: %w", SourceHeader, s.err)
		}
		found = append(found, s)
	}
	if lines, ok := r.Header[SourceParamHeader]; ok {
		s := keySource{name: SourceParamHeader}
		if len(lines) != 1 {
			s.err = fmt.Errorf("%s appears %d times; it takes one key", SourceParamHeader, len(lines))
		} else if s.value, s.err = decodeParamHeader(lines[0]); s.err != nil {
			s.err = fmt.Errorf("%s: %w", SourceParamHeader, s.err)
		} else if arg, ok := argumentKey(c); ok && arg != s.value {
			// The header mirrors the tool's idempotencyKey argument, and
			// the server refuses a call whose header and body disagree:
			// so must a replay.
			s.err = fmt.Errorf("%w: %s and arguments.idempotencyKey name different keys", errConflictingKeys, SourceParamHeader)
		}
		found = append(found, s)
	}
	if len(found) == 0 {
		return "", "", false, nil
	}
	first := found[0]
	for _, s := range found {
		if s.err != nil {
			return "", s.name, true, s.err
		}
		if s.value != first.value {
			return "", s.name, true, fmt.Errorf("%w: %s and %s name different keys", errConflictingKeys, first.name, s.name)
		}
	}
	return first.value, first.name, true, nil
}

// decodeParamHeader returns the value of an Mcp-Param-* header as MCP
// 2026-07-28 encodes it: "=?base64?" and "?=" around the base64 of the
// value, or the value itself.
func decodeParamHeader(v string) (string, error) {
	if enc, ok := strings.CutPrefix(v, "=?base64?"); ok {
		if enc, ok = strings.CutSuffix(enc, "?="); ok {
			b, err := base64.StdEncoding.DecodeString(enc)
			if err != nil {
				return "", fmt.Errorf("invalid base64 encoding: %w", err)
			}
			return string(b), nil
		}
	}
	return v, nil
}

// argumentKey returns the call's arguments.idempotencyKey, which an
// Mcp-Param-Idempotency-Key header mirrors, when it is a string.
func argumentKey(c call) (string, bool) {
	args, _, err := members(c.arguments)
	if err != nil {
		return "", false
	}
	var k string
	if json.Unmarshal(args[paramIdempotencyKey], &k) != nil {
		return "", false
	}
	return k, true
}

// invalidKeyResponse is the [CodeInvalidParams] error of a call whose key
// is not a key, or whose sources disagree.
func invalidKeyResponse(c call, source string, err error) []byte {
	if errors.Is(err, errConflictingKeys) {
		return errorResponse(c.rawID, rpcError{
			Code: CodeInvalidParams, Message: err.Error() + "; send one key, or the same key in each",
			Data: errorData{Reason: ReasonConflictingKeys},
		})
	}
	return errorResponse(c.rawID, rpcError{
		Code: CodeInvalidParams, Message: "invalid " + source + ": " + adapter.KeyReason(err).Error(),
		Data: errorData{Reason: ReasonInvalidKey},
	})
}

// identify returns the claim for a call, the key forwarded upstream (see
// [forwardedKey]) and where the call's key came from (empty for a derived
// one), and whether the call can be deduplicated at all; keyErr is an
// invalid key or a caller the scope cannot name (see [scoper]).
func (m *wrapper) identify(r *http.Request, c call) (req idem.ClaimRequest, forward, source string, ok bool, keyErr error) {
	scope, scopeErr := m.scope.MCPScope(r, c.sessionID)
	// The engine sets Lease and Owner again when it claims.
	req = idem.ClaimRequest{Scope: scope, Fingerprint: c.digest, Lease: m.eng.Lease(),
		Labels: idem.Labels{Method: c.method, Route: c.name, Caller: m.scope.Caller(r)}}
	key, source, present, err := callKey(r, c)
	if present {
		if scopeErr != nil {
			return req, "", source, true, scopeErr
		}
		if err == nil {
			// Each round of a multi round-trip call is its own claim: see
			// rounds.go.
			if c.round == "" {
				req.Key, err = idem.ParseClientKey(key)
			} else {
				req.Key, err = idem.ParseClientRoundKey(key, c.round)
			}
		}
		if err != nil {
			return req, "", source, true, err
		}
		return req, forwardedKey(scope, clientKeyDomain, key), source, true, nil
	}
	session := r.Header.Get("Mcp-Session-Id")
	if session == "" || m.stateless || modern(r, c) {
		// Request ids are unique per session only: without one, two
		// clients' id 1 would be one key, and one would be answered with
		// the other's result. From SessionlessProtocol on there are no sessions
		// (a server ignores the header, so any client can send any value)
		// and a retry has a new id anyway.
		return req, "", "", false, nil
	}
	if scopeErr != nil {
		return req, "", "", true, scopeErr
	}
	// The argument digest joins the tool name in the key's target, not
	// only the fingerprint: JSON-RPC lets a client reuse an answered id, and
	// a call with other arguments under it is a fresh call, where a
	// fingerprint alone would make the store answer it with a mismatch.
	target := c.name + "/" + c.digest
	if c.round != "" {
		target += "/" + c.round
	}
	id := c.id
	// A string id may be as long as the body; the key of a call must stay
	// within idem.MaxKeyLen. A long id or tool name is keyed by its digest,
	// in a form no short one can take: "sha256:" and 64 hex digits is
	// longer than any id kept as is, and has no "/", which every target
	// kept as is has.
	if len(id.String()) > maxKeyedIDLen {
		id = idem.StringRequestID(digest(id.String()))
	}
	if len(c.name) > maxKeyedNameLen {
		target = digest(target)
	}
	req.Key = idem.KeyForMethodCall(idem.SessionID(session), id, c.method, target)
	return req, forwardedKey(scope, derivedKeyDomain, req.Key.String()), "", true, nil
}

// The longest request id and tool name a method-call key holds as they
// are; longer ones are keyed by their digest.
const (
	maxKeyedIDLen   = 64
	maxKeyedNameLen = 128
)

// digest is "sha256:" and the hex SHA-256 of s.
func digest(s string) string {
	d := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(d[:])
}

// Domains of [forwardedKey], so that a client's key and a derived key can
// never forward the same value.
const (
	clientKeyDomain  = "client-key"
	derivedKeyDomain = "derived-key"
)

// forwardedKey is the key a call's tool forwards upstream
// ([Meta.IdempotencyKey], X-Idempotency-Key): the hex HMAC-SHA-256, keyed by
// the call's scope, of the domain and the call's key. Bound to the scope,
// because the upstream may not know who is calling: a server on MCP's OAuth
// profile calls its APIs with its own token, so there every caller has one
// scope upstream, and two callers who both send the key "pay-1" would share
// one upstream result (the second caller reading the first's payment). The
// same caller's retry has the same scope and key, so it forwards the same
// value and the upstream dedupes it. 64 hex characters: a bare token, and a
// valid key for any upstream that takes up to 255.
func forwardedKey(scope, domain, key string) string {
	mac := hmac.New(sha256.New, []byte(scope))
	mac.Write([]byte(domain))
	mac.Write([]byte{0})
	mac.Write([]byte(key))
	return hex.EncodeToString(mac.Sum(nil))
}

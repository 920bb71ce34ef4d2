// Package identity computes the identity part of a scope for both adapters
// (middleware and mcphttp): who is asking, as a keyed hash, so that one
// user's key never matches another user's and no credential is stored in
// clear.
//
// The identity of a request is, in this order:
//
//  1. the authenticated principal, when the service's Principal function
//     returns one (read from the context its auth middleware filled);
//  2. otherwise its credentials: the Authorization and X-Api-Key headers
//     and the values of the session cookies the service named;
//  3. otherwise nobody: anonymous requests share one identity per route.
//
// A request that carries a Cookie header but none of the above is refused
// with [ErrUnscopedCookies] while the service has not said which cookies
// identify a user (SessionCookies nil): in a browser application the
// session cookie is the credential, and hashing only the headers would put
// every user in one scope, where user B sending user A's key receives A's
// recorded answer. See docs/design.md, "Scopes".
package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"
	"sync"
)

// ErrUnscopedCookies reports a request that carries cookies but no
// principal and no credential, to a service that has not named its session
// cookies: the adapter cannot tell whose request it is, and refuses it.
var ErrUnscopedCookies = errors.New("the request carries cookies but no credential the idempotency layer knows, and the service has not named its session cookies (SessionCookies) or its principal (Principal)")

// Config is what the adapters' options say about identity.
type Config struct {
	// Secret keys the hash (HMAC-SHA-256). Empty means plain SHA-256.
	Secret []byte
	// Principal returns the authenticated principal, or "" for none.
	// Nil means none.
	Principal func(*http.Request) string
	// SessionCookies names the cookies whose values identify a user. Nil
	// means not configured (cookie-only requests are refused); empty and
	// non-nil means no cookie identifies anyone (cookies are ignored).
	SessionCookies []string
	// OnCredentials, when not nil, is called with each request whose
	// identity is its credentials (no principal, and a credential
	// present), before its scope is returned.
	OnCredentials func(*http.Request)
}

// Identifier computes scopes. It is safe for concurrent use.
type Identifier struct {
	secret    []byte
	principal func(*http.Request) string
	cookies   []string
	named     bool // SessionCookies was set, possibly empty
	onCreds   func(*http.Request)
	// scratch holds *scratch: a message buffer and, with a secret, an HMAC
	// to reset, so a scope costs one allocation (the string) in the
	// common case.
	scratch sync.Pool
}

type scratch struct {
	msg []byte
	mac hash.Hash // nil without a secret
	sum [sha256.Size]byte
}

// maxPooledMessage bounds the buffer kept for reuse, so that one request
// with huge credentials does not pin its buffer.
const maxPooledMessage = 4 << 10

// New validates cfg and returns its Identifier. A cookie name that is empty
// or not an RFC 6265 token is an error.
func New(cfg Config) (*Identifier, error) {
	for _, name := range cfg.SessionCookies {
		if !validCookieName(name) {
			return nil, fmt.Errorf("session cookie name %q is not a cookie name", name)
		}
	}
	id := &Identifier{
		secret:    append([]byte(nil), cfg.Secret...),
		principal: cfg.Principal,
		cookies:   append([]string(nil), cfg.SessionCookies...),
		named:     cfg.SessionCookies != nil,
		onCreds:   cfg.OnCredentials,
	}
	id.scratch.New = func() any {
		s := &scratch{msg: make([]byte, 0, 512)}
		if len(id.secret) > 0 {
			s.mac = hmac.New(sha256.New, id.secret)
		}
		return s
	}
	return id, nil
}

// Scope returns the hex hash of r's identity followed by extra (the
// adapter's own scope parts: session, method, route), or
// [ErrUnscopedCookies].
//
// The hashed message is a sequence of length-prefixed fields, so distinct
// sequences never give the same message. The two shapes have different
// field counts (1+len(extra) for a principal, 2+len(SessionCookies)+len(extra)
// for credentials), so a principal can never be forged with credentials
// that spell it: a fixed-count length-prefixed decoding of a message is
// unique. Without a secret and without session cookies, the credentials
// message is the one DefaultScope hashed before keyed hashing existed, so
// such deployments keep their scopes across the upgrade.
func (id *Identifier) Scope(r *http.Request, extra ...string) (string, error) {
	s := id.scratch.Get().(*scratch)
	defer func() {
		if cap(s.msg) <= maxPooledMessage {
			id.scratch.Put(s)
		}
	}()
	msg, err := id.message(s.msg[:0], r, extra)
	s.msg = msg
	if err != nil {
		return "", err
	}
	if s.mac == nil {
		s.sum = sha256.Sum256(msg)
	} else {
		s.mac.Reset()
		s.mac.Write(msg)
		s.mac.Sum(s.sum[:0])
	}
	var dst [2 * sha256.Size]byte
	hex.Encode(dst[:], s.sum[:])
	return string(dst[:]), nil
}

// HTTPScope is the middleware's default scope of r: the hash of its
// identity, its X-Session-Id header, its method and its route (r.Pattern
// inside an [http.ServeMux] route, the URL path as sent, escaped,
// otherwise: /a%2Fb and /a/b are two resources). The idem CLI's "scope"
// command computes it the same way.
func (id *Identifier) HTTPScope(r *http.Request) (string, error) {
	return id.Scope(r, r.Header.Get("X-Session-Id"), r.Method, Route(r))
}

// Route is r's route as the middleware's scope and its claim's labels name
// it: r.Pattern inside an [http.ServeMux] route, the URL path as sent,
// escaped, otherwise.
func Route(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.URL.EscapedPath()
}

// MCPScope is mcphttp's scope of a call from r with _meta.sessionId
// session: "mcp:" and the hash of its identity and the session.
func (id *Identifier) MCPScope(r *http.Request, session string) (string, error) {
	h, err := id.Scope(r, session)
	if err != nil {
		return "", err
	}
	return "mcp:" + h, nil
}

// message appends to b the message Scope hashes.
func (id *Identifier) message(b []byte, r *http.Request, extra []string) ([]byte, error) {
	if p := id.principalOf(r); p != "" {
		b = appendField(b, p)
	} else {
		auth, apiKey := r.Header.Get("Authorization"), r.Header.Get("X-Api-Key")
		b = appendField(b, auth)
		b = appendField(b, apiKey)
		known := auth != "" || apiKey != ""
		for _, name := range id.cookies {
			var values []byte
			for _, c := range r.CookiesNamed(name) {
				values = appendField(values, c.Value)
				known = known || c.Value != ""
			}
			b = appendField(b, string(values))
		}
		if !known && !id.named && r.Header.Get("Cookie") != "" {
			return nil, ErrUnscopedCookies
		}
		if known && id.onCreds != nil {
			id.onCreds(r)
		}
	}
	for _, f := range extra {
		b = appendField(b, f)
	}
	return b, nil
}

func (id *Identifier) principalOf(r *http.Request) string {
	if id.principal == nil {
		return ""
	}
	return id.principal(r)
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// validCookieName reports whether name is an RFC 6265 cookie-name (an RFC
// 7230 token).
func validCookieName(name string) bool {
	if name == "" {
		return false
	}
	return !strings.ContainsFunc(name, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune(`()<>@,;:\"/[]?={}`, r)
	})
}

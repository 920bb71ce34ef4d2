package middleware

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"

	"github.com/idemkit/idem"
)

// KeySource reads the idempotency key of a request: [HeaderKey] (the
// default), [WebhookKey], [KeyFromHeader], or a function of the service's
// own. It returns an error wrapping [ErrNoKey] (a [*MissingKeyError]) when
// the request carries no key, which is answered 400 ([TypeMissingKey]), or
// let through unprotected with Options.KeyOptional; any other error is a
// malformed key, answered 400 ([TypeInvalidKey]) with the error as the
// detail. It runs on every protected request, before the scope and the
// body: it must not read the body.
type KeySource func(r *http.Request) (idem.Key, error)

// ErrNoKey is what a [KeySource]'s error wraps when the request carries
// no key.
var ErrNoKey = errors.New("middleware: no idempotency key")

// MissingKeyError is a [KeySource]'s error for a request without a key.
type MissingKeyError struct {
	// Want names what the request should carry, for the 400's detail:
	// "an Idempotency-Key header".
	Want string
}

func (e *MissingKeyError) Error() string { return "no idempotency key: want " + e.Want }

// Is reports whether target is [ErrNoKey].
func (e *MissingKeyError) Is(target error) bool { return target == ErrNoKey }

// HeaderKey is the default [KeySource]: the IETF Idempotency-Key header
// ([ParseKeyHeader]), or X-Idempotency-Key, the header an MCP server
// forwards _meta.idempotencyKey as; both may be present only with the same
// key.
func HeaderKey(r *http.Request) (idem.Key, error) {
	k, err := keyFromHeader(r.Header)
	if err == errNoKey {
		return idem.Key{}, &MissingKeyError{Want: "an " + KeyHeader + " header"}
	}
	return k, err
}

// WebhookIDHeader is the Standard Webhooks message id header
// (https://www.standardwebhooks.com): unique per message, the same on
// every redelivery of it.
const WebhookIDHeader = "webhook-id"

// WebhookKey is the [KeySource] of a webhook receiver: the Standard
// Webhooks webhook-id header, so that a redelivered message replays the
// answer its first delivery got and the handler runs once per message.
//
// Message ids are unique per sender, not across senders: scope keys by the
// verified sender. Verify the signature (webhook-signature) in a
// middleware that runs before this one, put the sender it verified in the
// request's context, and return it from Options.Principal, so that one
// sender can neither replay nor block another's messages. See the
// package's WebhookKey example.
var WebhookKey = KeyFromHeader(WebhookIDHeader)

// KeyFromHeader returns a [KeySource] reading the key from the header
// name, one value, as [ParseKeyHeader] reads it (a bare token or a quoted
// string). It panics if name is not a valid header name.
func KeyFromHeader(name string) KeySource {
	if !validHeaderName(name) {
		panic(fmt.Sprintf("middleware: KeyFromHeader(%q): not a header name", name))
	}
	canonical := textproto.CanonicalMIMEHeaderKey(name)
	missing := &MissingKeyError{Want: "a " + name + " header"}
	return func(r *http.Request) (idem.Key, error) {
		lines, ok := r.Header[canonical]
		if !ok {
			return idem.Key{}, missing
		}
		return parseKeyLines(name, lines)
	}
}

// validHeaderName reports whether name is an RFC 9110 field name (a token).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '(' || c == ')' || c == ',' || c == '/' || c == ':' || c == ';' ||
			c == '<' || c == '=' || c == '>' || c == '?' || c == '@' || c == '[' || c == '\\' || c == ']' || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

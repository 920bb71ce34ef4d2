// Package middleware implements the Idempotency-Key semantics of the IETF
// httpapi draft for net/http, on any [idem.Store]: a retried POST or PATCH
// runs its handler at most once, and every retry gets the original response.
//
//	mux := http.NewServeMux()
//	protect := middleware.New(store, middleware.Options{Principal: userOf}) // the user your auth found
//	mux.Handle("POST /invoices", protect(http.HandlerFunc(createInvoice)))
//
// # What a request gets
//
// Defaults, each configurable through [Options]; problems follow RFC 9457,
// typed by the Type constants.
//
//	situation                               answer
//	POST/PATCH without a key                400 (TypeMissingKey)
//	malformed key (empty, >255, list,       400 (TypeInvalidKey)
//	  control, non-ASCII)
//	body larger than MaxBodyBytes           413 (TypeBodyTooLarge)
//	first request                           the handler runs; its response is recorded
//	handler panics, or answers 5xx/408/429  released: a retry runs again
//	client hangs up mid-handler             the handler completes; a retry replays it
//	handler outlives MaxExecution or the    its context ends; a 5xx releases; one that
//	  request's own deadline                never returns loses the key with its lease
//	retry, same request                     the recorded response, Idempotent-Replayed: true
//	same key, different request             422 (TypeMismatch), not run
//	same key while the original runs        waits up to Options.Engine.Wait, then 409
//	                                        (TypeInFlight), Retry-After
//	store unreachable or full, or the       503 (TypeStoreUnavailable), Retry-After; not run
//	  server cancels the claim or wait
//	  (shutting down)
//	response larger than MaxRecordBytes     sent in full, the key completed unreplayable:
//	                                        retries get 410 (TypeUnreplayable), not run
//	GET/HEAD/OPTIONS/PUT/DELETE             pass through
//
// # Keys and scopes
//
// The key comes from Idempotency-Key or X-Idempotency-Key ([ParseKeyHeader])
// or Options.Key ([WebhookKey], [KeyFromHeader]), within the caller's scope:
// Options.Principal's answer (set it, or a retry under a refreshed token
// runs again), else the credentials, hashed with Options.ScopeSecret.
// Cookies naming nobody ([Options.SessionCookies]) are refused
// ([TypeUnscopedCookies]). [DefaultFingerprint] tells a reused key apart.
// See [design.md, "Scopes"].
//
// # Capture and replay
//
// The response reaches the client as written, flushes included, and is
// captured on the way: status, Options.RecordHeaders, the body up to
// MaxRecordBytes; never Set-Cookie, Authorization or hop-by-hop headers. If
// recording fails past Options.Engine.StoreTimeout, the key stays claimed
// until its lease runs out; [Commit] (recording in the handler's own
// transaction) or InTransaction closes that window. Lease, deadline and
// shutdown are package [engine]'s.
//
// # In a transaction
//
// With Options.InTransaction and an [idem.TxStore] (pgstore), the handler
// writes its rows in the claim's transaction (pgstore.TxFrom or SQLTxFrom):
// claim, rows and response commit together, the response held until then
// ([TypeCommitFailed] if the commit fails; [TypeTransactionLimit] for a
// bound PostgreSQL enforces). See [design.md, "Two ways to claim"].
//
// # Observability
//
// Options.Engine.Logger gets logs (nil: only the scoping warnings, to
// slog.Default; keys as [idem.KeyDigest], the key itself only at debug
// level); Options.Observer gets an [idem.Event] for every outcome, refusal
// and unprotected request.
//
// [design.md, "Scopes"]: https://github.com/idemkit/idem/blob/main/docs/design.md#scopes-who-is-asking
// [design.md, "Two ways to claim"]: https://github.com/idemkit/idem/blob/main/docs/design.md#two-ways-to-claim
package middleware

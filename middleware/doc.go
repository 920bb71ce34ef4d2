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
// Defaults, each configurable through [Options]. Problems follow RFC 9457,
// typed by the Type constants.
//
//	situation                                   answer
//	POST/PATCH without a key                    400 (TypeMissingKey)
//	malformed key (empty, >255, list, control,  400 (TypeInvalidKey)
//	  non-ASCII)
//	body larger than MaxBodyBytes               413 (TypeBodyTooLarge)
//	first request                               the handler runs; status,
//	                                            allow-listed headers and body
//	                                            are recorded
//	handler panics, or answers 5xx/408/429      released: a retry runs again
//	client hangs up while the handler runs      the handler completes; the retry
//	                                            gets its recorded response
//	handler still runs at MaxExecution or the   its context ends; a 5xx releases;
//	  request's own deadline                    one that never returns loses the
//	                                            key with its lease
//	retry, same request                         the recorded response, plus
//	                                            Idempotent-Replayed: true
//	same key, different request                 422 (TypeMismatch), not run
//	same key while the original runs            waits up to Options.Engine.Wait, then
//	                                            409 (TypeInFlight), Retry-After
//	store unreachable or full, or the server    503 (TypeStoreUnavailable),
//	  cancels the request while it claims or    Retry-After; not run
//	  waits (shutting down)
//	response larger than MaxRecordBytes         sent in full; the key completes
//	                                            unreplayable: retries get 410
//	                                            (TypeUnreplayable), not run
//	GET/HEAD/OPTIONS/PUT/DELETE                 pass through
//
// # Keys and scopes
//
// The key comes from Idempotency-Key or X-Idempotency-Key ([ParseKeyHeader]),
// or Options.Key ([WebhookKey], [KeyFromHeader]), and is looked up within the
// caller's scope: Options.Principal's answer (set it: a retry under a
// refreshed token otherwise runs again), else the credentials, hashed with
// Options.ScopeSecret. Cookies that name nobody ([Options.SessionCookies])
// are refused ([TypeUnscopedCookies]). [DefaultFingerprint] tells a reused
// key apart. See [design.md, "Scopes"].
//
// # Capture and replay
//
// The response goes to the client as it is written, flushes included, and
// is captured on the way (status, Options.RecordHeaders, the body up to
// MaxRecordBytes; never Set-Cookie, Authorization or hop-by-hop headers).
// If recording fails past Options.Engine.StoreTimeout, the key stays claimed
// until its lease runs out; [Commit] (recording in the handler's own
// transaction) or InTransaction closes that window. Lease, deadline and
// shutdown are package [engine]'s.
//
// # In a transaction
//
// With Options.InTransaction and an [idem.TxStore] (pgstore), the handler
// writes its rows in the claim's transaction (pgstore.TxFrom or
// pgstore.SQLTxFrom): claim, rows and response commit together, the
// response held until then ([TypeCommitFailed] if it fails;
// [TypeTransactionLimit] for a bound PostgreSQL enforces). See [design.md,
// "Two ways to claim"].
//
// # Observability
//
// Options.Engine.Logger gets logs (nil: none but the scoping warnings, to
// slog.Default; keys as [idem.KeyDigest], the key itself only when debug is
// enabled); Options.Observer gets an [idem.Event] for every outcome, refusal
// and unprotected request.
//
// [design.md, "Scopes"]: https://github.com/idemkit/idem/blob/main/docs/design.md#scopes-who-is-asking
// [design.md, "Two ways to claim"]: https://github.com/idemkit/idem/blob/main/docs/design.md#two-ways-to-claim
package middleware

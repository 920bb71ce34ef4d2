// Package middleware implements the Idempotency-Key semantics of the IETF
// httpapi draft for net/http, on any [idem.Store]: a retried POST or PATCH
// runs its handler at most once, and every retry gets the original response.
//
//	mux := http.NewServeMux()
//	protect := middleware.New(store, middleware.Options{})
//	mux.Handle("POST /invoices", protect(http.HandlerFunc(createInvoice)))
//
// # What a request gets
//
// Defaults; each is configurable through [Options].
//
//	situation                                   answer
//	POST/PATCH without a key                    400 problem+json (TypeMissingKey)
//	malformed key (empty, >255, list, control,  400 problem+json (TypeInvalidKey)
//	  non-ASCII)
//	body larger than MaxBodyBytes               413 problem+json (TypeBodyTooLarge)
//	first request                               handler runs; its response is
//	                                            recorded (status, allow-listed
//	                                            headers, body)
//	handler panics, or answers 5xx/408/429      claim released: a retry runs again
//	client hangs up while the handler runs      the handler runs to completion;
//	                                            its response is recorded and the
//	                                            retry gets it (see Execution)
//	handler still runs at MaxExecution, or the  its context ends; a 5xx it answers
//	  request's own deadline                    releases the claim; one that never
//	                                            returns loses it with the lease
//	retry after completion, same request        the recorded response, plus
//	                                            Idempotent-Replayed: true
//	same key, different request                 422 problem+json (TypeMismatch);
//	                                            handler not run
//	same key while the original runs            waits up to Options.Wait for its
//	                                            result, then 409 problem+json
//	                                            (TypeInFlight) with Retry-After
//	store unreachable or full                   503 problem+json
//	                                            (TypeStoreUnavailable) with
//	                                            Retry-After; handler not run
//	the server cancels the request while it     503 problem+json
//	  claims or waits (shutting down)           (TypeStoreUnavailable) with
//	                                            Retry-After; handler not run
//	response larger than MaxRecordBytes         sent in full; the key completes as
//	                                            unreplayable: a retry is answered
//	                                            410 problem+json (TypeUnreplayable)
//	                                            and the handler does not run again
//	GET/HEAD/OPTIONS/PUT/DELETE                 pass through
//
// Problem responses follow RFC 9457 (type, title, status, detail); the type
// URIs are the Type constants, stable and documented here.
//
// # Keys, scopes and fingerprints
//
// The key is read from Idempotency-Key, a structured-field string
// ("abc") or a bare value (abc), or from X-Idempotency-Key, the header MCP
// servers forward _meta.idempotencyKey as; see [ParseKeyHeader].
// Options.Key reads it from elsewhere: [WebhookKey], the Standard Webhooks
// webhook-id header of a webhook receiver, [KeyFromHeader], or a
// [KeySource] of the service's own. A key is
// looked up within a scope, so two callers' keys never meet. The default
// scope is a keyed hash (HMAC-SHA-256 with Options.ScopeSecret) of who is
// asking, the X-Session-Id header, the method and the route. Who is asking
// is the authenticated principal when Options.Principal returns one (from
// the context the service's auth middleware filled), else the credentials:
// Authorization, X-Api-Key and the cookies named in Options.SessionCookies.
// A request with cookies but none of these, to a service that has not named
// its session cookies, is refused (500, [TypeUnscopedCookies]): in a browser
// application the cookie is the credential, and ignoring it would give one
// user another's recorded answer. Options.Scope replaces all of this.
//
// With each key the store keeps a fingerprint of the request
// ([DefaultFingerprint]: method, escaped path, query, content type and
// body hash): the same key for a different request is a client bug,
// answered 422.
//
// # Capture and replay
//
// The handler's response goes to the client as it is written, flushes
// included ([http.Flusher] and [http.ResponseController] work through the
// wrapper); nothing is held back. It is captured on the way: the status, the
// headers of Options.RecordHeaders as they were when the header was sent, and
// the body up to Options.MaxRecordBytes. When the handler returns, the
// capture is recorded with [idem.Store.Complete]. Set-Cookie, Authorization
// and hop-by-hop headers are never recorded.
//
// Because the response is sent before it is recorded, a store failure at
// that moment that lasts longer than Options.StoreTimeout (a shorter one
// is retried) leaves the key claimed until its lease runs out, after which
// a retry runs the handler again. A handler whose side effects live in the
// store's database closes that window: in a transaction (below), or with
// [Commit], which records the response inside the handler's own
// transaction before sending it.
//
// # In a transaction
//
// With Options.InTransaction (and a store that is an [idem.TxStore], such
// as pgstore) the middleware claims the key inside a transaction of the
// store's database and runs the handler in it: the handler writes its rows
// through that transaction (pgstore.TxFrom(r.Context()), a pgx.Tx, or
// pgstore.SQLTxFrom(r.Context()), a *sql.Tx) and answers as usual. A response the record policy records is recorded in the same
// transaction, which then commits: the claim, the rows and the response
// commit in one commit. The response is held back until then, and sent
// only if the commit succeeded; a recorded answer that did not commit is
// replaced by 503 problem+json ([TypeCommitFailed]) with none of the
// handler's headers. Every other ending rolls the transaction back and
// leaves nothing: an answer not recorded (5xx, 408, 429: sent as the
// handler wrote it; New refuses a record policy that leaves out a status
// below 400, which would tell a client "done" for rolled-back rows, and
// FailOpen and KeyOptional, which would run the handler without the
// transaction), a panic, a handler cut off (its deadline,
// Options.MaxExecution, or Shutdown) that answered nothing to record, a
// crash of the process or a lost connection. A retry then runs at once:
// there is no claim to wait out. PostgreSQL also ends a transaction left
// idle between two statements longer than Options.IdleInTransaction
// (MaxExecution by default; the lease plays no part), and cancels a
// statement that runs longer than its statement_timeout: with nothing to
// renew, the statements are the claim's signs of life. Then, whatever the
// handler answered, the client gets 500 problem+json
// ([TypeTransactionLimit]) naming the bound and the setting to raise, and
// the log says it as an error: a retry would end the same way.
//
// While the transaction is open the claim is invisible to everyone else; a
// duplicate waits in the database for the transaction to end, up to
// Options.Wait, and gets the recorded response, or, if the wait runs out,
// 409 with Retry-After (Options.RetryAfter: the transaction's end is not
// known). A response larger than Options.MaxRecordBytes cannot be held:
// when it outgrows the limit the transaction commits with the key completed
// as unreplayable, and the rest streams (write the rows before the body).
// Until the commit nothing of the handler's reaches the client, in
// whatever order it calls the writer: flushing and an informational
// status send nothing, and a second final status is ignored, as net/http
// ignores it. docs/design.md compares the two
// paths; the two-phase one, the default, is for side effects outside the
// database.
//
// # Execution
//
// What happens once a request holds its key is the shared behaviour of idem's
// adapters, built once in package [engine] and documented there: the lease
// renewal and the deadline that cancels the handler's context (cause
// [idem.ErrLeaseLost]) before the lease could run out unrenewed; the handler's
// context, which does not end when the client hangs up (but does on lease
// loss, at its deadline, Options.MaxExecution or the request's own, and
// when Options.Shutdown is done) unless Options.CancelWithClient;
// which endings are recorded and which release the key; the Retry-After
// policy. The middleware's part is HTTP's: it drops writes to a client that
// is gone without failing the handler, so the whole response is recorded; it
// records a body that does not match its declared Content-Length, or one cut
// short by an [http.ErrAbortHandler] panic, as unreplayable, never as a
// success. No goroutine outlives the request.
//
// # Observability
//
// Options.Logger receives logs (nil: none); keys appear only hashed unless
// the logger is enabled for debug. Options.Observer receives an [idem.Event] for
// each claim, replay, 409, 422, completion, release, lost claim and store
// error, for metrics.
package middleware

// Package engine is the execution engine shared by idem's adapters
// (middleware for net/http, mcphttp for MCP): claim, run the protected
// work under a context the engine controls while it renews the lease,
// decide record or release, complete or release, and report
// [idem.Event]s. An adapter keeps only what belongs to its protocol:
// parsing the request, capturing the answer in its format, and writing its
// errors (problem+json, JSON-RPC). A third-party adapter (gRPC, a queue
// consumer) can use it the same way.
//
// # Use
//
//	eng := engine.New(store, engine.Options{Adapter: "grpc", Wait: 5 * time.Second})
//
//	req := &engine.Request{Claim: idem.ClaimRequest{Scope: scope, Key: key, Fingerprint: fp}}
//	d := eng.Claim(ctx, req)
//	switch d.Outcome {
//	case engine.Run:
//		x := eng.Start(ctx, req, d)
//		x.Do(func(ctx context.Context) engine.Verdict {
//			res := doTheWork(ctx)
//			return engine.Verdict{Action: engine.Record, Result: res}
//		}, nil)
//	case engine.Replay:
//		// answer d.Claim.Result
//	default:
//		// answer in flight (retry after d.RetryAfter), mismatch, unavailable
//	}
//
// # Lease loss is detected by the deadline
//
// The lease of a claim is measured by the store, on its clock (for pgstore,
// the database's). The engine renews it every third of the lease. It never
// waits for a renewal to fail to decide the claim is gone: it keeps, on the
// process's clock, an estimate of the lease end that is never later than the
// store's (the moment the claim or the last confirmed renewal was sent, plus
// the lease: the store starts the lease after that moment), and a timer
// fires at that estimate minus a safety margin if no renewal was confirmed
// since. The
// timer cancels the work's context with cause [idem.ErrLeaseLost] and
// reports [idem.EventLeaseLost]. Each renewal is bounded by the time left
// until that moment as well as by Options.StoreTimeout, so a renewal that
// hangs (a partitioned database, an exhausted pool) cannot hold the work
// past it. A renewal that finds the claim stale cancels the work at once.
//
// The margin is min(lease/5, [MaxLeaseMargin]): 200 ms for a 1 s lease,
// 2 s for the 30 s default. It exists because the two ends of the lease are
// measured by different clocks. The estimate is early by the claim's round
// trip, but the clocks may run at
// slightly different rates, the timer fires late under load or a GC pause,
// and the work needs time to notice its context and stop. The margin is
// what keeps the cancelled work from overlapping a new owner, which can only
// take the key over once the store's clock says the lease ended.
//
// A work whose lease was lost is never recorded: it was cancelled, so what
// it answers is no answer to the request. Once it returned, its key is
// released (unless a renewal found it taken over already), so a retry runs
// it again at once instead of waiting for the lease to run out. The release
// is fenced by the generation, like every store call with a token: it does
// nothing if another request took the key over meanwhile.
//
// # Client hang-ups
//
// The work's context keeps the values of the client's request context but
// not its cancellation: a client that hangs up (a timeout, a dropped
// connection) is exactly the client that retries, and its retry must find
// the work done and recorded, not a second execution. The work runs to
// completion; the adapter drops what it writes to the gone client without
// telling it, and records the whole answer. The work's context still ends
// on lease loss, and on server shutdown: when Options.Shutdown is done
// (cause [ErrShutdown]; from then on claims are answered Unavailable, so a
// retry goes to another instance). Work cut off by shutdown is released:
// work must honour its context for that to be safe, as for any
// cancellation.
//
// Options.CancelWithClient restores the context of the client: a hang-up
// cancels the work, which is then released, so the retry runs it again,
// unless the adapter still saw a whole answer its policy records (the work
// finished despite the hang-up): that is recorded, since its side effect
// happened. The option is safe only for work whose side effects do not
// survive its context ending (one transaction that commits only while the context
// is live, nothing sent elsewhere first); otherwise the retry repeats them.
//
// # What is recorded
//
// When the work returns, the adapter reads its answer into a [Verdict]
// (record this result, release, or leave the claim to its lease), and the
// engine applies it, except where its own rules decide first:
//
//	the work ...                                          engine does
//	recorded its result itself (in its own transaction)  reports the completion
//	lost its lease while it ran                          releases (fenced): never recorded
//	was cut off by Shutdown                              releases: never recorded
//	was cut off by its client (CancelWithClient)         the adapter's verdict if it records
//	                                                      a whole answer; otherwise releases
//	panicked (other than http.ErrAbortHandler), or        releases
//	  called runtime.Goexit
//	panicked with http.ErrAbortHandler                    the adapter's aborted verdict: what
//	                                                      was sent, if captured whole;
//	                                                      otherwise unreplayable or release
//	returned                                              the adapter's verdict
//
// Complete and release run on a context detached from the client and
// bounded by Options.StoreTimeout. A complete or release that finds the
// claim stale reports [idem.EventStale]; one that fails reports
// [idem.EventStoreError] and leaves the claim to its lease. A complete
// that fails because the store is unavailable ([idem.ErrUnavailable]: the
// database failing over, its connection gone) is first tried again, after
// 50 ms and then twice as long each time up to a second, for as long as the
// lease, as of the last confirmed renewal, keeps the key the work's (less
// the margin): the answer the client is about to receive then still becomes
// the key's record once the store answers again, instead of a retry running
// the work a second time. Each attempt is fenced by the generation; a retry
// that finds the key completed by its own generation (an earlier attempt
// committed, but its answer was lost) is the completion it was after.
//
// # Retry-After
//
// One policy for both adapters: a key in flight is retried after the time
// left on the holder's lease, clamped to [[MinRetryAfter], Lease] (the lease
// end is on the store's clock; the clamp keeps a skewed clock from giving
// an absurd delay), or Options.RetryAfter when the store does not say; an
// unavailable store is retried after the store's hint
// ([idem.UnavailableError].RetryAfter), or Options.RetryAfter. Adapters
// render the delay in their unit: whole seconds rounded up for HTTP's
// Retry-After, milliseconds in mcphttp's error data.
//
// # Events
//
// Every [idem.Event] carries Options.Adapter. The engine reports claimed
// (with Waited and Takeover), replayed, in flight, mismatch and claim store
// errors when the claim is decided; lease lost and renew store errors from
// the renewal; completed, released, stale and complete or release store
// errors when the work is finished. No goroutine or timer outlives
// [Execution.Finish].
package engine

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
//			return engine.Verdict{Action: engine.Complete, Result: res}
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
// past it. A renewal that fails is tried again after half the time left
// until then (at most a third of the lease, at least 10 ms, so that a store
// failing at once is not retried in a loop). A renewal that finds the
// claim stale cancels the work at once.
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
// A work whose lease was lost, and that still returned a whole answer its
// adapter records, is recorded: it was cancelled too late, its side effect
// happened, and a retry must replay that answer instead of running it
// again. The completion is fenced by the generation, like every store call
// with a token: it records nothing if another request took the key over
// meanwhile. A work that answered nothing to record (it stopped when its
// context ended, as it should) is released once it returned, so a retry
// runs it again at once instead of waiting for the lease to run out; the
// release is fenced the same way. When a renewal found the claim taken
// over, the engine does neither: the key is the new owner's, and both
// would find the claim stale.
//
// # Client hang-ups
//
// The work's context keeps the values of the client's request context but
// not its cancellation: a client that hangs up (a timeout, a dropped
// connection) is exactly the client that retries, and its retry must find
// the work done and recorded, not a second execution. The work runs to
// completion; the adapter drops what it writes to the gone client without
// telling it, and records the whole answer. The work's context still ends
// on lease loss, at its deadline (see below), and on server shutdown: when
// Options.Shutdown is done
// (cause [ErrShutdown]; from then on claims are answered Unavailable, so a
// retry goes to another instance). Work cut off by shutdown that answers
// nothing to record is released: work must honour its context for that to
// be safe, as for any cancellation. Work that finished anyway, with a whole
// answer its adapter records, is recorded, as for a lost lease.
//
// Options.CancelWithClient restores the context of the client: a hang-up
// cancels the work, which is then released, so the retry runs it again,
// unless the adapter still saw a whole answer its policy records (the work
// finished despite the hang-up): that is recorded, since its side effect
// happened. The option is safe only for work whose side effects do not
// survive its context ending (one transaction that commits only while the context
// is live, nothing sent elsewhere first); otherwise the retry repeats them.
//
// # A deadline for the work
//
// A work blocked in a call with no timeout of its own would otherwise hold
// its key for the life of the process: its renewals keep succeeding, and
// every retry is told the key is in flight. The work's context therefore
// has a deadline: Options.MaxExecution after [Engine.Start]
// ([DefaultMaxExecution] by default), or the deadline of the client's
// context if that is earlier (http.TimeoutHandler, a gateway's timeout: the
// detached context keeps it). At the deadline the context ends with cause
// [ErrExecutionTimeout] and the lease is no longer renewed. A work that
// answers nothing to record is released when it returns, and a retry runs
// it again; one that finished its side effect anyway and answers whole is
// recorded, like any work whose context ended; one that never returns keeps
// its claim only until the lease runs out, after which a retry takes the
// key over (its goroutine is still blocked: the engine cannot end it). The
// deadline never completes the key.
//
// # What is recorded
//
// When the work returns, the adapter reads its answer into a [Verdict]
// (record this result, release, or leave the claim to its lease), and the
// engine applies it, except where its own rules decide first. The rule for
// a work whose context ended (its lease was lost, its deadline passed,
// Shutdown, its client with CancelWithClient) is one: a whole answer the
// adapter's policy records is recorded, fenced by the generation; a work
// whose adapter cannot tell whether it answered (Verdict LeaveToLease) is left to
// its lease; otherwise, the key is released.
// Whether the context ended only matters when there is no such answer, so a
// Shutdown that fires just as the work returns does not change what its
// answer becomes. LeaveToLease holds after a cut-off because the release is safe
// only for work known to have answered nothing: mcphttp says LeaveToLease when the
// call's stream ended without its response, which a tool that finished its
// effect anyway may have sent where the wrapper cannot see it.
//
//	the work ...                                          engine does
//	recorded its result itself (in its own transaction,   reports the completion
//	  or through Execution.Commit)
//	lost its claim to a takeover (a renewal found it      nothing: the key is the new
//	  stale)                                              owner's
//	returned a whole answer to record (Verdict            records it (fenced: nothing if
//	  Complete), even after its lease was lost, its       the key was taken over)
//	  deadline passed, or Shutdown or its client cut it
//	  off
//	cannot be told to have answered or not (Verdict       leaves the claim to its lease: a
//	  LeaveToLease), cut off or not                       retry waits, then takes it over
//	lost its lease, ran past its deadline, or was cut     releases (fenced)
//	  off by Shutdown or its client, and answered
//	  nothing to record
//	ran past its deadline and does not return             stops renewing: the claim runs out
//	                                                      with its lease, then a retry takes
//	                                                      the key over
//	panicked (other than http.ErrAbortHandler), or        releases
//	  called runtime.Goexit
//	panicked with http.ErrAbortHandler                    the adapter's aborted verdict: what
//	                                                      was sent, if captured whole;
//	                                                      otherwise unreplayable or release
//	returned                                              the adapter's verdict
//
// Complete and release run on a context detached from the client and
// bounded by Options.StoreTimeout. A complete that fails with an
// unavailable store ([idem.ErrUnavailable]: a dropped connection, a
// failover) is tried again, after a short jittered pause that doubles up
// to a second, until StoreTimeout or, if that is later, until the lease's
// end (less the margin, as of the last confirmed renewal): the work ran,
// and without its result a retry after the lease would run it again, and
// until the lease ends nobody can take the key over, so a database that
// fails over faster than the lease is ridden out. Each attempt is bounded
// by StoreTimeout. The generation makes that safe: an attempt that took
// effect although its answer was lost leaves the key completed by this
// generation, which the next attempt finds and reports as the completion.
// A complete or release that finds the claim stale reports
// [idem.EventStale]; one that fails (for a complete, still when both bounds
// ran out) reports [idem.EventStoreError] and leaves the claim to its
// lease.
//
// # In a transaction
//
// A request with Request.InTransaction is claimed inside a transaction of
// the store's database ([idem.TxStore]: pgstore), for work whose side
// effects are rows in that database. The work runs in the transaction (its
// context carries it; [Execution.TxContext] grafts it onto another
// context), and the verdict ends it: Complete commits the result with the
// work's writes in one commit ([idem.TxClaim].Commit), everything else
// rolls all of it back, so a retry runs at once. Nothing is renewed: until
// the commit nobody else can see the claim, and a duplicate waits in the
// database for the transaction to end, up to Options.Wait, then finds the
// result (in flight with no lease end if the wait ran out: Retry-After is
// Options.RetryAfter). There is no lease to lose, and the lease plays no
// part: the work's deadline (Options.MaxExecution) bounds it as it bounds
// any work, and, as a claim in a transaction shows it is alive by its
// statements, the store ends a transaction left idle between two
// statements for Options.IdleInTransaction (MaxExecution by default), and
// a statement running past MaxExecution, even if this process cannot. When
// it does, for a work that paused or ran that long, nothing commits, and
// [Execution.TxLimitErr] says which bound: the engine logs it as an error
// with the setting to raise ([ExplainTxLimit]), reports the release with
// that cause, and the adapter answers it rather than "retry", which would
// end the same way. A whole answer to record after the deadline still
// commits, as for any work; one that answered nothing to record is rolled
// back.
// LeaveToLease (an MCP stream that ended without its response) rolls back
// too: there is no lease to leave the claim to. A key held by a two-phase
// claim is waited for with the store's Wait, then claimed again in a new
// transaction; a two-phase claim of a key held in a transaction waits for
// that transaction in the store, up to Options.Wait too
// ([idem.ClaimRequest].Wait, through [idem.ClaimWait]). An adapter that holds the work's answer back until the
// commit sends it only if [Execution.Committed], or if it was a failure
// not to be recorded; [Execution.Commit] commits early, for an adapter that
// answers before the work returns.
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
// the renewal; completed, released, left (to its lease), stale and complete
// or release store errors when the work is finished: every claim the
// engine reports claimed ends in one of these, or in lease lost. No
// goroutine or timer outlives [Execution.Finish].
package engine

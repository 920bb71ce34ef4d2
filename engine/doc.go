// Package engine is the execution engine shared by idem's adapters
// (middleware for net/http, mcphttp for MCP): claim, run the protected
// work under a context the engine controls while it renews the lease,
// decide record or release, complete or release, and report
// [idem.Event]s. An adapter keeps only what belongs to its protocol:
// parsing the request, capturing the answer in its format, and writing its
// errors. A third-party adapter (gRPC, a queue consumer) can use it the
// same way. The reasons behind each rule are in [design.md, "The execution
// engine"].
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
// # Lease loss
//
// The lease is renewed every third of it; the work's context ends with
// cause [idem.ErrLeaseLost] when no renewal was confirmed by an early
// estimate of the lease end less min(lease/5, [MaxLeaseMargin]).
//
// # Client hang-ups
//
// The work's context keeps the client's values, not its cancellation (the
// client that hangs up is the one that retries). It ends on lease loss, at
// its deadline (Options.MaxExecution, [DefaultMaxExecution], or the client's
// earlier one; [ErrExecutionTimeout]) and when Options.Shutdown is done
// ([ErrShutdown]; later claims are Unavailable). Work must honour its
// context. Options.CancelWithClient restores the client's cancellation.
//
// # What is recorded
//
// The adapter reads the work's answer into a [Verdict]: Record, release, or
// Leave the claim to its lease. Whatever ended the work's context, a whole
// answer the adapter records is recorded, fenced by the generation; Leave
// leaves the claim; anything else is released once the work returned. A
// claim taken over is left alone. Complete is retried on an unavailable
// store until the later of Options.StoreTimeout and the lease's end; see
// [design.md, "What is recorded"] for every case.
//
// # In a transaction
//
// With Request.InTransaction the claim is taken inside a transaction of the
// store's database ([idem.TxStore]), the work runs in it
// ([Execution.TxContext]), and Record commits claim, result and writes
// together; anything else rolls back. [Execution.TxLimitErr] names a bound
// the database enforced; an adapter holding the answer sends it only if
// [Execution.Committed]. See [design.md, "Two ways to claim"].
//
// # Retry-After
//
// A key in flight is retried after how long the engine's work typically
// runs (a moving average of the runs it recorded), else the wait a retry is
// granted (Options.Wait), clamped to [[MinRetryAfter], the holder's
// remaining lease (itself at most Lease)]; else Options.RetryAfter when the
// lease end is unknown. An unavailable store after its hint
// ([idem.UnavailableError].RetryAfter), else Options.RetryAfter.
//
// # Events
//
// Every [idem.Event] carries Options.Adapter. A key the store rejected is
// reported refused (reason invalid_key). Every claim reported claimed
// ends in completed, released, left, stale, a store error or lease lost. No
// goroutine or timer outlives [Execution.Finish].
//
// [design.md, "The execution engine"]: https://github.com/idemkit/idem/blob/main/docs/design.md#the-execution-engine
// [design.md, "What is recorded"]: https://github.com/idemkit/idem/blob/main/docs/design.md#what-is-recorded
// [design.md, "Two ways to claim"]: https://github.com/idemkit/idem/blob/main/docs/design.md#two-ways-to-claim
package engine

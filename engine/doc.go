// Package engine is the execution engine shared by idem's adapters
// (middleware for net/http, mcphttp for MCP): claim, run the protected work
// under a context the engine controls while it renews the lease, complete or
// release, and report each [idem.Event]. An adapter keeps only its protocol:
// parsing the request, capturing the answer in its format, writing its
// errors; a third-party adapter (gRPC, a queue consumer) uses it the same
// way. The rules and their reasons: [design.md, "The execution engine"].
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
// # The work's context
//
// It keeps the client's values, not its cancellation
// (Options.CancelWithClient restores it). It ends with cause
// [idem.ErrLeaseLost] when no renewal was confirmed before an early estimate
// of the lease end less min(lease/5, [MaxLeaseMargin]); at its deadline
// (Options.MaxExecution, [DefaultMaxExecution], or the client's earlier one;
// [ErrExecutionTimeout]); and when Options.Shutdown is done ([ErrShutdown];
// later claims are Unavailable). Work must honour its context; one already
// ended when [Engine.Start] returns means the work must not begin: the
// adapters call nothing, release, and tell the client to retry.
//
// # What is recorded
//
// The adapter reads the work's answer into a [Verdict]: Record, release, or
// Leave the claim to its lease. Whatever ended the work's context, a whole
// recordable answer is recorded, fenced by the generation; anything else is
// released once the work returned; a claim taken over is left alone.
// Complete is retried on an unavailable store until the later of
// Options.StoreTimeout and the lease's end. With Request.InTransaction the
// work runs in the claim's transaction ([Execution.TxContext]; an
// [idem.TxStore]) and Record commits claim, result and writes together.
// Every case: [design.md, "What is recorded"]; the transaction: [design.md,
// "Two ways to claim"].
//
// # Retry-After and events
//
// A key in flight is retried after the work's typical run time, else
// Options.Wait, clamped to [[MinRetryAfter], the holder's remaining lease];
// Options.RetryAfter when the lease end is unknown or the store gave no
// hint. Every [idem.Event] carries Options.Adapter. No goroutine or timer
// outlives [Execution.Finish].
//
// [design.md, "The execution engine"]: https://github.com/idemkit/idem/blob/main/docs/design.md#the-execution-engine
// [design.md, "What is recorded"]: https://github.com/idemkit/idem/blob/main/docs/design.md#what-is-recorded
// [design.md, "Two ways to claim"]: https://github.com/idemkit/idem/blob/main/docs/design.md#two-ways-to-claim
package engine

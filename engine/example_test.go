package engine_test

import (
	"context"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/memstore"
)

// An adapter for another transport: claim, run the work under the engine,
// replay a retry.
func Example() {
	eng := engine.New(memstore.New(memstore.Options{}), engine.Options{Adapter: "queue"})
	key, _ := idem.ParseClientKey("order-42")
	runs := 0

	handle := func(ctx context.Context) string {
		req := &engine.Request{
			Claim:   idem.ClaimRequest{Scope: "tenant-a", Key: key},
			Observe: func(e idem.Event) { fmt.Println("event:", e.Kind, e.Adapter) },
		}
		d := eng.Claim(ctx, req)
		switch d.Outcome {
		case engine.Run:
			var answer string
			eng.Start(ctx, req, d).Do(func(ctx context.Context) engine.Verdict {
				runs++
				answer = fmt.Sprintf("charged (run %d)", runs)
				return engine.Verdict{Action: engine.Complete, Result: idem.Result{Status: 200, Body: []byte(answer)}}
			}, nil)
			return answer
		case engine.Replay:
			return string(d.Claim.Result.Body) + ", replayed"
		}
		return d.Outcome.String()
	}

	fmt.Println(handle(context.Background()))
	fmt.Println(handle(context.Background()))
	// Output:
	// event: claimed queue
	// event: completed queue
	// charged (run 1)
	// event: replayed queue
	// charged (run 1), replayed
}

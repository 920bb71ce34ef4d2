package idemcall_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemcall"
	"github.com/idemkit/idem/memstore"
)

type receipt struct {
	Invoice string `json:"invoice"`
	Cents   int    `json:"cents"`
}

// A nightly billing job that may be started twice (a retried cron run, two
// replicas): each customer is charged once per night, and the second run
// gets the first one's receipts.
func ExampleDo() {
	caller := idemcall.New(memstore.New(memstore.Options{}), idemcall.Options{})
	charges := 0
	charge := func(customer string) (receipt, bool, error) {
		call := idemcall.Call{Scope: "billing", Key: "2026-12-01/" + customer}
		return idemcall.Do(context.Background(), caller, call, func(ctx context.Context) (receipt, error) {
			charges++
			return receipt{Invoice: fmt.Sprintf("inv-%d", charges), Cents: 1200}, nil
		})
	}
	for run := 1; run <= 2; run++ {
		r, replayed, err := charge("acme")
		fmt.Printf("run %d: %+v replayed=%v err=%v\n", run, r, replayed, err)
	}
	fmt.Println("charges:", charges)
	// Output:
	// run 1: {Invoice:inv-1 Cents:1200} replayed=false err=<nil>
	// run 2: {Invoice:inv-1 Cents:1200} replayed=true err=<nil>
	// charges: 1
}

// What a call is told when it cannot have the value: the key was used for
// another input, or another call holds it.
func ExampleDo_errors() {
	caller := idemcall.New(memstore.New(memstore.Options{}), idemcall.Options{})
	ctx := context.Background()
	send := func(to string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return "sent to " + to, nil }
	}
	call := idemcall.Call{Key: "welcome-mail", Fingerprint: idemcall.Fingerprint([]byte("ada@example.com"))}
	fmt.Println(idemcall.Do(ctx, caller, call, send("ada@example.com")))

	call.Fingerprint = idemcall.Fingerprint([]byte("bob@example.com"))
	_, _, err := idemcall.Do(ctx, caller, call, send("bob@example.com"))
	fmt.Println("mismatch:", errors.Is(err, idem.ErrFingerprintMismatch))

	// A call whose function is still running holds its key: a second call
	// with no Wait is told so at once.
	_, _, _ = idemcall.Do(ctx, caller, idemcall.Call{Key: "report"}, func(ctx context.Context) (int, error) {
		_, _, err := idemcall.Do(ctx, caller, idemcall.Call{Key: "report"}, func(context.Context) (int, error) { return 2, nil })
		var inFlight *idemcall.InFlightError
		fmt.Println("in flight:", errors.As(err, &inFlight))
		return 1, nil
	})

	// A function that fails records nothing: the next call runs it.
	_, _, err = idemcall.Do(ctx, caller, idemcall.Call{Key: "flaky"}, func(context.Context) (int, error) { return 0, errors.New("timeout") })
	fmt.Println("first:", err)
	fmt.Println(idemcall.Do(ctx, caller, idemcall.Call{Key: "flaky"}, func(context.Context) (int, error) { return 7, nil }))
	// Output:
	// sent to ada@example.com false <nil>
	// mismatch: true
	// in flight: true
	// first: timeout
	// 7 false <nil>
}

// A duplicate waits for the call in flight (Engine.Wait) and gets its value.
func ExampleOptions_wait() {
	caller := idemcall.New(memstore.New(memstore.Options{}), idemcall.Options{Engine: engine.Options{Wait: 5e9}})
	ctx := context.Background()
	started, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = idemcall.Do(ctx, caller, idemcall.Call{Key: "export"}, func(context.Context) (string, error) {
			close(started)
			return "export.csv", nil
		})
	}()
	<-started
	v, replayed, err := idemcall.Do(ctx, caller, idemcall.Call{Key: "export"}, func(context.Context) (string, error) { return "again.csv", nil })
	<-done
	fmt.Println(v, replayed, err)
	// Output:
	// export.csv true <nil>
}

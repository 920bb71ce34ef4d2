package idem_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

// The claim protocol, on the transition table every store implements: the
// first claim of a key acquires it and runs the side effect; a duplicate
// while it runs is told it is in flight; once the result is recorded every
// retry gets it back; the same key for another request is a mismatch; and
// a claim whose owner died (its lease ran out) is taken over under a new
// generation, so the old owner can no longer record anything.
func Example() {
	table := idem.NewStateMachine(idem.StateMachineConfig{})
	now := time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)
	key, err := idem.ParseClientKey("order-42") // what the client sent as Idempotency-Key
	if err != nil {
		panic(err)
	}
	order := idem.ClaimRequest{Scope: "tenant-1", Key: key, Fingerprint: `POST /orders {"item":7}`, Lease: 30 * time.Second}

	first, _ := table.Claim(order, now)
	fmt.Println("first:", first.Status, "generation", first.Token.Generation)
	dup, _ := table.Claim(order, now.Add(time.Second))
	fmt.Println("duplicate while it runs:", dup.Status)
	if err := table.Complete(first.Token, idem.Result{Status: 201, Body: []byte(`{"id":1}`)}, now.Add(2*time.Second)); err != nil {
		panic(err)
	}
	retry, _ := table.Claim(order, now.Add(time.Minute))
	fmt.Println("retry:", retry.Status, retry.Result.Status, string(retry.Result.Body))
	other := order
	other.Fingerprint = `POST /orders {"item":8}`
	_, err = table.Claim(other, now.Add(time.Minute))
	fmt.Println("another request, same key:", errors.Is(err, idem.ErrFingerprintMismatch))

	// A claim whose owner crashed.
	crashed, _ := table.Claim(idem.ClaimRequest{Scope: "tenant-1", Key: idem.KeyFromRequestID(idem.IntRequestID(7)), Lease: 30 * time.Second}, now)
	takeover, _ := table.Claim(idem.ClaimRequest{Scope: "tenant-1", Key: crashed.Token.Key, Lease: 30 * time.Second}, now.Add(time.Minute))
	fmt.Println("after the lease:", takeover.Status, "takeover", takeover.Takeover, "generation", takeover.Token.Generation)
	var stale *idem.StaleClaimError
	err = table.Complete(crashed.Token, idem.Result{Status: 200}, now.Add(time.Minute))
	fmt.Println("the crashed owner completes:", errors.As(err, &stale))
	// Output:
	// first: acquired generation 1
	// duplicate while it runs: in flight
	// retry: completed 201 {"id":1}
	// another request, same key: true
	// after the lease: acquired takeover true generation 3
	// the crashed owner completes: true
}

// Keys are built by constructors whose encodings never meet: a key a
// client chose, a request id, a request within a session, an MCP method
// call.
func ExampleKey() {
	clientKey, _ := idem.ParseClientKey("order/42")
	fmt.Println(clientKey)
	fmt.Println(idem.KeyFromRequestID(idem.IntRequestID(7)))
	fmt.Println(idem.KeyForRequest("sess-1", idem.StringRequestID("7")))
	fmt.Println(idem.KeyForMethodCall("sess-1", idem.IntRequestID(7), "tools/call", "create_invoice"))
	// Output:
	// key/order%2F42
	// id/7
	// req/sess-1/7
	// call/sess-1/7/tools%2Fcall/create_invoice
}

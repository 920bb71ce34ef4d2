package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The demo's own invoice handler over PostgreSQL: a client that hangs up
// while its request runs, then retries, gets one invoice, and its retry is
// a replay of the invoice created while it was gone.
func TestClientHangUpThenRetry(t *testing.T) {
	t.Parallel()
	dbURL, conn := pgURL(t)
	d := startDemo(t, dbURL)
	body := `{"customer":"hangup","amount_cents":4200,"delay_ms":500}`

	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/invoices", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "hangup-1")
	sent := make(chan error, 1)
	go func() {
		resp, err := d.client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	waitForInFlight(t, conn, "key/hangup-1")
	cancel() // the client hangs up while the handler waits out its delay
	if err := <-sent; err == nil {
		t.Fatal("the request that hung up got an answer")
	}

	time.Sleep(time.Second)
	retry := d.do("POST", "/invoices", "hangup-1", body)
	mustStatus(t, "retry", retry, http.StatusCreated)
	if got := retry.header.Get("Idempotent-Replayed"); got != "true" {
		t.Fatalf("retry Idempotent-Replayed %q, want true: the retry ran the handler again (%s)", got, retry.body)
	}
	n := 0
	for _, inv := range d.invoices() {
		if inv.Customer == "hangup" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d invoices for the request, want 1", n)
	}
}

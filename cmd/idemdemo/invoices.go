package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/memstore"
)

// Invoice is what POST /invoices creates and GET /invoices lists.
type Invoice struct {
	ID          int64  `json:"id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

// invoiceRequest is the body of POST /invoices, and the arguments of the
// create_invoice MCP tool.
type invoiceRequest struct {
	Customer    string `json:"customer" jsonschema:"who is billed"`
	AmountCents int64  `json:"amount_cents" jsonschema:"the amount in cents, positive"`
	// DelayMS makes the handler sleep before it creates the invoice, to
	// try duplicates of an in-flight request and shutdown.
	DelayMS int64 `json:"delay_ms,omitempty" jsonschema:"milliseconds to wait before creating the invoice (demo only)"`
}

// maxDelay bounds delay_ms: a demo knob, not a way to hold a connection for
// an hour.
const maxDelay = 10 * time.Minute

// validate returns what is wrong with req, for a 400.
func (req invoiceRequest) validate() error {
	switch {
	case strings.TrimSpace(req.Customer) == "":
		return errors.New("customer is required")
	case req.AmountCents <= 0:
		return errors.New("amount_cents must be a positive integer")
	case req.DelayMS < 0 || time.Duration(req.DelayMS)*time.Millisecond > maxDelay:
		return fmt.Errorf("delay_ms must be between 0 and %d", maxDelay.Milliseconds())
	}
	return nil
}

// decodeInvoiceRequest reads a POST /invoices body: one JSON object with
// known members only.
func decodeInvoiceRequest(body io.Reader) (invoiceRequest, error) {
	var req invoiceRequest
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("the body is not a valid invoice JSON object: %v", err)
	}
	if dec.More() {
		return req, errors.New("the body holds more than one JSON value")
	}
	return req, req.validate()
}

// invoiceStore keeps invoices.
type invoiceStore interface {
	// create creates the invoice req asks for and answers the request with
	// 201 and its JSON. Where the invoices and the idem store share a
	// database, the invoice and the recorded response commit together.
	create(w http.ResponseWriter, r *http.Request, req invoiceRequest)
	list(ctx context.Context) ([]Invoice, error)
}

// createInvoice is POST /invoices, behind the idempotency middleware.
//
// Its 400 answers are recorded like its 201s (the middleware's default
// record policy): a validation error is a deterministic answer to this exact
// body, and a corrected body is a different request that needs a new key
// (the same key with another body is answered 422).
func (a *app) createInvoice(w http.ResponseWriter, r *http.Request) {
	req, err := decodeInvoiceRequest(r.Body)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "Invalid invoice", err.Error())
		return
	}
	if req.DelayMS > 0 {
		t := time.NewTimer(time.Duration(req.DelayMS) * time.Millisecond)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			// Shutdown, a lost claim (its lease could not be renewed,
			// as in a database outage) or the request's deadline
			// (MaxExecution) cancelled the request before it created
			// anything; a client that hangs up does not (the handler
			// runs on, and its retry gets the replay). Nothing is
			// recorded: the middleware releases the claim of a handler
			// cut off that answers a 503, so a retry runs again, and
			// says when.
			why := "the server is shutting down"
			switch cause := context.Cause(r.Context()); {
			case errors.Is(cause, idem.ErrLeaseLost):
				why = "its idempotency claim could not be kept"
			case errors.Is(cause, engine.ErrExecutionTimeout):
				why = "it ran past its deadline"
			}
			w.Header().Set("Retry-After", "1")
			writeProblem(w, http.StatusServiceUnavailable, "Request cancelled",
				"The request was cancelled before the invoice was created ("+why+"). Retry with the same Idempotency-Key.")
			return
		}
	}
	a.be.invoices.create(w, r, req)
}

func (a *app) listInvoices(w http.ResponseWriter, r *http.Request) {
	invs, err := a.be.invoices.list(r.Context())
	if err != nil {
		a.logger.Warn("listing invoices failed", "err", err)
		writeProblem(w, http.StatusServiceUnavailable, "Database unavailable", "The invoices could not be read.")
		return
	}
	if invs == nil {
		invs = []Invoice{}
	}
	writeJSON(w, http.StatusOK, invs)
}

// invoiceJSON renders an invoice as the API answers it: one JSON object and
// a newline.
func invoiceJSON(inv Invoice) []byte {
	b, _ := json.Marshal(inv) // cannot fail: strings and ints
	return append(b, '\n')
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	if err := enc.Encode(v); err != nil {
		writeProblem(w, http.StatusInternalServerError, "Internal error", "The response could not be encoded.")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// writeProblem answers with an RFC 9457 problem+json.
func writeProblem(w http.ResponseWriter, status int, title, detail string) {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{"about:blank", title, status, detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// memoryInvoices keeps invoices in memory, next to memstore: both are lost
// on restart, together.
type memoryInvoices struct {
	mu       sync.Mutex
	invoices []Invoice
}

func (m *memoryInvoices) create(w http.ResponseWriter, r *http.Request, req invoiceRequest) {
	m.mu.Lock()
	inv := Invoice{ID: int64(len(m.invoices)) + 1, Customer: req.Customer, AmountCents: req.AmountCents}
	m.invoices = append(m.invoices, inv)
	m.mu.Unlock()
	// The middleware records this response when the handler returns.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(invoiceJSON(inv))
}

func (m *memoryInvoices) list(context.Context) ([]Invoice, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Invoice(nil), m.invoices...), nil
}

func newMemoryBackend(cfg config) *backend {
	store := memstore.New(memstore.Options{Lease: cfg.lease, Retention: cfg.retention})
	return &backend{
		name:     "memory",
		store:    store,
		invoices: &memoryInvoices{},
		health:   func(context.Context) error { return nil },
		close:    func() {},
	}
}

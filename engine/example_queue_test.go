package engine_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// message is a delivery from a queue that delivers at least once: the same
// message (the same ID) may come again after a crash, a timeout or a
// rebalance.
type message struct {
	ID   string
	Body string
}

// A queue consumer that does each message's work once, however often the
// queue delivers it: the message id is the key, and the work's database
// writes commit in one transaction with the recorded answer
// (pgstore.CompleteTx). A redelivery finds the answer and is acknowledged
// without running; a delivery whose transaction did not commit left
// nothing, and its redelivery runs.
//
// It needs a database (DATABASE_URL); TestExampleQueueConsumer runs it on
// a fresh schema and checks what it prints.
func Example_queueConsumer() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		log.Fatal(err)
	}
	store, err := pgstore.New(pool, pgstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS shipments (id bigserial PRIMARY KEY, order_ref text NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	eng := engine.New(store, engine.Options{Adapter: "queue"})
	carrierDown := true // the first attempt at order-43 fails

	// ship is the work: a shipment row, committed with the answer.
	ship := func(ctx context.Context, tok idem.Token, m message) (idem.Result, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return idem.Result{}, err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) // no-op after Commit
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO shipments (order_ref) VALUES ($1) RETURNING id`, m.Body).Scan(&id); err != nil {
			return idem.Result{}, err
		}
		if m.Body == "order-43" && carrierDown {
			carrierDown = false
			return idem.Result{}, errors.New("the carrier is down") // rolled back: no shipment, no answer
		}
		res := idem.Result{Status: 200, Body: fmt.Appendf(nil, "shipment %d for %s", id, m.Body)}
		if err := store.CompleteTx(ctx, tx, tok, res); err != nil {
			return idem.Result{}, err // stale: another consumer took the message over
		}
		return res, tx.Commit(ctx)
	}

	// handle processes one delivery and reports whether to acknowledge it
	// (false: let the queue deliver it again later).
	handle := func(ctx context.Context, m message) (ack bool) {
		key, err := idem.ParseClientKey(m.ID)
		if err != nil {
			fmt.Println(m.ID, "unusable id:", err) // dead-letter it
			return true
		}
		sum := sha256.Sum256([]byte(m.Body))
		req := &engine.Request{Claim: idem.ClaimRequest{Scope: "queue:shipments", Key: key, Fingerprint: hex.EncodeToString(sum[:])}}
		d := eng.Claim(ctx, req)
		switch d.Outcome {
		case engine.Replay:
			fmt.Printf("%s: already done (%s)\n", m.ID, d.Claim.Result.Body)
			return true
		case engine.Mismatch:
			fmt.Printf("%s: the id was reused for another message\n", m.ID) // dead-letter it
			return true
		case engine.Run:
		default: // InFlight (another consumer has it), Unavailable
			fmt.Printf("%s: %v, later\n", m.ID, d.Outcome)
			return false
		}
		x := eng.Start(ctx, req, d)
		x.Do(func(ctx context.Context) engine.Verdict {
			res, err := ship(ctx, x.Token(), m)
			if err != nil {
				fmt.Printf("%s: %v, later\n", m.ID, err)
				return engine.Verdict{Action: engine.Release, Why: err.Error()} // a redelivery runs again
			}
			fmt.Printf("%s: %s\n", m.ID, res.Body)
			ack = true
			return engine.Verdict{Action: engine.CompletedByWork, Result: res}
		}, nil)
		return ack
	}

	for _, m := range []message{
		{"msg-1", "order-42"},
		{"msg-1", "order-42"}, // redelivered
		{"msg-2", "order-43"}, // fails, not acknowledged
		{"msg-2", "order-43"}, // redelivered: runs again
		{"msg-1", "order-44"}, // the id of another message
	} {
		handle(ctx, m)
	}
	var shipments int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM shipments`).Scan(&shipments); err != nil {
		log.Fatal(err)
	}
	fmt.Println("shipments:", shipments)
	// Prints:
	// msg-1: shipment 1 for order-42
	// msg-1: already done (shipment 1 for order-42)
	// msg-2: the carrier is down, later
	// msg-2: shipment 3 for order-43
	// msg-1: the id was reused for another message
	// shipments: 2
}

func TestExampleQueueConsumer(t *testing.T) {
	testdb.RunExample(t, "example_queue_test.go", "Example_queueConsumer", Example_queueConsumer)
}

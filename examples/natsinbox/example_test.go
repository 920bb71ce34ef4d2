package natsinbox_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/examples/natsinbox"
	"github.com/idemkit/idem/idemcall"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// A JetStream consumer whose messages each write one shipment row, however
// often they are delivered: the row and the record of the message's id
// commit in one transaction.
//
// It needs PostgreSQL (DATABASE_URL) and a nats-server with JetStream
// (NATS_URL); TestExample runs it and checks what it prints.
func Example() {
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
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		log.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{Durable: "shipping", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		log.Fatal(err)
	}
	for _, order := range []string{"order-42", "order-43"} {
		if _, err := js.Publish(ctx, "orders.new", []byte(order), jetstream.WithMsgID(order)); err != nil {
			log.Fatal(err)
		}
	}

	inbox := &natsinbox.Inbox{
		Caller: idemcall.New(store, idemcall.Options{InTransaction: true}),
		Scope:  "shipping",
		Work: func(ctx context.Context, msg jetstream.Msg) error {
			_, err := pgstore.TxFrom(ctx).Exec(ctx, `INSERT INTO shipments (order_ref) VALUES ($1)`, string(msg.Data()))
			return err
		},
	}
	batch, err := cons.Fetch(2)
	if err != nil {
		log.Fatal(err)
	}
	for msg := range batch.Messages() {
		fmt.Println(string(msg.Data()), inbox.Handle(ctx, msg))
	}
	// Prints:
	// order-42 <nil>
	// order-43 <nil>
}

func TestExample(t *testing.T) {
	t.Setenv("NATS_URL", startNATS(t))
	testdb.RunExample(t, "example_test.go", "Example", Example)
}

package natsinbox_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/examples/natsinbox"
	"github.com/idemkit/idem/idemcall"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// startNATS starts Debian's nats-server with JetStream on a free loopback
// port, its store in a temporary directory, and returns its URL. Without
// the binary the test is skipped, and fails when CI is set.
func startNATS(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	for _, p := range []string{"/usr/sbin/nats-server", "/usr/bin/nats-server"} {
		if err == nil {
			break
		}
		if _, serr := os.Stat(p); serr == nil {
			bin, err = p, nil
		}
	}
	if err != nil {
		msg := "nats-server is not installed (Debian: apt-get install nats-server)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	cmd := exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", port, "-sd", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "nats://127.0.0.1:" + port
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) { // a process starting up
		nc, err := nats.Connect(url)
		if err == nil {
			nc.Close()
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server did not accept connections: %v", err)
		}
	}
}

// TestEveryMessageOnce: 60 orders, published once each, consumed by two
// consumers sharing one durable while JetStream redelivers under every
// fault the test can make: an ack wait that runs out while the work runs
// (the redelivery finds its key in flight), work that fails and is Nak'ed
// (rolled back, run again), a delivery whose work committed but whose ack
// was never sent (the redelivery replays and acks), and a consumer whose
// connection closes mid-message and is started again. Every message ends
// with exactly one shipment row and is acknowledged, and every message
// acknowledged is recorded.
func TestEveryMessageOnce(t *testing.T) {
	t.Parallel()
	url := startNATS(t)
	pool, _ := testdb.Pool(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE shipments (id bigserial PRIMARY KEY, msg_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(pool, pgstore.Options{PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	const ackWait = 400 * time.Millisecond
	if _, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{Durable: "shipping", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait}); err != nil {
		t.Fatal(err)
	}
	const messages = 60
	for i := range messages {
		m := nats.NewMsg(fmt.Sprintf("orders.%d", i))
		m.Data = fmt.Appendf(nil, "order-%d", i)
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("order-%d", i))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	caller := idemcall.New(store, idemcall.Options{InTransaction: true, Engine: engine.Options{Owner: "shipping"}})
	var (
		mu         sync.Mutex
		acked      = map[string]bool{}
		deliveries = map[string]int{}
		runs       atomic.Int64
	)
	// fault decides what goes wrong with a delivery: on the first
	// delivery of every sixth message (offset 1) the work outlives the
	// ack wait, (offset 2) it fails, (offset 3) its ack is lost; the
	// first delivery of order-4 finds its consumer killed mid-message.
	fault := func(id string) (slow, fail, dropAck, crash bool) {
		mu.Lock()
		defer mu.Unlock()
		deliveries[id]++
		n, _ := strconv.Atoi(id[len("order-"):])
		first := deliveries[id] == 1
		return first && n%6 == 1, first && n%6 == 2, first && n%6 == 3, first && n == 4
	}
	consume := func(ctx context.Context, name string) error {
		cnc, err := nats.Connect(url, nats.Name(name))
		if err != nil {
			return err
		}
		defer cnc.Close()
		cjs, err := jetstream.New(cnc)
		if err != nil {
			return err
		}
		cons, err := cjs.Consumer(ctx, "ORDERS", "shipping")
		if err != nil {
			return err
		}
		for ctx.Err() == nil && !cnc.IsClosed() {
			batch, err := cons.Fetch(10, jetstream.FetchMaxWait(200*time.Millisecond))
			if err != nil {
				continue
			}
			for msg := range batch.Messages() {
				id, _ := natsinbox.KeyOf(msg)
				slow, fail, dropAck, crash := fault(id)
				in := &natsinbox.Inbox{Caller: caller, Scope: "shipping", Retry: 50 * time.Millisecond,
					Work: func(ctx context.Context, msg jetstream.Msg) error {
						runs.Add(1)
						if _, err := pgstore.TxFrom(ctx).Exec(ctx, `INSERT INTO shipments (msg_id) VALUES ($1)`, id); err != nil {
							return err
						}
						switch {
						case crash:
							cnc.Close() // the consumer dies with the message in hand
						case slow:
							time.Sleep(2 * ackWait) // redelivered meanwhile, to either consumer
						case fail:
							return errors.New("the carrier is down")
						}
						return nil
					}}
				if err := in.Handle(ctx, lossy{msg, dropAck}); err == nil && !dropAck {
					mu.Lock()
					acked[id] = true
					mu.Unlock()
				}
			}
		}
		return nil
	}

	// Two consumers on the durable, each started again when it dies,
	// until every message is acknowledged.
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for c := range 2 {
		wg.Go(func() {
			for restart := 0; cctx.Err() == nil; restart++ {
				if err := consume(cctx, fmt.Sprintf("consumer-%d.%d", c, restart)); err != nil && cctx.Err() == nil {
					t.Errorf("consumer %d: %v", c, err)
					return
				}
			}
		})
	}
	cons, err := js.Consumer(ctx, "ORDERS", "shipping")
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := cons.Info(ctx)
		mu.Lock()
		done := len(acked) == messages
		mu.Unlock()
		if err == nil && done && info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("not every message was acknowledged: %d of %d (consumer info %+v, %v)", len(acked), messages, info, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the broker's view
	}
	stop()
	wg.Wait()

	rows, err := pool.Query(ctx, `SELECT msg_id, count(*) FROM shipments GROUP BY msg_id`)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		counts[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var redelivered int
	for i := range messages {
		id := fmt.Sprintf("order-%d", i)
		if counts[id] != 1 {
			t.Errorf("%s: %d shipments, want 1", id, counts[id])
		}
		if deliveries[id] > 1 {
			redelivered++
		}
		// Every acknowledged message is recorded: a call now replays.
		_, replayed, err := idemcall.Do(ctx, caller, idemcall.Call{Scope: "shipping", Key: id, Fingerprint: idemcall.Fingerprint([]byte("orders."+id[len("order-"):]), []byte(id))},
			func(context.Context) (struct{}, error) { return struct{}{}, nil })
		if err != nil || !replayed {
			t.Errorf("%s acknowledged but not recorded: replayed %v, %v", id, replayed, err)
		}
	}
	t.Logf("%d messages, %d redelivered, the work run %d times, one shipment each", messages, redelivered, runs.Load())
	if redelivered < messages/6*3 {
		t.Errorf("only %d messages redelivered: the faults did not happen", redelivered)
	}
}

// lossy is a delivery whose ack, when drop, is lost: the work committed,
// but JetStream never hears of it and delivers the message again.
type lossy struct {
	jetstream.Msg
	drop bool
}

func (l lossy) Ack() error {
	if l.drop {
		return nil
	}
	return l.Msg.Ack()
}

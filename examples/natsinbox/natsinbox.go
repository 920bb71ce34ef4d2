// Package natsinbox is an idempotent consumer (an inbox) for NATS
// JetStream, which delivers each message at least once: again when its ack
// wait runs out, when it is Nak'ed, when its consumer stops mid-message,
// and to whichever consumer of a durable fetches it next. The message's id
// is the idempotency key, and its work runs through idemcall in the
// transaction its key is claimed in, so the work's rows and the record
// that the message was done commit together: however often a message is
// delivered, its rows are written once, and a delivery of a message done
// already is acknowledged without running.
package natsinbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemcall"
)

// KeyOf returns a message's idempotency key: its Nats-Msg-Id header (the
// id its publisher gave it, which JetStream also deduplicates publishes
// by), or, without one, its stream and sequence, which identify it for as
// long as the stream keeps it.
func KeyOf(msg jetstream.Msg) (string, error) {
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		return id, nil
	}
	meta, err := msg.Metadata()
	if err != nil {
		return "", fmt.Errorf("natsinbox: a message without %s or JetStream metadata: %w", jetstream.MsgIDHeader, err)
	}
	return fmt.Sprintf("%s/%d", meta.Stream, meta.Sequence.Stream), nil
}

// Inbox handles messages of one durable consumer once each.
type Inbox struct {
	// Caller runs the work; it must be InTransaction, over the store
	// whose database the work writes to.
	Caller *idemcall.Caller
	// Scope separates this consumer's keys from others' (the durable's
	// name, say): the same message handled by two services is two calls.
	Scope string
	// Work does a message's work, writing its rows through
	// pgstore.TxFrom(ctx). An error rolls them back, and the message is
	// delivered again after Retry.
	Work func(ctx context.Context, msg jetstream.Msg) error
	// Retry is the delay before a message whose work failed, or whose key
	// another delivery holds, is delivered again. Zero means a second.
	Retry time.Duration
	// Logger receives what the inbox does with messages it does not run.
	// Nil discards.
	Logger *slog.Logger
}

// Handle runs msg's work once, and acknowledges msg once it is done (now,
// or by an earlier delivery). It Naks msg with a delay when its work
// failed, or another delivery of it is running; it terminates msg (no
// more deliveries) when msg has no usable id or its id was used by another
// message. It returns the work's error, or the inbox's reason not to run
// it; nil when msg is done.
func (in *Inbox) Handle(ctx context.Context, msg jetstream.Msg) error {
	retry := in.Retry
	if retry == 0 {
		retry = time.Second
	}
	key, err := KeyOf(msg)
	if err != nil {
		return errors.Join(err, msg.Term())
	}
	call := idemcall.Call{Scope: in.Scope, Key: key, Fingerprint: idemcall.Fingerprint([]byte(msg.Subject()), msg.Data())}
	_, replayed, err := idemcall.Do(ctx, in.Caller, call, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, in.Work(ctx, msg)
	})
	var inFlight *idemcall.InFlightError
	switch {
	case err == nil:
		if replayed {
			in.log(ctx, "message done already; acknowledged without running", key)
		}
		return msg.Ack()
	case errors.Is(err, idem.ErrFingerprintMismatch), errors.Is(err, idem.ErrInvalidKey):
		in.log(ctx, "message id unusable, or used by another message; terminated: "+err.Error(), key)
		return errors.Join(err, msg.Term())
	case errors.As(err, &inFlight):
		return errors.Join(err, msg.NakWithDelay(max(inFlight.RetryAfter, retry)))
	}
	return errors.Join(err, msg.NakWithDelay(retry))
}

func (in *Inbox) log(ctx context.Context, msg, key string) {
	if in.Logger != nil {
		in.Logger.InfoContext(ctx, msg, slog.String("key", key))
	}
}

package ctxvalue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem/internal/ctxvalue"
)

type key struct{}

type otherKey struct{}

// TestCtx: the value under its key type, the parent's values under any
// other, and the parent's cancellation, cause and deadline, as
// context.WithValue gives them; a context made from it is cancelled with
// it.
func TestCtx(t *testing.T) {
	cause := errors.New("cause")
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), otherKey{}, "parent's"))
	c := &ctxvalue.Ctx[key, string]{Context: parent, Val: "mine"}
	if got := c.Value(key{}); got != "mine" {
		t.Errorf("Value(key{}) = %v, want mine", got)
	}
	if got := c.Value(otherKey{}); got != "parent's" {
		t.Errorf("Value(otherKey{}) = %v, want the parent's", got)
	}
	child, stop := context.WithCancel(c)
	defer stop()
	cancel(cause)
	<-child.Done()
	if c.Err() != context.Canceled || context.Cause(c) != cause || context.Cause(child) != cause {
		t.Errorf("after the parent's cancel: Err %v, Cause %v, the child's Cause %v", c.Err(), context.Cause(c), context.Cause(child))
	}
}

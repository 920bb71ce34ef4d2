// Package ctxvalue is context.WithValue for a context a struct holds: a
// request's struct that carries its own context makes one allocation for
// both, where context.WithValue is one more.
package ctxvalue

import "context"

// Ctx is its Context with Val under the key of type K, a comparable type
// of its own (an empty struct), as context.WithValue(Context, K{}, Val)
// would be. The zero value is unusable: set Context.
type Ctx[K comparable, V any] struct {
	context.Context
	Val V
}

// Value returns Val for a key of type K, and asks Context for any other.
func (c *Ctx[K, V]) Value(key any) any {
	if _, ok := key.(K); ok {
		return c.Val
	}
	return c.Context.Value(key)
}

package pgstore

import (
	"reflect"
	"testing"
	"time"
)

// TestHeldArgsAreArgs: the statements sent through a heldBatch send, by
// pointer, exactly the arguments their args lists (which
// TestStatementsMatchTheirTypes checks against PostgreSQL), in the same
// order, every field set to a value of its own.
func TestHeldArgsAreArgs(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)
	complete := txCompleteParams{
		completeParams: completeParams{scope: []byte("scope"), key: "key", generation: 7, result: `{"status":201}`, retentionMicros: 86400000000, now: &now},
		fingerprint:    "fp", owner: "owner", takeover: true, createdAt: now.Add(-time.Second), takenOver: 6,
		method: "POST", route: "/invoices", caller: "caller",
	}
	for _, tc := range []struct {
		name string
		args []any
		held heldParams
	}{
		{"tx_limits", txLimitsParams{lockTimeout: 5000, idleTimeout: 30000}.args(), &txLimitsParams{lockTimeout: 5000, idleTimeout: 30000}},
		{"tx_lock", txLockParams{lockKey: -1 << 40}.args(), &txLockParams{lockKey: -1 << 40}},
		{"tx_claim", txClaimParams{scope: []byte("scope"), key: "key", now: &now, statementTimeout: 300000}.args(),
			&txClaimParams{scope: []byte("scope"), key: "key", now: &now, statementTimeout: 300000}},
		{"tx_claim without a clock", txClaimParams{scope: []byte("scope"), key: "key", statementTimeout: 0}.args(),
			&txClaimParams{scope: []byte("scope"), key: "key", statementTimeout: 0}},
		{"tx_complete", complete.args(), &complete},
	} {
		held := tc.held.heldArgs(nil)
		if len(held) != len(tc.args) {
			t.Errorf("%s: %d held arguments, args has %d", tc.name, len(held), len(tc.args))
			continue
		}
		for i, h := range held {
			var v any
			switch h := h.(type) {
			case *textArg:
				v = string(*h)
			case *bytesArg:
				v = []byte(*h)
			case *int8Arg:
				v = int64(*h)
			default:
				v = h
			}
			if !reflect.DeepEqual(v, tc.args[i]) {
				t.Errorf("%s: $%d is %#v held (%T), %#v in args", tc.name, i+1, v, h, tc.args[i])
			}
		}
	}
}

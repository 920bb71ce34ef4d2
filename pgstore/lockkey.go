package pgstore

import (
	"crypto/sha256"
	"encoding/binary"
)

// lockKey is the key's advisory lock, the claim of a claim in a
// transaction (sql/tx_lock.sql), which two-phase claims take shared
// (sql/claim.sql): the first 8 bytes of the SHA-256 of scope, a NUL byte
// and key. The statements mix it with the table's oid, so that the same key
// in two tables never shares a lock. A key never holds a NUL byte, so
// distinct pairs give distinct inputs; a collision of two keys (or with an
// advisory lock of the application's, which shares PostgreSQL's 64-bit
// space) would only make one wait for the other, never answer for it,
// since every claim looks at the key's row once it holds the lock.
// SHA-256 rather than a faster hash so that a client cannot choose keys
// whose locks collide with another scope's. It allocates nothing for a
// scope and key that fit the stack buffer.
func lockKey(scope, key string) int64 {
	var stack [256]byte
	sum := sha256.Sum256(append(append(append(stack[:0], scope...), 0), key...))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

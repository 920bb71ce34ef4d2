package main

// The flags that name one key, for inspect and forget.

import (
	"errors"
	"flag"
	"fmt"

	"github.com/idemkit/idem"
)

// keyFlags are the flags naming one key.
type keyFlags struct {
	scope     string
	scopeSet  bool
	key       string
	keySet    bool
	stored    string
	storedSet bool
	parsedKey idem.Key
}

func (k *keyFlags) register(fs *flag.FlagSet) {
	fs.Func("scope", "the key's `scope` as stored, as \"idem keys\" prints it or \"idem scope\" computes it", func(s string) error {
		k.scope, k.scopeSet = s, true
		return nil
	})
	fs.Func("key", "the idempotency `key` as the client sent it (Idempotency-Key: order-42, or an MCP _meta.idempotencyKey)", func(s string) error {
		k.key, k.keySet = s, true
		return nil
	})
	fs.Func("stored-key", "the key as stored, as \"idem keys\" prints it (`key/order-42`; see idem.Key for the forms)", func(s string) error {
		k.stored, k.storedSet = s, true
		return nil
	})
}

func (k *keyFlags) resolve(fs *flag.FlagSet) error {
	switch {
	case !k.scopeSet:
		return cmdUsagef(fs, "--scope is required (it may be empty: --scope '')")
	case k.keySet == k.storedSet:
		return cmdUsagef(fs, "give exactly one of --key (the key the client sent) and --stored-key (the key as stored)")
	}
	var err error
	if k.keySet {
		if k.parsedKey, err = idem.ParseClientKey(k.key); err != nil {
			return cmdUsagef(fs, "--key %q: %s", k.key, keyReason(err))
		}
		return nil
	}
	if k.parsedKey, err = idem.ParseStoredKey(k.stored); err != nil {
		return cmdUsagef(fs, "--stored-key %q: %s (a stored key starts with key/, id/, req/, call/ or round/; the key a client sent goes in --key)", k.stored, keyReason(err))
	}
	return nil
}

// keyReason is what is wrong with a key, without the error's "idem:" prefix.
func keyReason(err error) string {
	var ik *idem.InvalidKeyError
	if errors.As(err, &ik) {
		return ik.Reason
	}
	return err.Error()
}

// absent is the error for a key that is not in the table. A --key that
// reads as a stored key was probably copied from "idem keys".
func (k *keyFlags) absent() error {
	err := fmt.Errorf("%w: scope %q, key %q is absent (never claimed, released, swept or forgotten)", errAbsent, k.scope, k.parsedKey)
	if _, stored := idem.ParseStoredKey(k.key); k.keySet && stored == nil {
		err = fmt.Errorf("%w; if %q is the key as stored (as \"idem keys\" prints it), pass --stored-key %s", err, k.key, k.key)
	}
	return err
}

// parse parses a key command's arguments, which take no positional ones,
// and resolves the key flags.
func (k *keyFlags) parse(fs *flag.FlagSet, args []string) error {
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	return k.resolve(fs)
}

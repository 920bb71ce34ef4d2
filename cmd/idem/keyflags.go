package main

// The flags that name one key, for inspect, forget, release and digest.

import (
	"errors"
	"flag"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/pgstore"
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
	// digest is --digest, for the commands that find a key by it; empty
	// when not given.
	digest string
	// anyScope: the command finds the key in every scope when --scope
	// is not given (inspect, digest); otherwise --scope is required.
	anyScope bool
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

// registerDigest adds --digest, for a command that finds a key by the
// digest its log lines carry.
func (k *keyFlags) registerDigest(fs *flag.FlagSet) {
	fs.StringVar(&k.digest, "digest", "", "the key's `digest`, as log lines (key_digest), spans (idem.key.digest) and \"idem keys\" show it")
}

func (k *keyFlags) resolve(fs *flag.FlagSet) error {
	if k.digest != "" {
		if k.keySet || k.storedSet {
			return cmdUsagef(fs, "give one of --key, --stored-key and --digest")
		}
		if !idem.IsKeyDigest(k.digest) {
			return cmdUsagef(fs, "--digest %q: want the 16 hex digits of a key_digest", k.digest)
		}
		return nil
	}
	switch {
	case !k.scopeSet && !k.anyScope:
		return cmdUsagef(fs, "--scope is required (it may be empty: --scope '')")
	case k.keySet == k.storedSet && k.anyScope:
		return cmdUsagef(fs, "give exactly one of --key (the key the client sent), --stored-key (the key as stored) and --digest (a log line's key_digest)")
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
	var err error
	switch {
	case k.digest != "":
		err = fmt.Errorf("%w: no key has digest %s%s (never claimed, released, swept or forgotten)", errAbsent, k.digest, k.inScope())
	case !k.scopeSet:
		err = fmt.Errorf("%w: key %q is absent in every scope (never claimed, released, swept or forgotten)", errAbsent, k.parsedKey)
	default:
		err = fmt.Errorf("%w: scope %q, key %q is absent (never claimed, released, swept or forgotten)", errAbsent, k.scope, k.parsedKey)
	}
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

// inScope is " in scope S" when --scope was given.
func (k *keyFlags) inScope() string {
	if !k.scopeSet {
		return ""
	}
	return fmt.Sprintf(" in scope %q", k.scope)
}

// filter is the pgstore filter of the rows the flags name: the key (or
// the digest) in --scope, or in every scope.
func (k *keyFlags) filter() pgstore.KeyFilter {
	f := pgstore.KeyFilter{Key: k.parsedKey, Digest: k.digest, Limit: pgstore.MaxKeysLimit}
	if k.scopeSet {
		f.Scope = &k.scope
	}
	return f
}

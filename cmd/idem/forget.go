package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
)

func (c *cli) forget(ctx context.Context, args []string) error {
	var (
		kf    keyFlags
		force bool
	)
	fs := c.subFlagSet("forget", "--scope S (--key K | --stored-key K) [--force]",
		"Deletes one key whatever its state, so that its next request runs the side effect again:\n"+
			"for a result recorded in error, or a claim an operator knows is dead. A live claim\n"+
			"(lease not run out) is refused without --force: its holder is probably still running,\n"+
			"and forgetting it lets a retry run the side effect a second time.")
	kf.register(fs)
	fs.BoolVar(&force, "force", false, "forget even a live claim")
	if err := kf.parse(fs, args); err != nil {
		return err
	}
	s, closeStore, err := c.store(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	removed, err := s.Forget(ctx, kf.scope, kf.parsedKey, force)
	switch {
	case errors.Is(err, idem.ErrLiveClaim):
		return fmt.Errorf("refusing to forget scope %q, key %q: it holds a live claim, whose holder is probably still running; "+
			"wait for it (see \"idem inspect\"), or pass --force if you know the holder is dead", kf.scope, kf.parsedKey)
	case err != nil:
		return c.tableError(err)
	case !removed:
		fmt.Fprintf(c.stdout, "scope %q, key %q was absent: nothing to forget\n", kf.scope, kf.parsedKey)
	default:
		fmt.Fprintf(c.stdout, "forgot scope %q, key %q: its next request runs again\n", kf.scope, kf.parsedKey)
	}
	return nil
}

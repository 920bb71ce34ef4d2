package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem"
)

func (c *cli) forget(ctx context.Context, args []string) error {
	var (
		kf    keyFlags
		force bool
	)
	fs := c.subFlagSet("forget", "--scope S (--key K | --stored-key K) [--force]",
		"Deletes one key whatever its state, so that its next request runs the side effect again,\n"+
			"and prints what it removed: for a result recorded in error, or a claim an operator knows\n"+
			"is dead. A recorded result needs --force (at a terminal, a confirmation will do): its\n"+
			"request's retry runs the side effect a second time. A live claim (lease not run out)\n"+
			"needs --force: its holder is probably still running. It deletes only the generation it\n"+
			"printed: a key claimed or completed again meanwhile is left alone. For a stuck claim,\n"+
			"\"idem release\" never deletes a result.")
	kf.register(fs)
	fs.BoolVar(&force, "force", false, "forget even a recorded result or a live claim")
	if err := kf.parse(fs, args); err != nil {
		return err
	}
	s, closeStore, err := c.store(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	e, ok, err := s.Inspect(ctx, kf.scope, kf.parsedKey)
	if err != nil {
		return c.tableError(err)
	}
	if !ok {
		fmt.Fprintf(c.stdout, "scope %q, key %q was absent: nothing to forget\n", kf.scope, kf.parsedKey)
		return nil
	}
	what := c.describe(e)
	if e.State == idem.StateCompleted && !force {
		if !c.terminal {
			return fmt.Errorf("refusing to forget scope %q, key %q: it holds %s, and its next request would run the side effect again; "+
				"pass --force if that is what you want", kf.scope, kf.parsedKey, what)
		}
		if !c.confirm(fmt.Sprintf("Scope %q, key %q holds %s.\nForget it, so that its next request runs the side effect again? [y/N] ", kf.scope, kf.parsedKey, what)) {
			return fmt.Errorf("not forgotten: scope %q, key %q still holds %s", kf.scope, kf.parsedKey, what)
		}
		force = true
	}
	// Fenced by the generation described: what is deleted is what was
	// shown (and confirmed), not a claim or result that took the key since.
	removed, err := s.ForgetGeneration(ctx, kf.scope, kf.parsedKey, e.Generation, force)
	var stale *idem.StaleClaimError
	switch {
	case errors.As(err, &stale):
		return fmt.Errorf("not forgotten: scope %q, key %q changed since it was shown (generation %d, now generation %d): look again with \"idem inspect\"",
			kf.scope, kf.parsedKey, e.Generation, stale.Current)
	case errors.Is(err, idem.ErrLiveClaim):
		return fmt.Errorf("refusing to forget scope %q, key %q: it holds a live claim, whose holder is probably still running; "+
			"wait for it (see \"idem inspect\"), or pass --force if you know the holder is dead", kf.scope, kf.parsedKey)
	case err != nil:
		return c.tableError(err)
	case !removed:
		fmt.Fprintf(c.stdout, "scope %q, key %q is absent now (it held %s): nothing to forget\n", kf.scope, kf.parsedKey, what)
	default:
		fmt.Fprintf(c.stdout, "forgot scope %q, key %q, which held %s: its next request runs again\n", kf.scope, kf.parsedKey, what)
	}
	return nil
}

func (c *cli) release(ctx context.Context, args []string) error {
	var (
		kf         keyFlags
		generation optionalString
		force      bool
	)
	fs := c.subFlagSet("release", "--scope S (--key K | --stored-key K) [--generation N] [--force]",
		"Releases the claim of one key, so that its next request runs: for a claim whose holder is\n"+
			"stuck or dead. It never deletes a recorded result (\"idem forget\" does), and it is fenced by\n"+
			"the claim's generation (--generation, default the one the key holds now): a claim taken\n"+
			"over, completed or released since is left alone. A live claim (lease not run out) needs\n"+
			"--force: its holder is probably still running, and a retry would run the side effect again.")
	kf.register(fs)
	fs.Var(&generation, "generation", "release only the claim of this `generation`, as \"idem inspect\" shows it")
	fs.BoolVar(&force, "force", false, "release even a live claim")
	if err := kf.parse(fs, args); err != nil {
		return err
	}
	var gen int64
	if generation.set {
		if _, err := fmt.Sscan(generation.value, &gen); err != nil || gen <= 0 {
			return cmdUsagef(fs, "--generation %q: want a positive integer", generation.value)
		}
	}
	s, closeStore, err := c.store(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	e, ok, err := s.Inspect(ctx, kf.scope, kf.parsedKey)
	switch {
	case err != nil:
		return c.tableError(err)
	case !ok:
		return kf.absent()
	case e.State == idem.StateCompleted:
		return fmt.Errorf("refusing to release scope %q, key %q: it holds %s, not a claim; release never deletes a result (\"idem forget --force\" does)",
			kf.scope, kf.parsedKey, c.describe(e))
	case generation.set && gen != e.Generation:
		return fmt.Errorf("nothing released: generation %d no longer holds scope %q, key %q; it holds %s", gen, kf.scope, kf.parsedKey, c.describe(e))
	case c.now().Before(e.LeaseEnd) && !force:
		return fmt.Errorf("refusing to release scope %q, key %q: it holds %s, whose holder is probably still running; "+
			"wait for it (see \"idem inspect\"), or pass --force if you know the holder is stuck or dead", kf.scope, kf.parsedKey, c.describe(e))
	}
	err = s.Release(ctx, idem.Token{Scope: kf.scope, Key: kf.parsedKey, Generation: e.Generation})
	switch {
	case errors.Is(err, idem.ErrStaleClaim):
		return fmt.Errorf("nothing released: generation %d no longer holds scope %q, key %q (completed, taken over or released since; see \"idem inspect\")",
			e.Generation, kf.scope, kf.parsedKey)
	case err != nil:
		return c.tableError(err)
	}
	fmt.Fprintf(c.stdout, "released scope %q, key %q, which held %s: its next request runs again\n", kf.scope, kf.parsedKey, c.describe(e))
	return nil
}

// describe says what an entry is, for forget's and release's messages: its
// state, generation and what claimed it.
func (c *cli) describe(e idem.Entry) string {
	var b strings.Builder
	switch {
	case e.State == idem.StateCompleted:
		fmt.Fprintf(&b, "a recorded result (status %d", e.Result.Status)
	case c.now().Before(e.LeaseEnd):
		b.WriteString("a live claim (")
		b.WriteString("owner " + orDash(e.Owner))
	default:
		b.WriteString("an abandoned claim (")
		b.WriteString("owner " + orDash(e.Owner))
	}
	fmt.Fprintf(&b, ", generation %d, endpoint %s, caller %s)", e.Generation, orDash(endpoint(e.Labels)), orDash(e.Labels.Caller))
	return b.String()
}

// confirm asks question at the terminal and reports whether the answer is
// yes.
func (c *cli) confirm(question string) bool {
	fmt.Fprint(c.stdout, question)
	line, _ := bufio.NewReader(c.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

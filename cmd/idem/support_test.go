package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/cmdmain"
	"github.com/idemkit/idem/pgstore"
)

// twoScopes is the fixture and, in a second scope, the key "done" again,
// claimed later by another endpoint and caller and still in flight.
func twoScopes(t *testing.T) (dbURL string, store *pgstore.Store) {
	t.Helper()
	dbURL, store = fixture(t)
	_, err := store.Claim(t.Context(), idem.ClaimRequest{Scope: "tenant 2", Key: mustKey(t, "done"), Lease: time.Hour, Owner: "test",
		Labels: idem.Labels{Method: "PUT", Route: "/refunds/9", Caller: "acct-8"}})
	if err != nil {
		t.Fatal(err)
	}
	return dbURL, store
}

// TestInspectEveryScope: a key typed as the client sent it, without a
// scope, shows its entries in every scope, newest first, with the
// endpoint and caller of each; --digest finds one.
func TestInspectEveryScope(t *testing.T) {
	t.Parallel()
	dbURL, _ := twoScopes(t)
	checkOutput(t, "inspect --key done", mustRun(t, dbURL, "inspect", "--key", "done"), `key "key/done" has 2 entries, in 2 scopes, newest first:

scope        'tenant 2'
key          key/done
digest       3d66e6303480b6f4
endpoint     PUT /refunds/9
caller       acct-8
state        claimed (live)
generation   4
owner        test
fingerprint  -
claimed      <time> (<d> ago)
lease end    <time> (in <d>)

`+doneEntry)
	checkOutput(t, "inspect --digest", mustRun(t, dbURL, "inspect", "--digest", "44cfbd316d5b56a8"), `scope        tenant-1
key          key/abandoned
digest       44cfbd316d5b56a8
endpoint     tools/call refund
caller       -
state        claimed (abandoned: lease ran out)
generation   2
owner        test
fingerprint  fp
claimed      <time> (<d> ago)
lease end    <time> (<d> ago)
`)
	out := mustRun(t, dbURL, "inspect", "--key", "done", "--json")
	if !strings.HasPrefix(out, "[") || strings.Count(out, `"key_digest"`) != 2 || !strings.Contains(out, `"caller": "acct-8"`) || !strings.Contains(out, `"route": "POST /payments/{id}"`) {
		t.Errorf("inspect --key --json: want an array of both entries:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "--key", "nope"}, `idem: no such key: key "key/nope" is absent in every scope (never claimed, released, swept or forgotten)`},
		{[]string{"inspect", "--digest", "0000000000000000"}, `idem: no such key: no key has digest 0000000000000000 (never claimed, released, swept or forgotten)`},
		{[]string{"inspect", "--digest", "f21d24f8f755e5cf", "--scope", "tenant 2"}, `idem: no such key: no key has digest f21d24f8f755e5cf in scope "tenant 2" (never claimed, released, swept or forgotten)`},
	} {
		r := idemCLI(t.Context(), dbURL, tc.args...)
		if got := cmdmain.Message("idem", r.err); r.code() != 1 || got != tc.want {
			t.Errorf("idem %q: exit %d\n got %s\nwant %s", tc.args, r.code(), got, tc.want)
		}
	}
}

// TestDigest: from a key to the digest its log lines carry: computed with
// a scope, looked up in every scope (or an endpoint's, or a caller's)
// without one.
func TestDigest(t *testing.T) {
	t.Parallel()
	dbURL, _ := twoScopes(t)
	// With a scope, no database is needed.
	if out := mustRun(t, "", "digest", "--scope", "tenant-1", "--key", "done"); out != idem.KeyDigest("tenant-1", mustKey(t, "done"))+"\n" || out != "f21d24f8f755e5cf\n" {
		t.Errorf("digest --scope: %q", out)
	}
	checkOutput(t, "digest --key", mustRun(t, dbURL, "digest", "--key", "done"), `DIGEST            SCOPE       ENDPOINT             CALLER  STATE
3d66e6303480b6f4  'tenant 2'  PUT /refunds/9       acct-8  live
f21d24f8f755e5cf  tenant-1    POST /payments/{id}  acct-7  completed
`)
	for _, args := range [][]string{
		{"--route", "POST /payments/{id}"},
		{"--route", "/payments/{id}"},
		{"--caller", "acct-7"},
		{"--route", "/payments/{id}", "--caller", "acct-7"},
	} {
		checkOutput(t, "digest --key done "+strings.Join(args, " "), mustRun(t, dbURL, append([]string{"digest", "--key", "done"}, args...)...),
			"DIGEST            SCOPE     ENDPOINT             CALLER  STATE\nf21d24f8f755e5cf  tenant-1  POST /payments/{id}  acct-7  completed\n")
	}
	r := idemCLI(t.Context(), dbURL, "digest", "--key", "done", "--caller", "acct-9")
	if got := cmdmain.Message("idem", r.err); r.code() != 1 || got != `idem: no such key: key "key/done" is absent in every scope (never claimed, released, swept or forgotten)` {
		t.Errorf("digest of a caller without the key: exit %d, %s", r.code(), got)
	}
}

// TestRelease: release frees a stuck claim, fenced by its generation, and
// never deletes a result.
func TestRelease(t *testing.T) {
	t.Parallel()
	dbURL, store := twoScopes(t)
	ctx := t.Context()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scope", "tenant-1", "--key", "done"}, `idem: refusing to release scope "tenant-1", key "key/done": it holds a recorded result (status 201, generation 3, endpoint POST /payments/{id}, caller acct-7), not a claim; release never deletes a result ("idem forget --force" does)`},
		{[]string{"--scope", "tenant 2", "--key", "done"}, `idem: refusing to release scope "tenant 2", key "key/done": it holds a live claim (owner test, generation 4, endpoint PUT /refunds/9, caller acct-8), whose holder is probably still running; wait for it (see "idem inspect"), or pass --force if you know the holder is stuck or dead`},
		{[]string{"--scope", "tenant 2", "--key", "done", "--generation", "3", "--force"}, `idem: nothing released: generation 3 no longer holds scope "tenant 2", key "key/done"; it holds a live claim (owner test, generation 4, endpoint PUT /refunds/9, caller acct-8)`},
		{[]string{"--scope", "tenant-1", "--key", "nope"}, `idem: no such key: scope "tenant-1", key "key/nope" is absent (never claimed, released, swept or forgotten)`},
	} {
		r := idemCLI(ctx, dbURL, append([]string{"release"}, tc.args...)...)
		if got := cmdmain.Message("idem", r.err); r.code() != 1 || got != tc.want || r.stdout != "" {
			t.Errorf("release %q: exit %d, stdout %q\n got %s\nwant %s", tc.args, r.code(), r.stdout, got, tc.want)
		}
	}
	if out := mustRun(t, dbURL, "release", "--scope", "tenant 2", "--key", "done", "--generation", "4", "--force"); out != `released scope "tenant 2", key "key/done", which held a live claim (owner test, generation 4, endpoint PUT /refunds/9, caller acct-8): its next request runs again`+"\n" {
		t.Errorf("release --force: %q", out)
	}
	if out := mustRun(t, dbURL, "release", "--scope", "tenant-1", "--key", "abandoned"); out != `released scope "tenant-1", key "key/abandoned", which held an abandoned claim (owner test, generation 2, endpoint tools/call refund, caller -): its next request runs again`+"\n" {
		t.Errorf("release of an abandoned claim: %q", out)
	}
	for _, sk := range []struct{ scope, key string }{{"tenant 2", "done"}, {"tenant-1", "abandoned"}} {
		if _, ok, err := store.Inspect(ctx, sk.scope, mustKey(t, sk.key)); ok || err != nil {
			t.Errorf("%s %s: present %v (%v) after release", sk.scope, sk.key, ok, err)
		}
	}
	if _, ok, _ := store.Inspect(ctx, "tenant-1", mustKey(t, "done")); !ok {
		t.Error("the result is gone")
	}
}

// TestForgetConfirms: at a terminal, forgetting a result asks first, and
// only a yes forgets it.
func TestForgetConfirms(t *testing.T) {
	t.Parallel()
	dbURL, store := fixture(t)
	forget := func(answer string) (string, error) {
		var stdout bytes.Buffer
		c := &cli{getenv: databaseEnv(dbURL), stdout: &stdout, stderr: &stdout, now: time.Now, stdin: strings.NewReader(answer), terminal: true}
		err := c.run(t.Context(), []string{"forget", "--scope", "tenant-1", "--key", "done"})
		return stdout.String(), err
	}
	const question = `Scope "tenant-1", key "key/done" holds a recorded result (status 201, generation 3, endpoint POST /payments/{id}, caller acct-7).
Forget it, so that its next request runs the side effect again? [y/N] `
	out, err := forget("\n")
	if got := cmdmain.Message("idem", err); out != question || got != `idem: not forgotten: scope "tenant-1", key "key/done" still holds a recorded result (status 201, generation 3, endpoint POST /payments/{id}, caller acct-7)` {
		t.Fatalf("answered no: %q, %s", out, got)
	}
	if _, ok, _ := store.Inspect(t.Context(), "tenant-1", mustKey(t, "done")); !ok {
		t.Fatal("forgotten without a yes")
	}
	out, err = forget("y\n")
	if err != nil || out != question+`forgot scope "tenant-1", key "key/done", which held a recorded result (status 201, generation 3, endpoint POST /payments/{id}, caller acct-7): its next request runs again`+"\n" {
		t.Fatalf("answered yes: %q, %v", out, err)
	}
}

// TestForgetWhatWasConfirmed: the operator confirms forgetting the result
// shown; if, while the question waits, that result is forgotten and the key
// claimed and completed again (a new request's result, a new generation),
// the yes does not delete the new one: forget deletes only the generation
// it showed, and says the key changed.
func TestForgetWhatWasConfirmed(t *testing.T) {
	t.Parallel()
	dbURL, store := fixture(t)
	ctx := t.Context()
	k := mustKey(t, "done")
	var newer idem.Claim
	answer := &onRead{answer: "y\n", before: func() {
		if _, err := store.Forget(ctx, "tenant-1", k, true); err != nil {
			t.Error(err)
		}
		var err error
		if newer, err = store.Claim(ctx, idem.ClaimRequest{Scope: "tenant-1", Key: k, Lease: time.Hour, Owner: "test", Fingerprint: "fp"}); err != nil || newer.Status != idem.Acquired {
			t.Errorf("claim again: %+v %v", newer, err)
		}
		if err := store.Complete(ctx, newer.Token, idem.Result{Status: 202}); err != nil {
			t.Error(err)
		}
	}}
	var stdout bytes.Buffer
	c := &cli{getenv: databaseEnv(dbURL), stdout: &stdout, stderr: &stdout, now: time.Now, stdin: answer, terminal: true}
	err := c.run(ctx, []string{"forget", "--scope", "tenant-1", "--key", "done"})
	e, ok, ierr := store.Inspect(ctx, "tenant-1", k)
	if ierr != nil || !ok || e.Generation != newer.Token.Generation || e.Result.Status != 202 {
		t.Fatalf("after the yes: %+v, present %v (%v); want the newer result (generation %d) kept", e, ok, ierr, newer.Token.Generation)
	}
	want := fmt.Sprintf(`idem: not forgotten: scope "tenant-1", key "key/done" changed since it was shown (generation 3, now generation %d): look again with "idem inspect"`, newer.Token.Generation)
	if got := cmdmain.Message("idem", err); cmdmain.ExitCode(err) != 1 || got != want {
		t.Fatalf("forget: exit %d\n got %s\nwant %s", cmdmain.ExitCode(err), got, want)
	}
}

// onRead answers a confirmation: before runs when the question is read,
// as if the world changed while the operator thought.
type onRead struct {
	answer string
	before func()
	done   bool
}

func (r *onRead) Read(p []byte) (int, error) {
	if r.done {
		return 0, io.EOF
	}
	r.done = true
	r.before()
	return copy(p, r.answer), nil
}

// TestKeysCutsLongValues: a long key or endpoint is cut short with an
// ellipsis, so that one does not widen every row; --json has them whole,
// and the digest finds the key.
func TestKeysCutsLongValues(t *testing.T) {
	t.Parallel()
	dbURL, store := migratedStore(t)
	long := strings.Repeat("k", 255)
	if _, err := store.Claim(t.Context(), idem.ClaimRequest{Scope: "s", Key: mustKey(t, long), Lease: time.Hour,
		Labels: idem.Labels{Method: "POST", Route: "/a/very/long/route/of/an/api/v1/payments"}}); err != nil {
		t.Fatal(err)
	}
	checkOutput(t, "keys", mustRun(t, dbURL, "keys"), `SCOPE  KEY                               DIGEST            ENDPOINT                          CALLER  STATE  AGE  OWNER
s      key/kkkkkkkkkkkkkkkkkkkkkkkkkkk…  `+idem.KeyDigest("s", mustKey(t, long))+`  POST /a/very/long/route/of/an/a…  -       live   <d>  -
`)
	if out := mustRun(t, dbURL, "keys", "--json"); !strings.Contains(out, `"key/`+long+`"`) || !strings.Contains(out, `"/a/very/long/route/of/an/api/v1/payments"`) {
		t.Errorf("keys --json does not hold the whole key and route:\n%s", out)
	}
}

// TestVersion: --version prints the build's version and nothing else.
func TestVersion(t *testing.T) {
	t.Parallel()
	r := idemCLI(t.Context(), "", "--version")
	if r.err != nil || r.stdout != "idem "+buildVersion()+"\n" || r.stderr != "" || !strings.HasPrefix(buildVersion(), "(devel)") {
		t.Errorf("--version: %v, stdout %q, stderr %q", r.err, r.stdout, r.stderr)
	}
}

// TestSweepHelpSaysItRunsUntilInterrupted: without --once the sweep does
// not return, and its help and the command list say so.
func TestSweepHelpSaysItRunsUntilInterrupted(t *testing.T) {
	t.Parallel()
	r := idemCLI(t.Context(), "", "sweep", "--help")
	if !strings.Contains(r.stdout, "Without --once it runs until interrupted (Ctrl-C, SIGINT or SIGTERM)") ||
		!strings.Contains(r.stdout, "sweep until nothing is left and exit (without it: run until interrupted)") {
		t.Errorf("sweep --help:\n%s", r.stdout)
	}
	if r := idemCLI(t.Context(), "", "--help"); !strings.Contains(r.stdout, "release abandoned claims and delete expired results; without --once, until interrupted") {
		t.Errorf("idem --help:\n%s", r.stdout)
	}
}

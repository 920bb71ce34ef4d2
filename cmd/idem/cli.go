package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgconnect"
	"github.com/idemkit/idem/internal/pgschema"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// errHelp: --help was asked for and printed; exit 0.
var errHelp = errors.New("help requested")

// usageError is a bad command line: exit 2. cmd is the subcommand whose
// --help to point at (empty: the top level's).
type usageError struct{ msg, cmd string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// cmdUsagef is usagef for subcommand fs: the message starts with the
// command's name and points at its --help.
func cmdUsagef(fs *flag.FlagSet, format string, args ...any) error {
	cmd := commandName(fs)
	return &usageError{msg: cmd + ": " + fmt.Sprintf(format, args...), cmd: cmd}
}

// commandName is the subcommand fs parses ("stats"), empty for the top level.
func commandName(fs *flag.FlagSet) string {
	return strings.TrimPrefix(strings.TrimPrefix(fs.Name(), "idem"), " ")
}

// errAbsent: inspect found no entry; exit 1.
var errAbsent = errors.New("no such key")

func exitCode(err error) int {
	var u *usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &u):
		return 2
	}
	return 1
}

// errorLine is what main prints for err: one line.
func errorLine(err error) string {
	if msg := errorMessage(err); msg != "" {
		return "idem: " + msg
	}
	return ""
}

func errorMessage(err error) string {
	var u *usageError
	if errors.As(err, &u) {
		if u.cmd != "" {
			return u.msg + " (see idem " + u.cmd + " --help)"
		}
		return u.msg + " (see idem --help)"
	}
	return err.Error()
}

// cli is one invocation: where it reads its environment and writes.
type cli struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
	now    func() time.Time

	databaseURL string
	table       string
}

// command is a subcommand.
type command struct {
	name    string
	usage   string // arguments, for the usage line
	summary string
	run     func(c *cli, ctx context.Context, args []string) error
}

var commands []command

func init() {
	commands = []command{
		{"migrate", "up|down|status", "create, upgrade, roll back or show the idem schema", (*cli).migrate},
		{"sweep", "[--once] [--interval D]", "release abandoned claims and delete expired results", (*cli).sweep},
		{"stats", "[--json]", "counts by state, oldest live and abandoned claims, table size", (*cli).stats},
		{"keys", "[--scope S] [--state S] [--prefix P] [--limit N] [--json]", "list the most recent keys, with their scope, state, age and owner", (*cli).keys},
		{"scope", "[-H 'Name: value']... (--route R [--method M] | --mcp) [--session S]", "compute a request's scope from its credentials, session and route", (*cli).scope},
		{"inspect", "--scope S (--key K | --stored-key K) [--json]", "show one key: its claim or recorded result", (*cli).inspect},
		{"forget", "--scope S (--key K | --stored-key K) [--force]", "delete one key so that its next request runs again", (*cli).forget},
	}
}

const topUsage = `Usage: idem [--database-url URL] [--table T] <command> [flags]

idem is the operator's CLI for an idem claim table in PostgreSQL.

Commands:
%s
Global flags (also accepted after the command):
  --database-url URL  PostgreSQL URL (default $DATABASE_URL),
                      e.g. postgres://idem:idem@127.0.0.1:5432/idem?sslmode=disable
  --table T           claim table, "table" or "schema.table" (default idem_keys)

Run "idem <command> --help" for a command's flags.
`

// run is the whole CLI, testable in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := &cli{getenv: getenv, stdout: stdout, stderr: stderr, now: time.Now}
	return c.run(ctx, args)
}

func (c *cli) run(ctx context.Context, args []string) error {
	usage := func(w io.Writer) {
		var b strings.Builder
		for _, cmd := range commands {
			fmt.Fprintf(&b, "  %-8s %s\n           %s\n", cmd.name, cmd.usage, cmd.summary)
		}
		fmt.Fprintf(w, topUsage, b.String())
	}
	fs := c.flagSet("idem", usage)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		usage(c.stderr)
		return usagef("no command given")
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		fs.Usage()
		return errHelp
	}
	for _, cmd := range commands {
		if cmd.name == name {
			return cmd.run(c, ctx, rest)
		}
	}
	return usagef("unknown command %q", name)
}

// flagSet returns a FlagSet carrying the global flags, whose Usage writes
// usage to stdout (help that was asked for). The flag package itself
// prints nothing: a parse error is returned as one line (see parse).
func (c *cli) flagSet(name string, usage func(io.Writer)) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.databaseURL, "database-url", c.databaseURL, "PostgreSQL `URL` (default $DATABASE_URL)")
	fs.StringVar(&c.table, "table", c.table, "claim `table`, \"table\" or \"schema.table\" (default idem_keys)")
	fs.Usage = func() {
		fs.SetOutput(c.stdout) // where PrintDefaults writes
		defer fs.SetOutput(io.Discard)
		usage(c.stdout)
	}
	return fs
}

// subFlagSet returns the FlagSet of a subcommand, with the global flags and
// a usage text listing every flag.
func (c *cli) subFlagSet(name, args, about string) *flag.FlagSet {
	var fs *flag.FlagSet
	fs = c.flagSet("idem "+name, func(w io.Writer) {
		fmt.Fprintf(w, "Usage: idem %s %s\n\n%s\n\nFlags:\n", name, args, about)
		fs.PrintDefaults()
	})
	return fs
}

// parse parses the top level's flags, which end at the command name. A
// parse error is one line; the usage is printed only when asked for.
func parse(fs *flag.FlagSet, args []string) error {
	usage := fs.Usage
	fs.Usage = func() {} // the flag package calls it on every error
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		usage()
		return errHelp
	case commandName(fs) != "":
		return cmdUsagef(fs, "%v", err)
	}
	return usagef("%v", err)
}

// parseSub parses a subcommand's arguments, flags and positional arguments
// in any order ("migrate down --yes" as well as "migrate --yes down"), and
// returns the positional ones. "--" ends the flags.
func parseSub(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// parseNoArgs is parseSub for a command that takes flags only.
func parseNoArgs(fs *flag.FlagSet, args []string) error {
	positional, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	return noArgs(fs, positional)
}

func noArgs(fs *flag.FlagSet, positional []string) error {
	if len(positional) > 0 {
		return cmdUsagef(fs, "unexpected arguments %q", positional)
	}
	return nil
}

// connect opens a pool on the configured database and checks that it
// answers, turning pgx's errors into one clear line.
func (c *cli) connect(ctx context.Context) (*pgxpool.Pool, error) {
	url := c.databaseURL
	if url == "" {
		url = c.getenv("DATABASE_URL")
	}
	if url == "" {
		return nil, usagef("no database: set DATABASE_URL or pass --database-url " +
			"(e.g. postgres://idem:idem@127.0.0.1:5432/idem?sslmode=disable)")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usagef("the database URL is not a valid PostgreSQL URL or key=value DSN: %s", parseProblem(err))
	}
	cfg.MaxConns = 4
	return pgconnect.Open(ctx, cfg, 10*time.Second)
}

// parseProblem is what is wrong with a connection string, without the
// string itself (it may hold a password).
func parseProblem(err error) string {
	if u := errors.Unwrap(err); u != nil {
		return u.Error()
	}
	msg := err.Error()
	// pgx: "cannot parse `<redacted url>`: <problem>"
	if i := strings.Index(msg, "`: "); i >= 0 {
		return msg[i+3:]
	}
	return "malformed"
}

// tableError explains a missing table, the most common first mistake.
func (c *cli) tableError(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "42P01" { // undefined_table
		return fmt.Errorf("table %s does not exist: run \"idem migrate up\" first (or pass the right --table): %s", c.tableName(), pg.Message)
	}
	return err
}

// validateTable checks --table before anything connects.
func (c *cli) validateTable() error {
	if err := migrations.ValidateTable(c.table); err != nil {
		return usagef("--table %q: %s", c.table, pgschema.TableRule)
	}
	return nil
}

func (c *cli) tableName() string {
	if c.table == "" {
		return migrations.DefaultTable
	}
	return c.table
}

// store opens the store on the configured database; closeStore closes the
// store and its pool.
func (c *cli) store(ctx context.Context) (s *pgstore.Store, closeStore func(), err error) {
	if err := c.validateTable(); err != nil {
		return nil, nil, err
	}
	pool, err := c.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	if s, err = pgstore.New(pool, pgstore.Options{Table: c.table}); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return s, func() { s.Close(); pool.Close() }, nil
}

func (c *cli) migrate(ctx context.Context, args []string) error {
	var yes bool
	var partitions int
	fs := c.subFlagSet("migrate", "up|down|status",
		"up applies every migration not yet applied (safe to run from several replicas at once);\n"+
			"with --partitions N a table it creates is hash-partitioned on (scope, key) in N partitions.\n"+
			"down rolls back the most recent one, and needs --yes: rolling back the first DROPS the\n"+
			"table and every recorded result (and the version table); rolling back a later one keeps\n"+
			"the rows, but instances of this release need every migration.\n"+
			"status lists the migrations and whether each is applied.")
	fs.BoolVar(&yes, "yes", false, "confirm \"down\"")
	fs.IntVar(&partitions, "partitions", 0, "up: create the table PARTITION BY HASH (scope, key) with `N` partitions (0: one table); on an existing table, N must match")
	positional, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return cmdUsagef(fs, "want exactly one of up, down, status")
	}
	action := positional[0]
	if action != "up" && action != "down" && action != "status" {
		return cmdUsagef(fs, "unknown action %q: want up, down or status", action)
	}
	if partitions < 0 || partitions > migrations.MaxPartitions {
		return cmdUsagef(fs, "--partitions %d: want 0 to %d", partitions, migrations.MaxPartitions)
	}
	if err := c.validateTable(); err != nil {
		return err
	}
	pool, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	opts := migrations.Options{Table: c.table, Partitions: partitions}
	switch action {
	case "up":
		if err := migrations.Up(ctx, pool, opts); err != nil {
			return err
		}
	case "down":
		if err := c.down(ctx, pool, opts, yes); err != nil {
			return err
		}
	}
	st, err := migrations.Status(ctx, pool, opts)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "table %s\nVERSION\tSTATE\tAPPLIED AT\n", c.tableName())
	for _, m := range st {
		applied := "-"
		if !m.AppliedAt.IsZero() {
			applied = m.AppliedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", m.Version, m.State, applied)
	}
	return tw.Flush()
}

// down rolls back the latest migration, once confirmed, saying first what
// that does to this table.
func (c *cli) down(ctx context.Context, pool *pgxpool.Pool, opts migrations.Options, yes bool) error {
	st, err := migrations.Status(ctx, pool, opts)
	if err != nil {
		return err
	}
	var latest *migrations.MigrationVersion
	for i := range st {
		if st[i].State == migrations.MigrationApplied {
			latest = &st[i]
		}
	}
	if latest == nil {
		if yes { // drops an empty version table, if any: nothing is left
			if err := migrations.Down(ctx, pool, opts); err != nil && !errors.Is(err, migrations.ErrNoneApplied) {
				return err
			}
		}
		fmt.Fprintf(c.stdout, "no migration of table %s is applied: nothing to roll back\n", c.tableName())
		return nil
	}
	what := fmt.Sprintf("migration %d (%s) of table %s", latest.Version, latest.Name, c.tableName())
	effect := "the table and its rows stay, but instances of this release need the migration"
	if latest.Version == 1 {
		effect = "it DROPS the table, every recorded result and the version table"
	}
	if !yes {
		return &usageError{msg: fmt.Sprintf("migrate down would roll back %s: %s; add --yes to confirm", what, effect), cmd: "migrate"}
	}
	if err := migrations.Down(ctx, pool, opts); err != nil {
		return err
	}
	if latest.Version == 1 {
		fmt.Fprintf(c.stdout, "rolled back %s: dropped the table, its recorded results and its version table\n", what)
	} else {
		fmt.Fprintf(c.stdout, "rolled back %s\n", what)
	}
	return nil
}

func (c *cli) sweep(ctx context.Context, args []string) error {
	var (
		once     bool
		interval time.Duration
		batch    int
	)
	fs := c.subFlagSet("sweep", "[--once] [--interval D]",
		"Releases claims whose lease ran out and deletes results past retention, in batches.\n"+
			"With --once it sweeps until nothing is left and exits; otherwise it sweeps at once,\n"+
			"then every --interval (±50%) until SIGINT/SIGTERM. Safe next to the applications' sweepers.")
	fs.BoolVar(&once, "once", false, "sweep once and exit")
	fs.DurationVar(&interval, "interval", time.Minute, "time between sweeps when not --once")
	fs.IntVar(&batch, "batch", pgstore.DefaultSweepBatch, "rows deleted per statement")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if interval <= 0 || batch <= 0 {
		return cmdUsagef(fs, "--interval and --batch must be positive")
	}
	s, closeStore, err := c.store(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	sw := idem.Sweeper{Store: s, Interval: interval, Batch: batch}
	if !once {
		return c.sweepLoop(ctx, sw)
	}
	total, err := sw.SweepOnce(ctx)
	if err != nil {
		return c.tableError(err)
	}
	fmt.Fprintf(c.stdout, "swept: %d abandoned claims released, %d expired results deleted\n", total.Abandoned, total.Expired)
	return nil
}

// sweepLoop runs sw until ctx ends, logging at info when it starts, after
// each round (what it removed, zero included) and when it stops; a failed
// round is logged by the Sweeper, at warn.
func (c *cli) sweepLoop(ctx context.Context, sw idem.Sweeper) error {
	logger := slog.New(slog.NewTextHandler(c.stderr, nil))
	var rounds int
	var total idem.SweepStats
	sw.Logger = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sw.OnSweep = func(ctx context.Context, st idem.SweepStats) {
		rounds++
		total.Abandoned += st.Abandoned
		total.Expired += st.Expired
		logger.Info("swept", "abandoned", st.Abandoned, "expired", st.Expired)
	}
	logger.Info("sweeping until SIGINT or SIGTERM", "table", c.tableName(), "interval", sw.Interval, "batch", sw.Batch)
	if err := sw.Run(ctx); err != nil {
		return err
	}
	logger.Info("stopped sweeping", "rounds", rounds, "abandoned", total.Abandoned, "expired", total.Expired)
	return nil
}

func (c *cli) stats(ctx context.Context, args []string) error {
	var asJSON bool
	fs := c.subFlagSet("stats", "[--json]",
		"Counts the table's keys by state (live claims, abandoned claims, results, expired results),\n"+
			"shows the oldest live claim and the longest-abandoned one, and the table's size on disk.\n"+
			"An abandoned claim far in the past means no sweeper runs. It scans the whole table.")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	s, closeStore, err := c.store(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	st, err := s.Stats(ctx)
	if err != nil {
		return c.tableError(err)
	}
	if asJSON {
		return writeJSON(c.stdout, map[string]any{
			"table":            c.tableName(),
			"claimed":          st.Claimed,
			"abandoned":        st.Abandoned,
			"completed":        st.Completed,
			"expired":          st.Expired,
			"oldest_claim":     timeOrNil(st.OldestClaim),
			"oldest_abandoned": timeOrNil(st.OldestAbandoned),
			"table_bytes":      st.TableBytes,
		})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "table\t%s\n", c.tableName())
	fmt.Fprintf(tw, "live claims\t%d\n", st.Claimed)
	fmt.Fprintf(tw, "abandoned claims\t%d\t(lease ran out; released by the next sweep or taken over by a retry)\n", st.Abandoned)
	fmt.Fprintf(tw, "results\t%d\n", st.Completed)
	fmt.Fprintf(tw, "expired results\t%d\t(past retention; deleted by the next sweep)\n", st.Expired)
	fmt.Fprintf(tw, "oldest live claim\t%s\n", c.ago(st.OldestClaim, "claimed"))
	fmt.Fprintf(tw, "oldest abandoned claim\t%s\n", c.ago(st.OldestAbandoned, "lease ended"))
	fmt.Fprintf(tw, "table size\t%s\n", bytesText(st.TableBytes))
	return tw.Flush()
}

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
		if k.parsedKey, err = idem.ParseKey(k.key); err != nil {
			return cmdUsagef(fs, "--key %q: %s", k.key, keyReason(err))
		}
		return nil
	}
	if k.parsedKey, err = idem.KeyFromString(k.stored); err != nil {
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
	if _, stored := idem.KeyFromString(k.key); k.keySet && stored == nil {
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

func (c *cli) inspect(ctx context.Context, args []string) error {
	var (
		kf     keyFlags
		asJSON bool
	)
	fs := c.subFlagSet("inspect", "--scope S (--key K | --stored-key K) [--json]",
		"Shows the entry of one key as stored: a claim (generation, owner, lease end; live or\n"+
			"abandoned) or a recorded result (status, headers, body, retention). Exits 1 if absent.")
	kf.register(fs)
	fs.BoolVar(&asJSON, "json", false, "print JSON")
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
		return kf.absent()
	}
	if asJSON {
		return writeJSON(c.stdout, entryJSON(kf.scope, kf.parsedKey, e, c.now()))
	}
	return c.printEntry(kf.scope, kf.parsedKey, e)
}

// entryJSON is inspect --json's object: the entry's fields, and for a claim
// whether its lease is live at now.
func entryJSON(scope string, key idem.Key, e idem.Entry, now time.Time) map[string]any {
	out := map[string]any{
		"scope":       scope,
		"key":         key.String(),
		"state":       e.State.String(),
		"generation":  e.Generation,
		"fingerprint": e.Fingerprint,
		"owner":       e.Owner,
		"created_at":  timeOrNil(e.CreatedAt),
	}
	switch e.State {
	case idem.StateClaimed:
		out["lease_end"] = timeOrNil(e.LeaseEnd)
		out["live"] = now.Before(e.LeaseEnd)
	case idem.StateCompleted:
		out["completed_at"] = timeOrNil(e.CompletedAt)
		out["expires_at"] = timeOrNil(e.ExpiresAt)
		out["result"] = e.Result
	}
	return out
}

// printEntry is inspect's text: a table of the entry's fields, then a
// replayable result's headers and body as they would be replayed.
func (c *cli) printEntry(scope string, key idem.Key, e idem.Entry) error {
	now := c.now()
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "scope\t%s\n", scope)
	fmt.Fprintf(tw, "key\t%s\n", key)
	state := e.State.String()
	if e.State == idem.StateClaimed {
		if now.Before(e.LeaseEnd) {
			state += " (live)"
		} else {
			state += " (abandoned: lease ran out)"
		}
	}
	fmt.Fprintf(tw, "state\t%s\n", state)
	fmt.Fprintf(tw, "generation\t%d\n", e.Generation)
	fmt.Fprintf(tw, "owner\t%s\n", orDash(e.Owner))
	fmt.Fprintf(tw, "fingerprint\t%s\n", orDash(e.Fingerprint))
	fmt.Fprintf(tw, "claimed\t%s\n", c.ago(e.CreatedAt, ""))
	switch e.State {
	case idem.StateClaimed:
		fmt.Fprintf(tw, "lease end\t%s\n", c.ago(e.LeaseEnd, ""))
	case idem.StateCompleted:
		fmt.Fprintf(tw, "completed\t%s\n", c.ago(e.CompletedAt, ""))
		if e.ExpiresAt.IsZero() {
			fmt.Fprintf(tw, "expires\tnever\n")
		} else {
			fmt.Fprintf(tw, "expires\t%s\n", c.ago(e.ExpiresAt, ""))
		}
		r := e.Result
		if r.Unreplayable {
			fmt.Fprintf(tw, "result\tstatus %d, unreplayable (the response was too large to record)\n", r.Status)
			break
		}
		fmt.Fprintf(tw, "result\tstatus %d, %d body bytes\n", r.Status, len(r.Body))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if e.State != idem.StateCompleted || e.Result.Unreplayable {
		return nil
	}
	printResult(c.stdout, e.Result)
	return nil
}

// printResult prints a recorded result's headers, sorted by name, and body.
func printResult(w io.Writer, r idem.Result) {
	if len(r.Header) > 0 {
		names := make([]string, 0, len(r.Header))
		for name := range r.Header {
			names = append(names, name)
		}
		sort.Strings(names)
		fmt.Fprintln(w, "header:")
		for _, name := range names {
			for _, v := range r.Header[name] {
				fmt.Fprintf(w, "  %s: %s\n", name, v)
			}
		}
	}
	if len(r.Body) > 0 {
		fmt.Fprintf(w, "body:\n%s", r.Body)
		if !strings.HasSuffix(string(r.Body), "\n") {
			fmt.Fprintln(w)
		}
	}
}

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
	case errors.Is(err, pgstore.ErrLiveClaim):
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

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func timeOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// ago renders t with its distance from now: "2026-… (3m0s ago)".
func (c *cli) ago(t time.Time, what string) string {
	if t.IsZero() {
		return "none"
	}
	d := c.now().Sub(t).Round(time.Second)
	rel := d.String() + " ago"
	if d < 0 {
		rel = "in " + (-d).String()
	}
	if what != "" {
		rel = what + " " + rel
	}
	return fmt.Sprintf("%s (%s)", t.UTC().Format(time.RFC3339), rel)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB (%d bytes)", float64(n)/(1<<30), n)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB (%d bytes)", float64(n)/(1<<10), n)
	}
	return fmt.Sprintf("%d bytes", n)
}

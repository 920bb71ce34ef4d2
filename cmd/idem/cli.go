package main

// The command line: the subcommands, their dispatch, the global flags and
// the parsing every subcommand shares, and the usage errors (exit 2).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/idemkit/idem/internal/cmdmain"
)

// cli is one invocation: where it reads its environment and writes.
type cli struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
	now    func() time.Time
	// stdin is where a confirmation is read from, when terminal: stdin
	// and stdout are a terminal, where someone can answer.
	stdin    io.Reader
	terminal bool
	// version is what --version prints.
	version string

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
		{"sweep", "[--once] [--interval D] [--batch N]", "release abandoned claims and delete expired results; without --once, until interrupted", (*cli).sweep},
		{"stats", "[--json]", "counts by state, oldest live and abandoned claims, table size", (*cli).stats},
		{"keys", "[--scope S] [--state S] [--prefix P] [--limit N] [--json]", "list the most recent keys, with their scope, state, age and owner", (*cli).keys},
		{"scope", "[-H 'Name: value']... (--route R [--method M] | --mcp) [--session S]", "compute a request's scope from its credentials, session and route", (*cli).scope},
		{"inspect", "[--scope S] (--key K | --stored-key K | --digest D) [--json]", "show a key in one scope or every scope: its claim or recorded result", (*cli).inspect},
		{"digest", "(--key K | --stored-key K) [--scope S | [--route R] [--caller C]]", "the digest log lines name a key by", (*cli).digest},
		{"forget", "--scope S (--key K | --stored-key K) [--force]", "delete one key so that its next request runs again", (*cli).forget},
		{"release", "--scope S (--key K | --stored-key K) [--generation N] [--force]", "release a stuck claim, never a recorded result", (*cli).release},
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
  --version           print the version and exit

Run "idem <command> --help" for a command's flags.
`

// run is the whole CLI, testable in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := &cli{getenv: getenv, stdout: stdout, stderr: stderr, now: time.Now, stdin: os.Stdin, version: buildVersion()}
	out, ok := stdout.(*os.File)
	c.terminal = ok && term.IsTerminal(int(out.Fd())) && term.IsTerminal(int(os.Stdin.Fd()))
	return c.run(ctx, args)
}

// buildVersion is the CLI's version as the build recorded it: the module
// version (go install …@v1.2.0), else "(devel)", with the commit when the
// build was made from a checkout.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " commit " + s.Value[:12]
		}
	}
	return v
}

func (c *cli) run(ctx context.Context, args []string) error {
	usage := func(w io.Writer) { fmt.Fprintf(w, topUsage, commandList(commands)) }
	fs := c.flagSet("idem", usage)
	version := fs.Bool("version", false, "print the version and exit")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *version {
		fmt.Fprintf(c.stdout, "idem %s\n", c.version)
		return nil
	}
	if fs.NArg() == 0 {
		usage(c.stderr)
		return usagef("no command given")
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		fs.Usage()
		return cmdmain.ErrHelp
	}
	for _, cmd := range commands {
		if cmd.name == name {
			return cmd.run(c, ctx, rest)
		}
	}
	return usagef("unknown command %q", name)
}

// commandList lists cmds for the usage: each name and its arguments, and
// under the arguments the summary, in columns as wide as the longest name.
func commandList(cmds []command) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, cmd := range cmds {
		fmt.Fprintf(tw, "  %s\t%s\n  \t%s\n", cmd.name, cmd.usage, cmd.summary)
	}
	tw.Flush() // into a strings.Builder: cannot fail
	return b.String()
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
		return cmdmain.ErrHelp
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

// optionalString is a string flag that knows whether it was given: an
// empty scope is a scope.
type optionalString struct {
	value string
	set   bool
}

func (o *optionalString) String() string { return o.value }

func (o *optionalString) Set(s string) error {
	o.value, o.set = s, true
	return nil
}

// usagef is a bad command line at the top level: exit 2, pointing at
// idem --help.
func usagef(format string, args ...any) error { return usageOf("", fmt.Sprintf(format, args...)) }

// cmdUsagef is usagef for subcommand fs: the message starts with the
// command's name and points at its --help.
func cmdUsagef(fs *flag.FlagSet, format string, args ...any) error {
	cmd := commandName(fs)
	return usageOf(cmd, cmd+": "+fmt.Sprintf(format, args...))
}

// usageOf is the usage error msg, pointing at the --help of subcommand
// cmd (empty: the top level's).
func usageOf(cmd, msg string) error {
	help := "idem --help"
	if cmd != "" {
		help = "idem " + cmd + " --help"
	}
	return &cmdmain.UsageError{Err: fmt.Errorf("%s (see %s)", msg, help)}
}

// commandName is the subcommand fs parses ("stats"), empty for the top level.
func commandName(fs *flag.FlagSet) string {
	return strings.TrimPrefix(strings.TrimPrefix(fs.Name(), "idem"), " ")
}

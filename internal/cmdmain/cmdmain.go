// Package cmdmain is what idem's commands (cmd/idem, cmd/idemdemo,
// cmd/idembench) share around their run functions: a context that SIGINT
// and SIGTERM cancel, the exit status an error stands for, and the one line
// printed for it. A command is a [Run], testable in process, and its main
// is
//
//	func main() { cmdmain.Main("idem", run) }
//
// Its run returns [ErrHelp] when help was asked for and printed, a
// [*UsageError] for a bad command line, and any other error for a failure.
package cmdmain

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// ErrHelp is the error of a run that printed help because it was asked for
// (-help): the process exits 0 and prints nothing more. It is the flag
// package's [flag.ErrHelp], so a FlagSet's own error needs no translation.
var ErrHelp = flag.ErrHelp

// UsageError is a bad command line: the process exits 2. Err says what is
// wrong, with where to read more if the command says so ("see idem stats
// --help").
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef is a [*UsageError] with the message fmt.Errorf would make.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// ExitCode is the exit status for a run's error: 0 for nil and [ErrHelp], 2
// for a [*UsageError], 1 for any other.
func ExitCode(err error) int {
	var u *UsageError
	switch {
	case err == nil, errors.Is(err, ErrHelp):
		return 0
	case errors.As(err, &u):
		return 2
	}
	return 1
}

// Message is the line printed on stderr for a run's error, "name: error";
// empty for nil and [ErrHelp], which print nothing.
func Message(name string, err error) string {
	if ExitCode(err) == 0 {
		return ""
	}
	return name + ": " + err.Error()
}

// Run is a whole command: it runs with the process's arguments (without
// the program's name), environment and outputs, until it is done or ctx
// ends.
type Run func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Main runs run with a context that SIGINT and SIGTERM cancel, prints
// [Message] on stderr and exits with [ExitCode]. Once run has returned, a
// signal is no longer caught: it ends the process as it would without Main.
func Main(name string, run Run) {
	os.Exit(main(name, run, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func main(name string, run Run, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, args, getenv, stdout, stderr)
	stop()
	if line := Message(name, err); line != "" {
		fmt.Fprintln(stderr, line)
	}
	return ExitCode(err)
}

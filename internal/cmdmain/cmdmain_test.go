package cmdmain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExitCodeAndMessage(t *testing.T) {
	failure := errors.New("connect: refused")
	for _, tc := range []struct {
		err  error
		code int
		line string
	}{
		{nil, 0, ""},
		{ErrHelp, 0, ""},
		{fmt.Errorf("parse: %w", ErrHelp), 0, ""},
		{Usagef("unknown command %q (see tool --help)", "x"), 2, `tool: unknown command "x" (see tool --help)`},
		{fmt.Errorf("config: %w", Usagef("-lease must be positive")), 2, "tool: config: -lease must be positive"},
		{failure, 1, "tool: connect: refused"},
	} {
		if got := ExitCode(tc.err); got != tc.code {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.code)
		}
		if got := Message("tool", tc.err); got != tc.line {
			t.Errorf("Message(%v) = %q, want %q", tc.err, got, tc.line)
		}
	}
	if u := (*UsageError)(nil); !errors.As(Usagef("bad: %w", failure), &u) || !errors.Is(u, failure) {
		t.Error("a UsageError does not unwrap to the error it wraps")
	}
}

// TestMainCancelsOnSignal: SIGTERM cancels run's context, and the error run
// returns for it is printed and exits 1.
func TestMainCancelsOnSignal(t *testing.T) {
	var stderr strings.Builder
	code := main("tool", func(ctx context.Context, _ []string, _ func(string) string, _, _ io.Writer) error {
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped: %w", ctx.Err())
		case <-time.After(time.Minute):
			return errors.New("SIGTERM did not cancel the context")
		}
	}, nil, os.Getenv, io.Discard, &stderr)
	if code != 1 || stderr.String() != "tool: stopped: context canceled\n" {
		t.Fatalf("exit %d, stderr %q; want 1 and the run's error", code, stderr.String())
	}
}

func TestMainPrintsNothingForHelp(t *testing.T) {
	var stderr strings.Builder
	help := func(context.Context, []string, func(string) string, io.Writer, io.Writer) error { return ErrHelp }
	if code := main("tool", help, nil, os.Getenv, io.Discard, &stderr); code != 0 || stderr.Len() != 0 {
		t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, stderr.String())
	}
}

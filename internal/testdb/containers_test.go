package testdb

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// countingContainers is a Containers whose engine always answers; it
// counts how often it was asked.
type countingContainers struct{ asked int }

func (c *countingContainers) Available() error { c.asked++; return nil }

func (c *countingContainers) Start(context.Context, ContainerSpec) (Container, error) {
	return nil, errors.New("countingContainers starts nothing")
}

// A run on the developer's own PostgreSQL (TEST_DATABASE_URL) or with
// containers disabled never asks the engine, even one that answers: its
// private servers are local processes and the tests that need containers
// skip, by name and with the reason, in CI too (it is a choice, not a
// missing database).
func TestContainersOff(t *testing.T) {
	for _, tc := range []struct {
		name, url, containers string
		off                   bool
	}{
		{name: "own database", url: "postgres://own", off: true},
		{name: "disabled", containers: "0", off: true},
		{name: "own database, disabled", url: "postgres://own", containers: "0", off: true},
		{name: "neither", off: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TEST_DATABASE_URL", tc.url)
			t.Setenv("IDEM_TEST_CONTAINERS", tc.containers)
			t.Setenv("CI", "true")
			c := &countingContainers{}
			err := containersOff()
			if off := err != nil; off != tc.off {
				t.Fatalf("containersOff() = %v, want off=%v", err, tc.off)
			}
			if !tc.off {
				return
			}
			if !errors.Is(err, ErrContainersOff) {
				t.Errorf("containersOff() = %v, want ErrContainersOff", err)
			}
			if err := available(c); !errors.Is(err, ErrContainersOff) || c.asked != 0 {
				t.Errorf("available() = %v after asking the engine %d times, want ErrContainersOff without asking", err, c.asked)
			}
			rec := &errorRecorder{TB: t}
			RequireContainers(rec, c)
			if len(rec.skips) != 1 || len(rec.errors) != 0 || c.asked != 0 {
				t.Errorf("RequireContainers: skips %q, errors %q, engine asked %d times; want one skip without asking, CI or not", rec.skips, rec.errors, c.asked)
			} else if !strings.Contains(rec.skips[0], "needs containers: containers off: ") {
				t.Errorf("RequireContainers skipped with %q: the reason is not said", rec.skips[0])
			}
		})
	}
}

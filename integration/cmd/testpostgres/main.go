// Command testpostgres starts one PostgreSQL container and holds it for as
// long as its standard input stays open: the database `make test`
// (scripts/test.sh) gives the tests of every module but this one when
// TEST_DATABASE_URL is unset. Those modules' tests have no container
// implementation of their own (idem's root module requires no container
// library; see internal/testdb), so the run starts the container here,
// with the integration module's testcontainers-go (internal/pgcontainer),
// labelled as every test container is (testdb.LabelKind, this process's id,
// IDEM_TEST_SESSION).
//
// Once PostgreSQL accepts connections it prints the database's URL on one
// line of standard output. It removes the container and exits when its
// standard input ends (the script closed it, or died) or on SIGINT or
// SIGTERM. Exit status: 0 when the container was removed, 3 when no Docker
// engine answers or the run uses no containers (IDEM_TEST_CONTAINERS=0,
// TEST_DATABASE_URL set; the reason on standard error: make test then
// starts a PostgreSQL from local binaries instead), 1 on any other
// failure.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemkit/idem/integration/internal/pgcontainer"
	"github.com/idemkit/idem/internal/testdb"
)

// exitNoDocker is the status that says no container could start because
// there is no engine to start it, as opposed to a container that failed.
const exitNoDocker = 3

func main() { os.Exit(run()) }

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	ctr, url, err := testdb.StartShared(startCtx, pgcontainer.Containers{})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testpostgres:", err)
		if errors.Is(err, testdb.ErrNoDocker) || errors.Is(err, testdb.ErrContainersOff) {
			return exitNoDocker
		}
		return 1
	}
	fmt.Println(url)

	stdinDone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinDone)
	}()
	select {
	case <-stdinDone:
	case <-ctx.Done():
	}

	removeCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ctr.Remove(removeCtx); err != nil {
		fmt.Fprintf(os.Stderr, "testpostgres: remove container %s: %v\n", ctr.ID(), err)
		return 1
	}
	return 0
}

package testdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Containers starts PostgreSQL containers for a test binary: the shared
// database of [URL] when TEST_DATABASE_URL is unset, and private servers
// ([StartServer]). This package defines it and never implements it, so
// that the library's module requires no container library: the
// integration module implements it with testcontainers-go
// (integration/internal/pgcontainer) and passes it to [MainWith] from its
// TestMains. The root module's test binaries have none: `make test` gives
// them TEST_DATABASE_URL, a container it starts through the same
// implementation (integration/cmd/testpostgres), and their private servers
// are local processes.
type Containers interface {
	// Available reports whether containers can start: nil, or an error
	// wrapping [ErrNoDocker] when no engine answers (a test then skips,
	// or fails in CI). It is called once per binary, before the first
	// Start.
	Available() error
	// Start starts a container from spec and returns once PostgreSQL in
	// it accepts connections. On an error no container is left running.
	Start(ctx context.Context, spec ContainerSpec) (Container, error)
}

// ContainerSpec is a PostgreSQL container to start: database, user and
// password all "idem", port 5432 published on 127.0.0.1 only.
type ContainerSpec struct {
	// Image is the image to run: [Image] for every container of this
	// package.
	Image string
	// HostPort is the port on 127.0.0.1 that 5432 is published on; 0
	// means a free one, chosen by the engine.
	HostPort int
	// Args are the postgres server's arguments ("-c", "name=value"); nil
	// means none.
	Args []string
	// Labels go on the container (see [LabelKind]).
	Labels map[string]string
}

// Container is one container started by [Containers.Start].
type Container interface {
	// ID is the engine's container id.
	ID() string
	// URL connects to the container's database "idem" as "idem", with
	// sslmode=disable.
	URL(ctx context.Context) (string, error)
	// Running reports whether the container runs.
	Running(ctx context.Context) (bool, error)
	// Signal sends signal ("SIGQUIT") to the container's main process,
	// the postmaster, and waits until the container has stopped.
	Signal(ctx context.Context, signal string) error
	// Start starts the stopped container again, on the same port.
	Start(ctx context.Context) error
	// Remove removes the container and its volumes, running or not.
	Remove(ctx context.Context) error
}

// ErrNoDocker means no container engine answered: a test that needs the
// shared database or a container skips (or fails in CI, where the engine
// is part of the machine), and private servers run local binaries.
var ErrNoDocker = errors.New("no Docker engine")

// ErrContainersOff means this run uses no containers by choice:
// TEST_DATABASE_URL names the developer's own PostgreSQL, or
// IDEM_TEST_CONTAINERS=0. The engine is not asked; private servers run
// local binaries, and a test that exists to check containers skips, in CI
// too (see [RequireContainers]).
var ErrContainersOff = errors.New("containers off")

// containersOff returns an error wrapping [ErrContainersOff] when the
// environment says this run uses no containers, nil when it may.
func containersOff() error {
	switch {
	case os.Getenv("TEST_DATABASE_URL") != "":
		return fmt.Errorf("%w: TEST_DATABASE_URL is set", ErrContainersOff)
	case os.Getenv("IDEM_TEST_CONTAINERS") == "0":
		return fmt.Errorf("%w: IDEM_TEST_CONTAINERS=0", ErrContainersOff)
	}
	return nil
}

// RequireContainers is for a test that checks containers themselves (the
// integration module's pgcontainer): it returns when c can start them, and
// otherwise skips t, saying why: always when the run uses no containers by
// choice ([ErrContainersOff]), and without a Docker engine only on a
// developer's machine (in CI it fails, as a missing database does).
func RequireContainers(t testing.TB, c Containers) {
	t.Helper()
	err := available(c)
	switch {
	case err == nil:
	case errors.Is(err, ErrContainersOff):
		t.Skip("needs containers: " + err.Error())
	case errors.Is(err, ErrNoDocker) && os.Getenv("CI") == "":
		t.Skip("needs containers: " + err.Error())
	default:
		t.Fatalf("testdb: needs containers: %v", err)
	}
}

// DefaultImage is the PostgreSQL image containers run when
// IDEM_TEST_POSTGRES_IMAGE is unset. Any image that behaves like the
// official one works (scripts/images.sh builds one from Debian packages).
const DefaultImage = "postgres:17-alpine"

// Image is the image of every container: IDEM_TEST_POSTGRES_IMAGE, else
// [DefaultImage].
func Image() string {
	if img := os.Getenv("IDEM_TEST_POSTGRES_IMAGE"); img != "" {
		return img
	}
	return DefaultImage
}

// Labels on every container started through this package, so that one
// left behind (a process killed before it could clean up) can be found:
//
//	docker ps -a --filter label=io.idemkit.testdb
//
// LabelSession carries IDEM_TEST_SESSION, which `make test` sets to check
// that no container of its run outlives it. A container whose process
// (LabelPID on LabelHost) no longer runs is removed the next time
// containers are found available ([Containers.Available]): one whose
// process died without cleaning up (SIGKILL, the go test timeout) is left
// only until then.
const (
	LabelKind    = "io.idemkit.testdb"         // "shared" or "server"
	LabelPID     = "io.idemkit.testdb.pid"     // the owning process's id
	LabelHost    = "io.idemkit.testdb.host"    // the owning process's host name
	LabelSession = "io.idemkit.testdb.session" // $IDEM_TEST_SESSION
)

// Spec is the [ContainerSpec] of a container of kind ("shared" or
// "server") owned by this process: [Image], the labels, hostPort and args.
func Spec(kind string, hostPort int, args ...string) ContainerSpec {
	host, _ := os.Hostname()
	labels := map[string]string{LabelKind: kind, LabelPID: strconv.Itoa(os.Getpid()), LabelHost: host}
	if s := os.Getenv("IDEM_TEST_SESSION"); s != "" {
		labels[LabelSession] = s
	}
	return ContainerSpec{Image: Image(), HostPort: hostPort, Args: args, Labels: labels}
}

// StartShared starts the container of a shared test database, one every
// test's schema lives in, and returns it with its URL. It checks
// c.Available first. [URL] uses it once per binary; so does
// integration/cmd/testpostgres, once for a whole `make test`.
func StartShared(ctx context.Context, c Containers) (Container, string, error) {
	if err := available(c); err != nil {
		return nil, "", err
	}
	// Tests open many pools in parallel: more connections than the default 100.
	ctr, err := c.Start(ctx, Spec("shared", 0, "-c", "max_connections=500"))
	if err != nil {
		return nil, "", fmt.Errorf("start a PostgreSQL container from %s: %w", Image(), err)
	}
	url, err := ctr.URL(ctx)
	if err != nil {
		_ = ctr.Remove(context.WithoutCancel(ctx))
		return nil, "", fmt.Errorf("container URL: %w", err)
	}
	return ctr, url, nil
}

var (
	availableOnce sync.Once
	availableErr  error
)

// available is c.Available, asked once per process; without asking, an
// [ErrContainersOff] when the run uses no containers and [ErrNoDocker] when
// c is nil.
func available(c Containers) error {
	if err := containersOff(); err != nil {
		return err
	}
	if c == nil {
		return fmt.Errorf("%w: this test binary has no container implementation (the root module's tests get TEST_DATABASE_URL from make test)", ErrNoDocker)
	}
	availableOnce.Do(func() { availableErr = c.Available() })
	return availableErr
}

// The containers of this test binary, while a TestMain wrapped by [MainWith]
// runs the tests: only then does this package start containers, because only
// then is there someone to remove them.
var (
	mainMu     sync.Mutex
	containers Containers // nil: none, or not running under MainWith
	sharedFn   func() (string, error)
	live       = map[Container]bool{}
)

// runningContainers is the binary's Containers, nil outside [MainWith].
func runningContainers() Containers {
	mainMu.Lock()
	defer mainMu.Unlock()
	return containers
}

// startContainer starts a container for spec through the binary's
// Containers and registers it for removal when the tests end.
func startContainer(ctx context.Context, spec ContainerSpec) (Container, error) {
	c := runningContainers()
	if err := available(c); err != nil {
		return nil, err
	}
	ctr, err := c.Start(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("start a PostgreSQL container from %s: %w", spec.Image, err)
	}
	if !register(ctr) {
		_ = ctr.Remove(context.WithoutCancel(ctx))
		return nil, errors.New("the tests ended while a container started")
	}
	return ctr, nil
}

// register records ctr for removal at the end, unless the end has begun.
func register(ctr Container) bool {
	mainMu.Lock()
	defer mainMu.Unlock()
	if containers == nil {
		return false
	}
	live[ctr] = true
	return true
}

// removeContainer removes ctr and forgets it.
func removeContainer(ctr Container) error {
	mainMu.Lock()
	delete(live, ctr)
	mainMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return ctr.Remove(ctx)
}

// sharedURL starts, once per test binary, the container every test's schema
// lives in and returns its URL.
func sharedURL() (string, error) {
	mainMu.Lock()
	if sharedFn == nil {
		sharedFn = sync.OnceValues(func() (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			ctr, url, err := StartShared(ctx, runningContainers())
			if err != nil {
				return "", err
			}
			if !register(ctr) {
				_ = ctr.Remove(ctx)
				return "", errors.New("the tests ended while the shared container started")
			}
			return url, nil
		})
	}
	fn := sharedFn
	mainMu.Unlock()
	return fn()
}

// Runner is what a TestMain runs: *testing.M, or a [Main] around it.
type Runner interface{ Run() int }

// Main wraps a test binary's testing.M for a package of the root module,
// whose tests start no container: the database is TEST_DATABASE_URL and
// private servers are local processes. It runs m as it is; it exists so
// that every test binary that uses this package has one TestMain shape:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(testdb.Main(m)) }
func Main(m Runner) Runner { return MainWith(m, nil) }

// MainWith is [Main] for a test binary that may start containers through c
// (nil: none): without TEST_DATABASE_URL the shared database is a
// container, and so is each private server. Its Run, once the tests are
// done, removes every container it started, the shared one and any a test
// left behind, and removes them too when the binary is interrupted
// (SIGINT, SIGTERM). A failure to remove one fails the run. The
// integration module's pgcontainer.Main is MainWith with testcontainers-go.
func MainWith(m Runner, c Containers) Runner { return mainRunner{m, c} }

type mainRunner struct {
	m Runner
	c Containers
}

func (r mainRunner) Run() int {
	if r.c == nil {
		return r.m.Run()
	}
	mainMu.Lock()
	containers = r.c
	mainMu.Unlock()

	// Interrupted (Ctrl-C on make test, or SIGTERM), the binary would die
	// with its containers running: remove them first.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	stopWatching, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case sig := <-signals:
			removeAll()
			fmt.Fprintf(os.Stderr, "testdb: %v: removed this binary's PostgreSQL containers\n", sig)
			os.Exit(1)
		case <-stopWatching:
		}
	}()

	code := r.m.Run()

	signal.Stop(signals)
	close(stopWatching)
	<-watched
	if !removeAll() {
		code = 1
	}
	return code
}

// removeAll removes every container still registered, reporting whether
// all were removed. No container starts afterwards.
func removeAll() bool {
	mainMu.Lock()
	containers = nil
	var ctrs []Container
	for c := range live {
		ctrs = append(ctrs, c)
	}
	mainMu.Unlock()
	ok := true
	for _, c := range ctrs {
		if err := removeContainer(c); err != nil {
			fmt.Fprintf(os.Stderr, "testdb: remove container %s: %v\n", c.ID(), err)
			ok = false
		}
	}
	return ok
}

// LiveContainers returns the ids of the containers this binary started and
// has not removed yet, for a test that checks their removal.
func LiveContainers() []string {
	mainMu.Lock()
	defer mainMu.Unlock()
	var ids []string
	for c := range live {
		ids = append(ids, c.ID())
	}
	return ids
}

// waitAccepting polls url until a query succeeds or ctx ends.
func waitAccepting(ctx context.Context, url string) error {
	for {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("PostgreSQL does not accept connections: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

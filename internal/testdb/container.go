package testdb

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/modules/postgres"
)

// DefaultImage is the PostgreSQL image the tests run when
// IDEM_TEST_POSTGRES_IMAGE is unset. Any image that behaves like the
// official one works (scripts/images.sh builds one from Debian packages).
const DefaultImage = "postgres:17-alpine"

// Labels on every container this package starts, so that one left behind
// (a test binary killed before TestMain could clean up) can be found:
//
//	docker ps -a --filter label=io.idemkit.testdb
//
// LabelSession carries IDEM_TEST_SESSION, which `make test` sets to check
// that no container of its run outlives it.
// A container whose test binary (LabelPID on LabelHost) no longer runs is
// removed by the next test binary that starts containers: one that died
// without cleaning up (SIGKILL, the go test timeout) leaves it only until
// then.
const (
	LabelKind    = "io.idemkit.testdb"         // "shared" or "server"
	LabelPID     = "io.idemkit.testdb.pid"     // the test binary's process id
	LabelHost    = "io.idemkit.testdb.host"    // the test binary's host name
	LabelSession = "io.idemkit.testdb.session" // $IDEM_TEST_SESSION
)

// errNoDocker means no Docker engine answered, or IDEM_TEST_CONTAINERS=0
// said not to use one: the caller skips (or fails in CI) as it does without
// TEST_DATABASE_URL, and private servers run local binaries.
var errNoDocker = errors.New("no Docker engine")

var (
	dockerOnce sync.Once
	dockerErr  error

	// main is set while a TestMain wrapped by [Main] runs the tests: only
	// then does this package start containers, because only then is there
	// someone to remove them.
	mainMu   sync.Mutex
	mainOn   bool
	sharedFn func() (string, error) // memoised start of the shared container
	live     = map[*postgres.PostgresContainer]bool{}
)

// dockerAvailable reports whether a Docker engine answers, once per binary.
func dockerAvailable() error {
	dockerOnce.Do(func() {
		if os.Getenv("IDEM_TEST_CONTAINERS") == "0" {
			dockerErr = fmt.Errorf("%w: containers disabled by IDEM_TEST_CONTAINERS=0", errNoDocker)
			return
		}
		// Testcontainers' reaper (Ryuk) is an image pulled from a registry;
		// this package removes its containers itself (see [Main]).
		if _, set := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !set {
			_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
		}
		// Containers publish their port on 127.0.0.1 only: the engine is
		// local. (Testcontainers would guess the host from the default
		// gateway when it believes it runs in a container itself.)
		if _, set := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); !set {
			_ = os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
		}
		if os.Getenv("IDEM_TEST_VERBOSE_CONTAINERS") == "" {
			tclog.SetDefault(tclog.NewNoopLogger())
		}
		// Generous: a busy engine (an image import, many test binaries
		// starting containers) can take seconds to answer, and a timeout
		// here would turn every test of the binary into a skip.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err != nil {
			dockerErr = fmt.Errorf("%w: %v", errNoDocker, err)
			return
		}
		defer cli.Close()
		if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
			dockerErr = fmt.Errorf("%w: %v", errNoDocker, err)
			return
		}
		removeOrphans(ctx, cli)
	})
	return dockerErr
}

// removeOrphans removes the containers that test binaries of this host
// left behind when they died without cleaning up: labelled with a process
// id that no longer runs. Best effort: an error leaves them.
func removeOrphans(ctx context.Context, cli *testcontainers.DockerClient) {
	host, _ := os.Hostname()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelKind)})
	if err != nil {
		return
	}
	for _, c := range list.Items {
		pid, err := strconv.Atoi(c.Labels[LabelPID])
		if c.Labels[LabelHost] != host || err != nil || processRuns(pid) {
			continue
		}
		_, _ = cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	}
}

// processRuns reports whether a process with this id exists.
func processRuns(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func image() string {
	if img := os.Getenv("IDEM_TEST_POSTGRES_IMAGE"); img != "" {
		return img
	}
	return DefaultImage
}

// runContainer starts a PostgreSQL container with database, user and
// password all "idem", labelled with kind, published on 127.0.0.1 only (on
// hostPort, or a free port when it is 0), and registers it for [Main] to
// remove.
func runContainer(ctx context.Context, kind string, hostPort int, args ...string) (*postgres.PostgresContainer, error) {
	mainMu.Lock()
	on := mainOn
	mainMu.Unlock()
	if !on {
		return nil, errors.New("this package's TestMain does not use testdb.Main, so nothing would remove the container: " +
			"write func TestMain(m *testing.M) { goleak.VerifyTestMain(testdb.Main(m)) }")
	}
	if err := dockerAvailable(); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	labels := map[string]string{LabelKind: kind, LabelPID: strconv.Itoa(os.Getpid()), LabelHost: host}
	if s := os.Getenv("IDEM_TEST_SESSION"); s != "" {
		labels[LabelSession] = s
	}
	port := ""
	if hostPort != 0 {
		port = strconv.Itoa(hostPort)
	}
	ctr, err := postgres.Run(ctx, image(),
		postgres.WithDatabase("idem"),
		postgres.WithUsername("idem"),
		postgres.WithPassword("idem"),
		postgres.BasicWaitStrategies(),
		testcontainers.WithCmdArgs(args...),
		testcontainers.WithLabels(labels),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort("5432/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: port}},
			}
		}),
	)
	if ctr != nil {
		mainMu.Lock()
		live[ctr] = true
		mainMu.Unlock()
	}
	if err != nil {
		if ctr != nil {
			_ = terminate(ctr)
		}
		return nil, fmt.Errorf("start a PostgreSQL container from %s: %w", image(), err)
	}
	return ctr, nil
}

// terminate removes ctr (and its volumes) and forgets it.
func terminate(ctr *postgres.PostgresContainer) error {
	mainMu.Lock()
	delete(live, ctr)
	mainMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return ctr.Terminate(ctx, testcontainers.StopTimeout(0))
}

// sharedURL starts, once per test binary, the container every test's schema
// lives in and returns its URL.
func sharedURL() (string, error) {
	mainMu.Lock()
	if sharedFn == nil {
		sharedFn = sync.OnceValues(startShared)
	}
	fn := sharedFn
	mainMu.Unlock()
	return fn()
}

func startShared() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Tests open many pools in parallel: more connections than the default 100.
	ctr, err := runContainer(ctx, "shared", 0, "-c", "max_connections=500")
	if err != nil {
		return "", err
	}
	url, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return "", fmt.Errorf("container URL: %w", err)
	}
	return url, nil
}

// Main wraps a test binary's testing.M so that its Run, once the tests are
// done, removes every PostgreSQL container this package started: the
// shared one and any private [Server] a test left behind. Every package
// whose tests use this package (without TEST_DATABASE_URL, the database is
// a container) calls it from TestMain, before goleak looks for leaks:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(testdb.Main(m)) }
//
// A failure to remove a container fails the run.
func Main(m interface{ Run() int }) interface{ Run() int } {
	return mainRunner{m}
}

type mainRunner struct{ m interface{ Run() int } }

func (r mainRunner) Run() int {
	mainMu.Lock()
	mainOn = true
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
	mainOn = false
	var ctrs []*postgres.PostgresContainer
	for c := range live {
		ctrs = append(ctrs, c)
	}
	mainMu.Unlock()
	ok := true
	for _, c := range ctrs {
		if err := terminate(c); err != nil {
			fmt.Fprintf(os.Stderr, "testdb: remove container %s: %v\n", c.GetContainerID(), err)
			ok = false
		}
	}
	return ok
}

// Signals [Server.Stop] sends for pg_ctl's shutdown modes.
var stopSignals = map[string]string{"smart": "SIGTERM", "fast": "SIGINT", "immediate": "SIGQUIT"}

// killAndWait sends sig to the container's main process (the postmaster)
// and waits until the container has stopped.
func killAndWait(ctx context.Context, ctr *postgres.PostgresContainer, sig string) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	id := ctr.GetContainerID()
	// Wait registered first, so a fast exit is not missed.
	wait := cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	if _, err := cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: sig}); err != nil {
		return fmt.Errorf("docker kill -s %s: %w", sig, err)
	}
	select {
	case <-wait.Result:
		return nil
	case err := <-wait.Error:
		return fmt.Errorf("wait for the container to stop: %w", err)
	}
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

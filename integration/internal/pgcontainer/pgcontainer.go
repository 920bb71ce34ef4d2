// Package pgcontainer starts the tests' PostgreSQL containers with
// testcontainers-go: it implements internal/testdb's [testdb.Containers].
// It lives in the integration module so that the library's module requires
// no container library (see testdb's package documentation): the
// integration module's TestMains use [Main], and
// integration/cmd/testpostgres starts the one container `make test` gives
// the other modules' tests.
//
// Testcontainers' reaper (Ryuk) is not used: it is an image pulled from a
// registry. Containers are removed by their owner (testdb's MainWith, or
// testpostgres), and one whose owner died without cleaning up is removed
// by the next [Containers.Available] on the same host (see
// testdb.LabelPID).
package pgcontainer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/idemkit/idem/internal/testdb"
)

// Main is testdb.MainWith with these containers: a TestMain body for a
// package of the integration module,
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgcontainer.Main(m)) }
func Main(m testdb.Runner) testdb.Runner { return testdb.MainWith(m, Containers{}) }

// Containers starts PostgreSQL containers with testcontainers-go's postgres
// module. The zero value is ready to use.
type Containers struct{}

var _ testdb.Containers = Containers{}

// Available pings the Docker engine and removes the containers that
// processes of this host left behind (labelled with a process id that no
// longer runs).
func (Containers) Available() error {
	// Ryuk is an image pulled from a registry; the owner removes its
	// containers itself.
	if _, set := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !set {
		_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	// Containers publish their port on 127.0.0.1 only: the engine is
	// local. (Testcontainers would guess the host from the default gateway
	// when it believes it runs in a container itself.)
	if _, set := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); !set {
		_ = os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
	if os.Getenv("IDEM_TEST_VERBOSE_CONTAINERS") == "" {
		tclog.SetDefault(tclog.NewNoopLogger())
	}
	// Generous: a busy engine (an image import, many test binaries
	// starting containers) can take seconds to answer, and a timeout here
	// would turn every test of the binary into a skip.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("%w: %v", testdb.ErrNoDocker, err)
	}
	defer cli.Close()
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("%w: %v", testdb.ErrNoDocker, err)
	}
	removeOrphans(ctx, cli)
	return nil
}

// removeOrphans removes the containers that processes of this host left
// behind when they died without cleaning up: labelled with a process id
// that no longer runs. Best effort: an error leaves them.
func removeOrphans(ctx context.Context, cli *testcontainers.DockerClient) {
	host, _ := os.Hostname()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", testdb.LabelKind)})
	if err != nil {
		return
	}
	for _, c := range list.Items {
		pid, err := strconv.Atoi(c.Labels[testdb.LabelPID])
		if c.Labels[testdb.LabelHost] != host || err != nil || processRuns(pid) {
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

// Start starts a container from spec with testcontainers-go's postgres
// module and waits for its readiness (its log and its port).
func (Containers) Start(ctx context.Context, spec testdb.ContainerSpec) (testdb.Container, error) {
	port := ""
	if spec.HostPort != 0 {
		port = strconv.Itoa(spec.HostPort)
	}
	ctr, err := postgres.Run(ctx, spec.Image,
		postgres.WithDatabase("idem"),
		postgres.WithUsername("idem"),
		postgres.WithPassword("idem"),
		postgres.BasicWaitStrategies(),
		testcontainers.WithCmdArgs(spec.Args...),
		testcontainers.WithLabels(spec.Labels),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort("5432/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: port}},
			}
		}),
	)
	if err != nil {
		if ctr != nil {
			_ = pgContainer{ctr}.Remove(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	return pgContainer{ctr}, nil
}

// pgContainer is a testdb.Container.
type pgContainer struct{ c *postgres.PostgresContainer }

func (p pgContainer) ID() string { return p.c.GetContainerID() }

func (p pgContainer) URL(ctx context.Context) (string, error) {
	return p.c.ConnectionString(ctx, "sslmode=disable")
}

func (p pgContainer) Running(ctx context.Context) (bool, error) {
	st, err := p.c.State(ctx)
	if err != nil {
		return false, err
	}
	return st.Running, nil
}

func (p pgContainer) Start(ctx context.Context) error { return p.c.Start(ctx) }

func (p pgContainer) Remove(ctx context.Context) error {
	return p.c.Terminate(ctx, testcontainers.StopTimeout(0))
}

// Signal sends sig to the container's main process (the postmaster) and
// waits until the container has stopped.
func (p pgContainer) Signal(ctx context.Context, sig string) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	id := p.ID()
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

package pgcontainer

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(Main(m)) }

// needDocker skips t, saying why, in a run without containers
// (TEST_DATABASE_URL set, or IDEM_TEST_CONTAINERS=0) and without a Docker
// engine; in CI a missing engine fails it instead, since there the engine
// is part of the machine.
func needDocker(t *testing.T) {
	t.Helper()
	testdb.RequireContainers(t, Containers{})
}

// helperEnv makes TestContainerOutlivesNothing's child process a test
// binary that starts the shared container and waits.
const helperEnv = "IDEM_TESTDB_HELPER"

// TestContainerOutlivesNothing runs this test binary as a child that starts
// the shared container (TEST_DATABASE_URL unset), and checks that the
// container is gone after the child ends, both when its tests finish and
// when it is interrupted (Ctrl-C) mid-test.
func TestContainerOutlivesNothing(t *testing.T) {
	if mode := os.Getenv(helperEnv); mode != "" {
		testdb.URL(t)
		for _, id := range testdb.LiveContainers() {
			fmt.Printf("CONTAINER %s\n", id)
		}
		if mode == "wait" {
			time.Sleep(2 * time.Minute) // until interrupted
		}
		return
	}
	needDocker(t)
	t.Parallel()
	for _, mode := range []string{"finish", "wait"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestContainerOutlivesNothing$", "-test.count=1")
			cmd.Env = append(withoutDatabaseURL(os.Environ()), helperEnv+"="+mode)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stdout)
			id := ""
			for sc.Scan() {
				if rest, ok := strings.CutPrefix(sc.Text(), "CONTAINER "); ok {
					id = rest
					break
				}
			}
			if id == "" {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("the child started no container; stderr:\n%s", stderr.String())
			}
			if !containerExists(t, id) {
				t.Fatalf("container %s is not there while the child runs", id)
			}
			if mode == "wait" {
				_ = cmd.Process.Signal(syscall.SIGINT)
			}
			_, _ = io.Copy(io.Discard, stdout) // until the child exits
			_ = cmd.Wait()
			if containerExists(t, id) {
				t.Fatalf("container %s outlived the test binary (%s); stderr:\n%s", id, mode, stderr.String())
			}
		})
	}
}

// withoutDatabaseURL is env without TEST_DATABASE_URL, so that a child
// test binary starts its shared container.
func withoutDatabaseURL(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TEST_DATABASE_URL=") {
			out = append(out, kv)
		}
	}
	return out
}

func containerExists(t *testing.T, id string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	_, err = cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	return err == nil
}

// TestOrphansAreRemoved: a container labelled with the process id of a
// process that no longer runs is removed when the next binary probes
// Docker; one whose process runs is left alone.
func TestOrphansAreRemoved(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("the child of TestContainerOutlivesNothing")
	}
	needDocker(t)
	t.Parallel()
	// The shared container's start brings the image (a pull, on a machine
	// that never ran it), which ContainerCreate below does not.
	testdb.URL(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() }) // after the containers' removal
	host, _ := os.Hostname()
	// A process that has exited: its id is free until reused.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	create := func(pid int) string {
		t.Helper()
		res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Config: &container.Config{Image: testdb.Image(), Labels: map[string]string{
				testdb.LabelKind: "orphan-test", testdb.LabelPID: fmt.Sprint(pid), testdb.LabelHost: host,
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = cli.ContainerRemove(context.Background(), res.ID, client.ContainerRemoveOptions{Force: true})
		})
		return res.ID
	}
	orphan, owned := create(gone.Process.Pid), create(os.Getpid())
	removeOrphans(ctx, cli)
	if containerExists(t, orphan) {
		t.Error("the container of a process that no longer runs was not removed")
	}
	if !containerExists(t, owned) {
		t.Error("the container of a running process was removed")
	}
}

// TestServerStopsAndStarts: a private server in a container (StartServer
// in a binary with Containers) refuses queries once stopped as by a crash,
// and answers again on the same URL once started.
func TestServerStopsAndStarts(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("the child of TestContainerOutlivesNothing")
	}
	needDocker(t)
	if os.Getenv(testdb.BinEnv) != "" {
		t.Skipf("%s is set: private servers are local processes", testdb.BinEnv)
	}
	t.Parallel()
	s := testdb.StartServer(t)
	if len(testdb.LiveContainers()) == 0 {
		t.Fatal("StartServer started no container")
	}
	testdb.CheckStopsAndStarts(t, s)
}

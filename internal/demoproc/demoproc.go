// Package demoproc builds the demo service (cmd/idemdemo) and runs it as a
// child process for tests: the demo's own process tests and the fault suite
// in the integration module both use it, so that they start, watch and stop
// the demo the same way.
//
// A test package builds the binary once in TestMain with [Main] (or
// [Build]), then starts a process per test with [Start]. Start waits until the demo prints its
// listening line and registers a cleanup that stops it with SIGTERM, so no
// process and no goroutine reading its output outlives the test (goleak).
// A program that runs the demo (integration/cmd/scaleload) starts it with
// [Launch] and stops it with [Process.Terminate].
package demoproc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/testlog"
)

// built is the binary Main built: what an empty Config.Binary runs.
var built string

// Main is a TestMain body: it builds the demo as Build does (with race, the
// race detector), keeps the binary's path as the one an empty
// [Config.Binary] runs (and stores it in *binary, unless binary is nil for
// a package that needs it nowhere else), runs the tests with
// m (testdb.Main(m), or in the integration module pgcontainer.Main(m),
// which removes the PostgreSQL containers they started) and, if they
// passed, fails unless no goroutine is left behind. It returns the exit
// code for os.Exit, after removing the binary.
func Main(m testdb.Runner, race bool, binary *string) int {
	path, cleanup, err := Build(race)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	built = path
	if binary != nil {
		*binary = path
	}
	code := m.Run()
	if code == 0 {
		// goleak.VerifyTestMain would call os.Exit itself, before the
		// deferred removal; Find checks the same after the tests ran.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// Build builds the demo into a temporary directory and returns the binary's
// path and a cleanup that removes the directory. It builds in the demo's
// module, cmd/idemdemo of the library's checkout (found with go list, also
// from a module that replaces it), with that module's dependencies, as its
// users build it (in idem's workspace, or with GOWORK=off from the demo's
// go.mod alone). With race the binary
// has the race detector. The go command's output goes to os.Stderr.
func Build(race bool) (path string, cleanup func(), err error) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/idemkit/idem").Output()
	if err != nil {
		return "", nil, fmt.Errorf("locating the idem module: %w", err)
	}
	dir, err := os.MkdirTemp("", "idemdemo-bin")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	path = filepath.Join(dir, "idemdemo")
	args := []string{"build"}
	if race {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "-o", path, ".")...)
	build.Dir = filepath.Join(strings.TrimSpace(string(root)), "cmd", "idemdemo")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("building idemdemo: %w", err)
	}
	return path, cleanup, nil
}

// listening is the line the demo prints on stdout once it accepts
// connections.
var listening = regexp.MustCompile(`idemdemo listening on (http://\S+) \(store: (\w+)\)`)

// ListeningURL returns the base URL of the demo's listening line, and
// whether line is that line.
func ListeningURL(line string) (string, bool) {
	m := listening.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// Config is how a demo process is run.
type Config struct {
	// Binary is the demo binary, from Build. Empty means the one Main
	// built; outside a test binary whose TestMain is Main it is required.
	Binary string
	// Addr is passed as -addr (host:port). Empty means 127.0.0.1:0: the
	// process picks a free port, which URL then reports.
	Addr string
	// DatabaseURL is passed as DATABASE_URL. Empty leaves it unset, so the
	// demo runs on its in-memory store unless Args say otherwise.
	DatabaseURL string
	// Args follow -addr on the command line. Nil adds none.
	Args []string
	// Env is added to the test's environment, from which DATABASE_URL and
	// every IDEMDEMO_ variable are removed so that only the test configures
	// the demo. Nil adds none.
	Env []string
}

// Process is a running (or exited) demo process.
type Process struct {
	t      testing.TB // the test that started it; nil when Launch did
	cfg    Config     // as it was started, for Restart
	cmd    *exec.Cmd
	url    string
	stdout testlog.Buffer
	stderr testlog.Buffer
	done   chan struct{} // closed once the process exited and its stdout is read
	err    error         // its exit status, once done
}

// Start runs the demo as cfg says and waits until it listens, failing t if
// it exits before or does not listen within a minute. When t ends the
// process is stopped as by Stop, unless it is gone already, and its stderr
// is logged if t failed.
func Start(t testing.TB, cfg Config) *Process {
	t.Helper()
	p, err := Launch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.t = t
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("idemdemo (%s) stderr:\n%s", p.url, p.stderr.String())
		}
	})
	return p
}

// Launch runs the demo as cfg says and waits until it listens, for a
// program rather than a test: where Start fails its test, Launch returns
// the error, with the process gone (killed if it did not listen within a
// minute). The caller stops the process with [Process.Terminate]; Stop,
// Kill and Restart are for a process Start started.
func Launch(cfg Config) (*Process, error) {
	if cfg.Binary == "" {
		cfg.Binary = built
	}
	if cfg.Binary == "" {
		return nil, errors.New("demoproc: no idemdemo binary: Config.Binary is empty and Main built none")
	}
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	p := &Process{cfg: cfg, done: make(chan struct{})}
	p.cmd = exec.Command(cfg.Binary, append([]string{"-addr", addr}, cfg.Args...)...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "IDEMDEMO_") {
			env = append(env, kv)
		}
	}
	if cfg.DatabaseURL != "" {
		env = append(env, "DATABASE_URL="+cfg.DatabaseURL)
	}
	p.cmd.Env = append(env, cfg.Env...)
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	found := make(chan string, 1)
	// Reads stdout to its end, which comes when the process exits, then
	// reaps the process: this goroutine ends with it.
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			_, _ = p.stdout.Write([]byte(line + "\n"))
			if u, ok := ListeningURL(line); ok {
				select {
				case found <- u:
				default:
				}
			}
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	select {
	case p.url = <-found:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("idemdemo exited before listening (%v); stderr:\n%s", p.err, p.stderr.String())
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		return nil, fmt.Errorf("idemdemo did not listen within a minute; stderr:\n%s", p.stderr.String())
	}
}

// URL is the base URL the process listens on (http://host:port).
func (p *Process) URL() string { return p.url }

// Stdout is what the process printed on stdout so far.
func (p *Process) Stdout() *testlog.Buffer { return &p.stdout }

// Stderr is what the process printed on stderr (its logs) so far.
func (p *Process) Stderr() *testlog.Buffer { return &p.stderr }

// Alive reports whether the process still runs.
func (p *Process) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL and waits until the process is gone: nothing of it
// runs afterwards (no deferred rollback, release or response). A process
// that is gone already is left as it is.
func (p *Process) Kill() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatalf("killing idemdemo: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		p.t.Fatal("idemdemo did not die within a minute of SIGKILL")
	}
}

// Restart starts a new process as p was started, on the address p
// listened on, so that the clients that retry p's URL reach it, and waits
// until it listens; p must be gone (Kill or Stop it first). The new process
// belongs to the test that started p, as by Start.
func (p *Process) Restart() *Process {
	p.t.Helper()
	cfg := p.cfg
	cfg.Addr = strings.TrimPrefix(p.url, "http://")
	return Start(p.t, cfg)
}

// Stop sends SIGTERM and waits for the process to exit; a process that does
// not exit cleanly within a minute is a test error. A process that is gone
// already is left as it is.
func (p *Process) Stop() {
	if err := p.Terminate(); err != nil {
		p.t.Error(err)
	}
}

// Terminate sends SIGTERM and waits for the process to exit, and returns
// an error if it did not exit cleanly: with a failure status, or not
// within a minute (it is killed then). A process that is gone already is
// left as it is, and nil returned.
func (p *Process) Terminate() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("idemdemo did not stop within a minute of SIGTERM")
	}
	if p.err != nil {
		return fmt.Errorf("idemdemo exited with %w", p.err)
	}
	return nil
}

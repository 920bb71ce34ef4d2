package ha_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is a child process of the test (etcd, a Patroni member, HAProxy),
// its output going to a log file.
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{} // closed when it exited
	err  error
}

// runAs is who the cluster's processes run as: PostgreSQL refuses to run as
// root, and Patroni runs it as itself, so as root they run as "postgres"
// (as Debian's patroni@.service does); otherwise as the test's own user.
type runAs struct {
	cred     *syscall.Credential // nil: the test's user
	uid, gid int
}

func clusterUser(t testing.TB) runAs {
	t.Helper()
	if os.Geteuid() != 0 {
		return runAs{uid: os.Getuid(), gid: os.Getgid()}
	}
	pg, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("running as root needs a postgres user for the cluster: %v", err)
	}
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	return runAs{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid: uid, gid: gid}
}

// mkdir makes dir, owned by the cluster's user.
func (u runAs) mkdir(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
}

// writeFile writes a file owned by the cluster's user.
func (u runAs) writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
}

// start runs argv with its output appended to logPath; as the cluster's
// user when u is set. It runs in a process group of its own, so that
// nothing it does reaches the test's.
func start(t testing.TB, name, logPath string, u *runAs, argv ...string) *proc {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = filepath.Dir(logPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if u != nil && u.cred != nil {
		cmd.SysProcAttr.Credential = u.cred
		cmd.Env = append(os.Environ(), "HOME="+filepath.Dir(logPath))
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill(t testing.TB) {
	t.Helper()
	if !p.alive() {
		return
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("kill %s: %v", p.name, err)
	}
	<-p.done
}

// stop sends SIGTERM and waits up to grace for the process to exit, then
// kills it.
func (p *proc) stop(grace time.Duration) {
	if !p.alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string { return tailFile(p.log, n) }

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// pidAlive reports whether pid is a running process (not a zombie: the
// cluster's postmasters are not the test's children once Patroni started
// them, and nobody may reap them).
func pidAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// childrenOf returns the pids whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
			if c, err := strconv.Atoi(filepath.Base(filepath.Dir(d))); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// waitGone waits up to d for pid to be gone, reporting whether it is.
func waitGone(pid int, d time.Duration) bool {
	end := time.Now().Add(d)
	for pidAlive(pid) {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

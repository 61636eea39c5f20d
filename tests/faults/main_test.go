package faults

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// childVar selects a child mode: the test binary then runs one rank (or a
// foreign process) instead of the tests.
const childVar = "FAULTS_CHILD"

var longFlag = flag.Bool("long", false, "run the long variants (also GOCCL_FAULTS_LONG=1)")

func TestMain(m *testing.M) {
	if mode := os.Getenv(childVar); mode != "" {
		os.Exit(childMain(mode))
	}
	// A TMPDIR of this package's own (the children inherit it): the leak
	// checks compare the goccl files in it before and after, which other
	// test packages running at the same time must not touch.
	tmp, err := os.MkdirTemp("", "goccl-tests-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults: temporary directory:", err)
		os.Exit(2)
	}
	os.Setenv("TMPDIR", tmp)
	code := m.Run()
	if gocclDir != "" {
		_ = os.RemoveAll(gocclDir)
	}
	_ = os.RemoveAll(tmp)
	os.Exit(code)
}

// long reports whether the long variants were asked for.
func long() bool { return *longFlag || os.Getenv("GOCCL_FAULTS_LONG") == "1" }

// pick returns ci in CI runs and lng in long runs.
func pick(ci, lng int) int {
	if long() {
		return lng
	}
	return ci
}

// proc is a child process whose stdout is read line by line.
type proc struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{} // closed when the process has been reaped
	err   error         // Wait's result, valid after done
}

// spawn starts the test binary in child mode with env added.
func spawn(t *testing.T, env ...string) *proc {
	t.Helper()
	return startProc(t, exec.Command(os.Args[0], "-test.run=^$"), env)
}

// startProc starts cmd (the test binary as a child) with env added, its
// stdout read line by line and its stderr logged; killed at cleanup.
func startProc(t *testing.T, cmd *exec.Cmd, env []string) *proc {
	t.Helper()
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = &prefixWriter{t: t}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, lines: make(chan string, 256), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// kill ends the child (SIGCONT first, in case it is stopped) and reaps it.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// expect returns the first line starting with prefix, failing the test if
// none comes within d. Other lines are logged and skipped.
func (p *proc) expect(t *testing.T, prefix string, d time.Duration) string {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("child %d exited (%v) before printing %q", p.pid(), p.waitErr(), prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
			t.Logf("child %d: %s", p.pid(), l)
		case <-timer.C:
			t.Fatalf("child %d printed no %q within %v", p.pid(), prefix, d)
		}
	}
}

func (p *proc) waitErr() error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(2 * time.Second):
		return fmt.Errorf("still running")
	}
}

// exitCode waits at most d for the child to exit.
func (p *proc) exitCode(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("child %d still running after %v", p.pid(), d)
		return -1
	}
}

// prefixWriter forwards a child's stderr to the test log.
type prefixWriter struct {
	t  *testing.T
	mu sync.Mutex
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		w.t.Log("child stderr: " + l)
	}
	return len(b), nil
}

// field reads key=value out of a child's report line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

func fieldInt(t *testing.T, line, key string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(field(line, key), 10, 64)
	require.NoError(t, err, "field %s of %q", key, line)
	return n
}

// stamp is a report line's t= field, the time the child printed it.
func stamp(t *testing.T, line string) time.Time {
	t.Helper()
	return time.Unix(0, fieldInt(t, line, "t"))
}

// rest is everything after "key=" (the error text, last on the line).
func rest(line, key string) string {
	_, v, _ := strings.Cut(line, " "+key+"=")
	return v
}

// Resource probes, read from /proc.

func countFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

func countThreads() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return -1
}

// countShmMaps counts mappings of goccl's memfd segments.
func countShmMaps() int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return -1
	}
	return strings.Count(string(b), "memfd:goccl")
}

// abstractSockets lists the abstract Unix socket names containing sub
// (every process's: /proc/net/unix is per network namespace).
func abstractSockets(sub string) []string {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return []string{"unreadable: " + err.Error()}
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 8 && strings.HasPrefix(fs[7], "@") && strings.Contains(fs[7], sub) {
			out = append(out, fs[7])
		}
	}
	return out
}

// gocclFiles lists the files of dirs whose name mentions goccl (shared
// memory, the file rendezvous's files).
func gocclFiles(dirs ...string) []string {
	var out []string
	for _, dir := range dirs {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.Contains(e.Name(), "goccl-") && !strings.HasPrefix(e.Name(), "goccl-tests-") {
				out = append(out, dir+"/"+e.Name())
			}
		}
	}
	return out
}

var _ io.Writer = (*prefixWriter)(nil)

// ownSockets counts this process's abstract goccl sockets: the entries of
// /proc/net/unix whose inode is one of our descriptors.
func ownSockets() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	mine := map[string]bool{}
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if ino, ok := strings.CutPrefix(l, "socket:["); ok && err == nil {
			mine[strings.TrimSuffix(ino, "]")] = true
		}
	}
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return -1
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 8 && strings.HasPrefix(fs[7], "@goccl-") && mine[fs[6]] {
			n++
		}
	}
	return n
}

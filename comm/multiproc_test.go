package comm

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Multi-process tests re-run this test binary as a child rank: TestMain
// sees GOCCL_TEST_CHILD and runs childMain instead of the tests.

const childVar = "GOCCL_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childVar); mode != "" {
		os.Exit(childMain(mode))
	}
	os.Exit(m.Run())
}

func childMain(mode string) int {
	atoi := func(k string) int { n, _ := strconv.Atoi(os.Getenv(k)); return n }
	ctx := context.Background()
	switch mode {
	case "foreign":
		// Pretend to be rank 1 towards rank 0's fd socket.
		fd, _ := unix.MemfdCreate("forged", unix.MFD_CLOEXEC)
		_, _ = unix.Write(fd, []byte("forged"))
		magic, _ := strconv.ParseUint(os.Getenv("GOCCL_TEST_MAGIC"), 10, 64)
		s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		to := &unix.SockaddrUnix{Name: os.Getenv("GOCCL_TEST_SOCK")}
		payload := encodeFDMsg(fdMsg{Magic: magic, Sender: 1, NFDs: 1})
		if err := unix.Sendmsg(s, payload, unix.UnixRights(fd), to, 0); err != nil {
			fmt.Println("sendmsg:", err)
			return 1
		}
		fmt.Println("SENT")
		return 0
	case "join":
		id, err := ParseUniqueID(os.Getenv("GOCCL_TEST_ID"))
		if err != nil {
			fmt.Println(err)
			return 1
		}
		action := os.Getenv("GOCCL_TEST_ACTION")
		ff := &fakeFactory{block: action == "hang"}
		c, err := InitRank(ctx, id, atoi("GOCCL_TEST_NRANKS"), atoi("GOCCL_TEST_RANK"), testOpts(ff))
		if err != nil {
			fmt.Println("INIT:", err)
			return 2
		}
		defer c.Close()
		fmt.Println("READY")
		switch action {
		case "fd", "barrier-fd":
			if action == "barrier-fd" {
				if err := c.Bootstrap().Barrier(ctx); err != nil {
					fmt.Println(err)
					return 1
				}
			}
			fd, _ := unix.MemfdCreate("genuine", unix.MFD_CLOEXEC)
			_, _ = unix.Write(fd, []byte(fmt.Sprintf("rank %d", c.Rank())))
			if err := c.Bootstrap().SendFDs(ctx, 0, []int{fd}); err != nil {
				fmt.Println(err)
				return 1
			}
			unix.Close(fd)
			if err := c.Bootstrap().Barrier(ctx); err != nil {
				fmt.Println(err)
				return 1
			}
		case "hang":
			err := c.AllReduce(ctx, 8, 8, 1, Float32, Sum, 0)
			fmt.Println("ALLREDUCE:", err)
			return 3
		}
		return 0
	}
	return 99
}

type child struct {
	cmd *exec.Cmd
	out *bufio.Scanner
}

func spawn(t *testing.T, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	pipe, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return &child{cmd: cmd, out: bufio.NewScanner(pipe)}
}

func spawnRank(t *testing.T, id UniqueID, nranks, rank int, action string) *child {
	return spawn(t, childVar+"=join", "GOCCL_TEST_ID="+id.String(), "GOCCL_TEST_NRANKS="+strconv.Itoa(nranks),
		"GOCCL_TEST_RANK="+strconv.Itoa(rank), "GOCCL_TEST_ACTION="+action)
}

// line returns the child's next output line (or "" at EOF).
func (c *child) line() string {
	if c.out.Scan() {
		return c.out.Text()
	}
	return ""
}

// wait returns the exit code, failing the test after d.
func (c *child) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("child %d still running after %v", c.cmd.Process.Pid, d)
		return -1
	}
}

func TestMultiProcessFDPassing(t *testing.T) {
	id := newID(t)
	const n = 3
	kids := []*child{spawnRank(t, id, n, 1, "fd"), spawnRank(t, id, n, 2, "fd")}
	c, err := InitRank(context.Background(), id, n, 0, testOpts(&fakeFactory{}))
	require.NoError(t, err)
	defer c.Close()
	pids := c.PIDs()
	assert.Equal(t, int32(os.Getpid()), pids[0])
	assert.Equal(t, int32(kids[0].cmd.Process.Pid), pids[1])
	assert.Equal(t, int32(kids[1].cmd.Process.Pid), pids[2])
	for r := 1; r < n; r++ {
		fds, err := c.Bootstrap().RecvFDs(context.Background(), r, 1)
		require.NoError(t, err)
		buf := make([]byte, 16)
		k, err := unix.Pread(fds[0], buf, 0)
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("rank %d", r), string(buf[:k]))
		unix.Close(fds[0])
	}
	require.NoError(t, c.Bootstrap().Barrier(context.Background()))
	for _, k := range kids {
		assert.Equal(t, "READY", k.line())
		assert.Equal(t, 0, k.wait(t, 10*time.Second))
	}
}

// A process outside the job sends rank 0 a well-formed message with an fd,
// claiming to be rank 1: dropped, its fd closed, and rank 1's genuine
// message is the one RecvFDs returns.
func TestMultiProcessForeignFDSender(t *testing.T) {
	id := newID(t)
	kid := spawnRank(t, id, 2, 1, "barrier-fd")
	c, err := InitRank(context.Background(), id, 2, 0, testOpts(&fakeFactory{}))
	require.NoError(t, err)
	defer c.Close()
	before := countFDs(t)
	foreign := spawn(t, childVar+"=foreign", "GOCCL_TEST_SOCK="+fdSocketName(id.Token(), 0, c.boot.fds.nonce), "GOCCL_TEST_MAGIC="+strconv.FormatUint(id.Magic(), 10))
	assert.Equal(t, "SENT", foreign.line())
	assert.Equal(t, 0, foreign.wait(t, 10*time.Second))
	time.Sleep(200 * time.Millisecond) // let the reader see and drop it
	assert.Equal(t, before, countFDs(t), "the foreign fd was closed")

	require.NoError(t, c.Bootstrap().Barrier(context.Background())) // lets rank 1 send
	fds, err := c.Bootstrap().RecvFDs(context.Background(), 1, 1)
	require.NoError(t, err)
	buf := make([]byte, 16)
	k, err := unix.Pread(fds[0], buf, 0)
	require.NoError(t, err)
	assert.Equal(t, "rank 1", string(buf[:k]))
	unix.Close(fds[0])
	require.NoError(t, c.Bootstrap().Barrier(context.Background()))
	assert.Equal(t, 0, kid.wait(t, 10*time.Second))
}

func TestMultiProcessNRanksMismatch(t *testing.T) {
	id := newID(t)
	kid := spawnRank(t, id, 4, 3, "none")
	_, err := InitRank(context.Background(), id, 2, 0, testOpts(&fakeFactory{}))
	require.ErrorIs(t, err, ErrMismatch)
	assert.Contains(t, err.Error(), "rank 3 says nranks=4, rank 0 has 2")
	assert.Equal(t, "INIT: goccl: rank 3: "+withoutRank(err), kid.line(), "the bad rank fails with rank 0's message")
	assert.Equal(t, 2, kid.wait(t, 10*time.Second))
}

// SIGKILL one rank while the others wait in a collective: every survivor
// returns an error naming it within 10 s.
func TestMultiProcessPeerDeath(t *testing.T) {
	id := newID(t)
	const n = 3
	kids := []*child{spawnRank(t, id, n, 1, "hang"), spawnRank(t, id, n, 2, "hang")}
	ff := &fakeFactory{block: true}
	c, err := InitRank(context.Background(), id, n, 0, testOpts(ff))
	require.NoError(t, err)
	defer c.Close()
	for _, k := range kids {
		require.Equal(t, "READY", k.line())
	}
	done := make(chan error, 1)
	go func() { done <- c.AllReduce(context.Background(), 8, 8, 1, Float32, Sum, 0) }()
	<-ff.get(0).started
	require.NoError(t, kids[1].cmd.Process.Signal(syscall.SIGKILL))
	start := time.Now()
	select {
	case err := <-done:
		requireAbortedBy(t, err, 2)
	case <-time.After(10 * time.Second):
		t.Fatal("rank 0 still blocked 10 s after rank 2 was killed")
	}
	// Rank 1 hears it from rank 0.
	line := kids[0].line()
	assert.True(t, strings.HasPrefix(line, "ALLREDUCE: "), line)
	assert.Contains(t, line, "rank 2 failed")
	assert.Equal(t, 3, kids[0].wait(t, 10*time.Second))
	t.Logf("survivors released %v after the kill", time.Since(start))
}

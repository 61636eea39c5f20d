package pairtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

const childEnv = "GOCCL_PAIRTEST_CHILD"

// IsChild reports whether this process is the re-executed rank 1.
func IsChild() bool { return os.Getenv(childEnv) == "1" }

// Child returns rank 1's bootstrap (fd 3, set up by Start).
func Child() transport.Bootstrap { return &pair{fd: 3, rank: 1} }

// Parent is rank 0's side of a running pair.
type Parent struct {
	transport.Bootstrap
	cmd *exec.Cmd
	out *os.File
}

// Start re-executes the test binary running only test (rank 1) and
// returns rank 0's side.
func Start(test string) (*Parent, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "pairtest-child")
	defer theirs.Close()
	out, err := os.CreateTemp("", "pairtest-*.log")
	if err != nil {
		unix.Close(fds[0])
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		unix.Close(fds[0])
		out.Close()
		return nil, fmt.Errorf("start rank 1: %w", err)
	}
	return &Parent{Bootstrap: &pair{fd: fds[0], rank: 0}, cmd: cmd, out: out}, nil
}

// Wait waits (at most limit) for rank 1 to exit and returns its error
// with its output.
func (p *Parent) Wait(limit time.Duration) error {
	defer os.Remove(p.out.Name())
	defer p.out.Close()
	defer unix.Close(p.Bootstrap.(*pair).fd)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		err = fmt.Errorf("rank 1 still running after %v: %w", limit, <-done)
	}
	if err != nil {
		log, _ := os.ReadFile(p.out.Name())
		return fmt.Errorf("rank 1: %w\n%s", err, log)
	}
	return nil
}

type pair struct {
	fd   int
	rank int
}

func (p *pair) Rank() int { return p.rank }
func (p *pair) Size() int { return 2 }

func (p *pair) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	// An empty packet would read as end of stream: tag every message.
	if err := unix.Sendmsg(p.fd, append([]byte{'m'}, data...), nil, nil, 0); err != nil {
		return nil, fmt.Errorf("pairtest: send: %w", err)
	}
	buf := make([]byte, 1<<16)
	n, _, _, _, err := unix.Recvmsg(p.fd, buf, nil, 0)
	if err != nil {
		return nil, fmt.Errorf("pairtest: recv: %w", err)
	}
	if n < 1 || buf[0] != 'm' {
		return nil, errors.New("pairtest: peer closed or sent out of order")
	}
	out := make([][]byte, 2)
	out[p.rank] = append([]byte(nil), data...)
	out[1-p.rank] = append([]byte(nil), buf[1:n]...)
	return out, nil
}

func (p *pair) Broadcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	all, err := p.AllGather(ctx, data)
	if err != nil {
		return nil, err
	}
	return all[root], nil
}

func (p *pair) Barrier(ctx context.Context) error {
	_, err := p.AllGather(ctx, nil)
	return err
}

func (p *pair) SendFDs(ctx context.Context, peer int, fds []int) error {
	return unix.Sendmsg(p.fd, []byte{'f'}, unix.UnixRights(fds...), nil, 0)
}

func (p *pair) RecvFDs(ctx context.Context, peer int, n int) ([]int, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*n))
	_, oobn, _, _, err := unix.Recvmsg(p.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("pairtest: recv fds: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return nil, err
		}
		fds = append(fds, got...)
	}
	if len(fds) != n {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("pairtest: got %d fds, want %d", len(fds), n)
	}
	return fds, nil
}

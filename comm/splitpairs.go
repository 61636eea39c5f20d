package comm

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/collectives"
)

// A child of Split whose ranks all live on its rank 0's node gets its star
// without a listener or a dial: its rank 0 makes one Unix socket pair per
// other rank and hands one end of each to that rank through the parent's
// fd sockets (bootstrap SendFDs), which the parent's init opened already.
// The child's rendezvous (the hello, the welcome, the pids and the fd
// sockets' nonce) then runs over those ends as over TCP. The pairs belong
// to the child alone: closing or aborting the parent, before or after the
// child, leaves the child's star as it was, and the reverse. A child that
// spans nodes dials a fresh listener of its rank 0, as init does.

// sameNode reports whether every member runs on the node of members[0].
func (c *Comm) sameNode(members []int) bool {
	rp := c.rescue
	if rp == nil || len(rp.nodes) != c.size || c.boot == nil || c.boot.fds == nil {
		return false
	}
	for _, r := range members[1:] {
		if rp.nodes[r] != rp.nodes[members[0]] || rp.nodes[r] == "error" {
			return false
		}
	}
	return true
}

// sendPairs makes a socket pair per member after the first, sends each its
// end and returns a listener that hands out this rank's ends, in member
// order, to the child's rendezvous.
func (c *Comm) sendPairs(ctx context.Context, members []int) (net.Listener, error) {
	l := newPairListener(len(members) - 1)
	for i, r := range members[1:] {
		fd, conn, err := socketPair()
		if err == nil {
			err = c.boot.SendFDs(ctx, r, []int{fd})
			_ = unix.Close(fd) // the message holds its own copy
			if err != nil {
				_ = conn.Close()
			}
		}
		if err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("handing the new communicator's connection to rank %d (its rank %d): %w", r, i+1, err)
		}
		l.conns <- conn
	}
	return l, nil
}

// takePair receives this rank's end of its pair from the child's rank 0
// (parent rank leader).
func (c *Comm) takePair(ctx context.Context, leader int) (net.Conn, error) {
	fds, err := c.boot.RecvFDs(ctx, leader, 1)
	if err != nil {
		return nil, &collectives.PeerError{Rank: leader, Cause: fmt.Errorf("the new communicator's connection: %w", err)}
	}
	conn, err := fdConn(fds[0])
	if err != nil {
		return nil, fmt.Errorf("the new communicator's connection from rank %d: %w", leader, err)
	}
	return conn, nil
}

// socketPair returns one end of a new stream pair as a descriptor (to
// send) and the other as a connection.
func socketPair() (int, net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("socketpair: %w", err)
	}
	conn, err := fdConn(fds[1])
	if err != nil {
		_ = unix.Close(fds[0])
		return -1, nil, err
	}
	return fds[0], conn, nil
}

// fdConn makes a connection of a stream socket's descriptor, which it
// takes over.
func fdConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "goccl-split-pair")
	conn, err := net.FileConn(f) // a duplicate of fd
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("socket pair connection: %w", err)
	}
	return conn, nil
}

// pairListener is a net.Listener that hands out connections made already.
type pairListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPairListener(n int) *pairListener {
	return &pairListener{conns: make(chan net.Conn, n), done: make(chan struct{})}
}

func (l *pairListener) Accept() (net.Conn, error) {
	select {
	case <-l.done:
		return nil, net.ErrClosed
	default:
	}
	select {
	case conn := <-l.conns:
		return conn, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the connections not yet accepted; the accepted ones belong
// to the rendezvous.
func (l *pairListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		for {
			select {
			case conn := <-l.conns:
				_ = conn.Close()
			default:
				return
			}
		}
	})
	return nil
}

func (l *pairListener) Addr() net.Addr { return &net.UnixAddr{Name: "socketpair", Net: "unix"} }

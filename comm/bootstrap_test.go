package comm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

func TestBootstrapCollectivesInProcess(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			comms := initGroup(t, n, testOpts(&fakeFactory{}))
			errs := eachRank(comms, func(c *Comm) error {
				b := c.Bootstrap()
				ctx := context.Background()
				for round := 0; round < 3; round++ {
					mine := bytes.Repeat([]byte{byte(c.Rank()), byte(round)}, c.Rank()+round)
					all, err := b.AllGather(ctx, mine)
					if err != nil {
						return err
					}
					for r := range all {
						if !bytes.Equal(all[r], bytes.Repeat([]byte{byte(r), byte(round)}, r+round)) {
							return fmt.Errorf("rank %d round %d: part %d = %v", c.Rank(), round, r, all[r])
						}
					}
					// Appending to one part must not clobber the next.
					all[0] = append(all[0], 0xEE)
					if n > 1 && len(all[1]) > 0 && all[1][0] != 1 {
						return fmt.Errorf("parts alias")
					}
					root := round % n
					got, err := b.Broadcast(ctx, root, []byte(fmt.Sprintf("from %d", c.Rank())))
					if err != nil {
						return err
					}
					if string(got) != fmt.Sprintf("from %d", root) {
						return fmt.Errorf("rank %d: broadcast got %q", c.Rank(), got)
					}
					if err := b.Barrier(ctx); err != nil {
						return err
					}
				}
				return nil
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			for r, c := range comms {
				assert.Equal(t, r, c.Rank())
				assert.Equal(t, n, c.Size())
				assert.Equal(t, "custom", c.BackendName())
				assert.Equal(t, 0, c.Device())
			}
		})
	}
}

func TestBootstrapFDPassingInProcess(t *testing.T) {
	const n = 3
	comms := initGroup(t, n, testOpts(&fakeFactory{}))
	before := countFDs(t)
	errs := eachRank(comms, func(c *Comm) error {
		fd, err := unix.MemfdCreate(fmt.Sprintf("rank%d", c.Rank()), unix.MFD_CLOEXEC)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if _, err := unix.Write(fd, []byte{byte(10 + c.Rank())}); err != nil {
			return err
		}
		out, err := transport.ExchangeFDs(context.Background(), c.Bootstrap(), []int{fd})
		if err != nil {
			return err
		}
		for r, fds := range out {
			if len(fds) != 1 {
				return fmt.Errorf("rank %d got %d fds from %d", c.Rank(), len(fds), r)
			}
			var b [1]byte
			if _, err := unix.Pread(fds[0], b[:], 0); err != nil {
				return err
			}
			if b[0] != byte(10+r) {
				return fmt.Errorf("rank %d: fd from %d reads %d", c.Rank(), r, b[0])
			}
			if r != c.Rank() {
				unix.Close(fds[0])
			}
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	assert.Equal(t, before, countFDs(t), "every received fd was closed")

	// A count mismatch is an error naming both ranks, and the fds are closed.
	fd, err := unix.MemfdCreate("x", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(fd)
	before = countFDs(t)
	require.NoError(t, comms[1].Bootstrap().SendFDs(context.Background(), 0, []int{fd, fd}))
	_, err = comms[0].Bootstrap().RecvFDs(context.Background(), 1, 1)
	require.ErrorIs(t, err, ErrMismatch)
	assert.Contains(t, err.Error(), "rank 1 sent 2 descriptors, rank 0 expected 1")
	assert.Equal(t, before, countFDs(t))
}

// A datagram from this process that claims to come from another rank
// (whose pid differs), or lacks the magic, is dropped and its fd closed.
func TestFDSocketRejectsForgedSender(t *testing.T) {
	s, err := bindFDSocket("forgetest"+fmt.Sprint(os.Getpid()), 0, 7, discardLogger())
	require.NoError(t, err)
	s.start(42, []int32{int32(os.Getpid()), 1}) // rank 1 "lives" in pid 1
	defer s.close()

	peer, err := bindFDSocket("forgetest"+fmt.Sprint(os.Getpid()), 1, 7, discardLogger())
	require.NoError(t, err)
	defer peer.close()
	peer.magic, peer.pids = 42, s.pids

	fd, err := unix.MemfdCreate("forged", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(fd)
	before := countFDs(t)

	// Claims rank 1: pid mismatch. Wrong magic. Rank out of range.
	for _, m := range []fdMsg{{Magic: 42, Sender: 1, NFDs: 1}, {Magic: 43, Sender: 0, NFDs: 1}, {Magic: 42, Sender: 7, NFDs: 1}, {Magic: 42, Sender: 0, NFDs: 3}} {
		_, _, err := peer.conn.WriteMsgUnix(encodeFDMsg(m), unix.UnixRights(fd), s.conn.LocalAddr().(*unixAddr))
		require.NoError(t, err)
	}
	// Garbage with an fd.
	_, _, err = peer.conn.WriteMsgUnix([]byte("garbage"), unix.UnixRights(fd, fd), s.conn.LocalAddr().(*unixAddr))
	require.NoError(t, err)
	// Then a genuine one from rank 0 (this pid).
	peer.rank = 0
	good := encodeFDMsg(fdMsg{Magic: 42, Sender: 0, NFDs: 1})
	_, _, err = peer.conn.WriteMsgUnix(good, unix.UnixRights(fd), s.conn.LocalAddr().(*unixAddr))
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	got, err := s.recv(ctx, 0, 1, nil, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	unix.Close(got[0])
	assert.Equal(t, before, countFDs(t), "forged messages' fds were closed")
	select {
	case x := <-s.queue[1]:
		t.Fatalf("forged message queued: %v", x)
	default:
	}
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

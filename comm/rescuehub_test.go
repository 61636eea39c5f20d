package comm

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// queued counts the connections waiting on rp.
func queued(rp *rescuePoint) int {
	rp.qmu.Lock()
	defer rp.qmu.Unlock()
	return len(rp.queue)
}

// A rescue connection waits on its communicator's point until a Shrink
// takes it; one whose dialer closes meanwhile is dropped at once, so that
// it holds no descriptor.
func TestRescueQueueDropsClosedDialers(t *testing.T) {
	comms := initGroup(t, 3, hostOpts())
	rp := comms[1].rescue
	h := encodeHello(hello{Magic: rp.magic, Version: protocolVersion, NRanks: 3, Rank: 0, PID: uint32(os.Getpid())})
	fds := countFDs(t)
	var live []net.Conn
	for i := 0; i < 4; i++ {
		conn, err := net.Dial("tcp", rp.addrs[1])
		require.NoError(t, err)
		_, err = conn.Write(append(h[:], appendFrame(nil, kindContrib, 0, encodeShrinkOpen(roleProbe, []int{2}))...))
		require.NoError(t, err)
		live = append(live, conn)
	}
	waitFor(t, 10*time.Second, func() bool { return queued(rp) == 4 }, "the connections to queue")
	for _, conn := range live[:3] {
		require.NoError(t, conn.Close())
	}
	waitFor(t, 10*time.Second, func() bool { return queued(rp) == 1 }, "the closed ones to be dropped")
	require.NoError(t, live[3].Close())
	waitFor(t, 10*time.Second, func() bool { return queued(rp) == 0 && countFDs(t) <= fds }, "every descriptor back")
}

// A rank that closed a child while its parent lives answers a rescue
// connection naming the child at once: it closed that communicator (the
// shared listener stays up for the parent).
func TestRescueHubAnswersForAClosedChild(t *testing.T) {
	comms := initGroup(t, 3, hostOpts())
	kids, errs := splitAll(comms, []int{0, 0, 0}, []int{0, 1, 2}, Options{})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	magic, addr := kids[1].rescue.magic, kids[1].rescue.addrs[1]
	assert.Equal(t, comms[1].rescue.addrs[1], addr, "the child's rescue address is its parent's")
	closeComms(t, kids)
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	h := encodeHello(hello{Magic: magic, Version: protocolVersion, NRanks: 3, Rank: 0, PID: uint32(os.Getpid())})
	_, err = conn.Write(append(h[:], appendFrame(nil, kindContrib, 0, encodeShrinkOpen(roleProbe, []int{2}))...))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	var hdr [frameHeaderSize]byte
	fh, payload, err := readFrame(conn, hdr[:])
	require.NoError(t, err)
	require.Equal(t, uint8(kindReject), fh.Kind)
	err = shrinkRejection(payload, 1)
	assert.Contains(t, err.Error(), "closed its communicator")
	assert.Contains(t, err.Error(), "rank 1")
	checkAllReduce(t, comms, 9)
}

package ucx

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pipeBoot is a two-rank bootstrap over a pair of pipes: enough for the
// worker address exchange with a child process.
type pipeBoot struct {
	rank int
	r    *bufio.Reader
	w    io.Writer
}

func (p *pipeBoot) Rank() int { return p.rank }
func (p *pipeBoot) Size() int { return 2 }
func (p *pipeBoot) AllGather(_ context.Context, data []byte) ([][]byte, error) {
	if _, err := p.w.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(data)))); err != nil {
		return nil, err
	}
	if _, err := p.w.Write(data); err != nil {
		return nil, err
	}
	var n [4]byte
	if _, err := io.ReadFull(p.r, n[:]); err != nil {
		return nil, err
	}
	theirs := make([]byte, binary.LittleEndian.Uint32(n[:]))
	if _, err := io.ReadFull(p.r, theirs); err != nil {
		return nil, err
	}
	out := [][]byte{data, theirs}
	if p.rank == 1 {
		out[0], out[1] = theirs, data
	}
	return out, nil
}

var errNoBoot = errors.New("not in this test's bootstrap")

func (p *pipeBoot) Broadcast(context.Context, int, []byte) ([]byte, error) { return nil, errNoBoot }
func (p *pipeBoot) Barrier(context.Context) error                          { return errNoBoot }
func (p *pipeBoot) SendFDs(context.Context, int, []int) error              { return errNoBoot }
func (p *pipeBoot) RecvFDs(context.Context, int, int) ([]int, error)       { return nil, errNoBoot }

// TestMain runs the peer process of TestDeadPeerEndsWaits when asked.
func TestMain(m *testing.M) {
	if os.Getenv("GOCCL_UCX_TEST_PEER") == "1" {
		os.Exit(peerMain())
	}
	os.Exit(m.Run())
}

// peerMain is rank 1: it connects, sends one message, and waits to be
// killed.
func peerMain() int {
	if err := Load(); err != nil {
		return 2
	}
	wk, err := New(context.Background(), &pipeBoot{rank: 1, r: bufio.NewReader(os.Stdin), w: os.Stdout}, nil)
	if err != nil {
		return 3
	}
	buf := []byte("hello")
	op, err := wk.Send(0, 1, addr(buf), len(buf))
	if err == nil {
		err = wk.Wait([]Op{op}, WaitPolicy{Timeout: time.Minute})
	}
	if err != nil {
		return 4
	}
	for {
		wk.Progress()
		time.Sleep(time.Millisecond)
	}
}

// TestDeadPeerEndsWaits: a peer process killed while this rank waits to
// receive from it fails the wait with ErrPeer naming it, long before the
// wait's own timeout.
func TestDeadPeerEndsWaits(t *testing.T) {
	needUCX(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOCCL_UCX_TEST_PEER=1")
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	wk, err := New(context.Background(), &pipeBoot{rank: 0, r: bufio.NewReader(out), w: in}, nil)
	require.NoError(t, err)
	defer wk.Close()
	hello := make([]byte, 5)
	op, err := wk.Recv(1, 1, addr(hello), len(hello))
	require.NoError(t, err)
	require.NoError(t, wk.Wait([]Op{op}, WaitPolicy{Timeout: time.Minute}))
	assert.Equal(t, "hello", string(hello))

	// A receive the peer will never send, and a send too large to be
	// buffered (it needs the peer), then the peer dies.
	buf := make([]byte, 8)
	big := make([]byte, 8<<20)
	r, err := wk.Recv(1, 2, addr(buf), len(buf))
	require.NoError(t, err)
	s, err := wk.Send(1, 3, addr(big), len(big))
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Kill())
	t0 := time.Now()
	err = wk.Wait([]Op{r, s}, WaitPolicy{Timeout: time.Minute})
	t.Logf("wait ended after %v: %v", time.Since(t0), err)
	require.ErrorIs(t, err, ErrPeer)
	var pe *PeerError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 1, pe.Rank)
	assert.Less(t, time.Since(t0), 30*time.Second, "the dead peer was found by its endpoint, not the timeout")
}

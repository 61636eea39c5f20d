package comm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// tcpBootstrap is a star through rank 0: every rank keeps one TCP
// connection to rank 0, which gathers and redistributes small messages.
// For the few ranks of one node the star costs nothing measurable and keeps
// failure detection simple: rank 0 sees every peer, every peer sees rank 0.
// The connections stay open for the communicator's life and carry
// heartbeats (health.go).
type tcpBootstrap struct {
	rank, nranks int
	magic        uint64
	pids         []int32 // every rank's pid, from the rendezvous
	log          *slog.Logger
	opTimeout    time.Duration // for ops whose context has no deadline
	hbInterval   time.Duration
	hbTimeout    time.Duration

	peers []*peer // root: index r for r >= 1; others: index 0 only
	fds   *fdSocket

	opMu sync.Mutex // one bootstrap op at a time
	seq  uint32

	failMu    sync.Mutex
	failing   bool          // a first failure is being recorded (failThen)
	failErr   error         // the first failure
	failed    chan struct{} // closed on the first failure
	onFailure func(error)

	// Clean goodbyes: closedAfter[r] is the number of calls rank r made
	// before it closed, or notClosed. calls is this rank's, told in its
	// own goodbye, and the call gate (callgate.go).
	closedMu    sync.Mutex
	closedAfter []int64
	onClosed    func(rank int)
	closedSig   chan struct{} // signalled on every goodbye (one waiter: runFailed)
	anyClosed   atomic.Bool   // some peer said goodbye
	calls       atomic.Uint64

	// This rank's own stalls (health.go): lastTick is when the heartbeat
	// goroutine last ran, stallAt/stallFor the last gap longer than
	// stallLimit, all in nanoseconds since epoch (monotonic).
	stallLimit        time.Duration // the shortest wait of a peer for this rank
	epoch             time.Time
	lastTick, stallAt atomic.Int64
	stallFor          atomic.Int64

	recs recordBox // the peers' flight records (bootrecord.go)

	closing   atomic.Bool
	closeOnce sync.Once
	done      chan struct{} // closed by Close: stops the heartbeat
	wg        sync.WaitGroup
	cleanup   []func() // run by Close (rendezvous file removal)
}

var _ transport.Bootstrap = (*tcpBootstrap)(nil)

// peer is one star connection.
type peer struct {
	rank int
	conn net.Conn
	wmu  sync.Mutex
	wbuf []byte
	data chan message  // contributions (at root) or results (elsewhere)
	gone chan struct{} // closed when the reader stops
	bye  atomic.Bool   // the peer closed cleanly
}

type message struct {
	seq     uint32
	payload []byte
}

// dataQueue bounds frames a peer may send ahead; a well-behaved peer sends
// one per op and waits.
const dataQueue = 4

func newPeer(rank int, conn net.Conn) *peer {
	return &peer{rank: rank, conn: conn, data: make(chan message, dataQueue), gone: make(chan struct{})}
}

// write sends one frame; the deadline keeps a stopped peer from blocking us.
func (p *peer) write(kind uint8, seq uint32, payload []byte, timeout time.Duration) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.wbuf = appendFrame(p.wbuf[:0], kind, seq, payload)
	_ = p.conn.SetWriteDeadline(time.Now().Add(timeout))
	_, err := p.conn.Write(p.wbuf)
	if cap(p.wbuf) > 64<<10 {
		p.wbuf = nil // do not pin a large AllGather buffer
	}
	return err
}

func (b *tcpBootstrap) Rank() int { return b.rank }
func (b *tcpBootstrap) Size() int { return b.nranks }

// PIDs returns every rank's process id.
func (b *tcpBootstrap) PIDs() []int32 { return append([]int32(nil), b.pids...) }

func (b *tcpBootstrap) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || b.opTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, b.opTimeout)
}

func (b *tcpBootstrap) usable() error {
	if b.closing.Load() {
		return fmt.Errorf("bootstrap: %w", collectives.ErrClosed)
	}
	select {
	case <-b.failed:
		return b.failure()
	default:
		return nil
	}
}

func (b *tcpBootstrap) failure() error {
	b.failMu.Lock()
	defer b.failMu.Unlock()
	return b.failErr
}

// AllGather implements transport.Bootstrap. An op that fails half way
// leaves the star out of step, so it fails the whole bootstrap.
func (b *tcpBootstrap) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	if len(data)+4*b.nranks+4 > maxFrame/b.nranks {
		return nil, fmt.Errorf("%w: bootstrap AllGather of %d bytes per rank exceeds %d bytes in all", collectives.ErrInvalidArgument, len(data), maxFrame)
	}
	b.opMu.Lock()
	defer b.opMu.Unlock()
	if err := b.usable(); err != nil {
		return nil, err
	}
	if b.nranks == 1 {
		return [][]byte{append([]byte(nil), data...)}, nil
	}
	ctx, cancel := b.opContext(ctx)
	defer cancel()
	b.seq++
	var out [][]byte
	var err error
	if b.rank == 0 {
		out, err = b.gatherRoot(ctx, data)
	} else {
		out, err = b.gatherLeaf(ctx, data)
	}
	if err != nil {
		if b.usable() == nil {
			// Rank 0 tells the leaves which rank broke the op: they wait
			// for its answer, which will not come.
			var pe *collectives.PeerError
			if b.rank == 0 && errors.As(err, &pe) && pe.Rank != 0 {
				b.peerFailed(pe.Rank, pe.Cause)
			} else {
				b.fail(err)
			}
		}
		return nil, err
	}
	return out, nil
}

func (b *tcpBootstrap) gatherRoot(ctx context.Context, data []byte) ([][]byte, error) {
	parts := make([][]byte, b.nranks)
	parts[0] = append([]byte(nil), data...)
	for r := 1; r < b.nranks; r++ {
		m, err := b.receive(ctx, b.peers[r])
		if err != nil {
			return nil, err
		}
		parts[r] = m
	}
	packed := encodePacked(parts)
	for r := 1; r < b.nranks; r++ {
		if err := b.peers[r].write(kindResult, b.seq, packed, b.hbTimeout); err != nil {
			return nil, &collectives.PeerError{Rank: r, Cause: fmt.Errorf("bootstrap send: %w", err)}
		}
	}
	return parts, nil
}

func (b *tcpBootstrap) gatherLeaf(ctx context.Context, data []byte) ([][]byte, error) {
	root := b.peers[0]
	if err := root.write(kindContrib, b.seq, data, b.hbTimeout); err != nil {
		return nil, &collectives.PeerError{Rank: 0, Cause: fmt.Errorf("bootstrap send: %w", err)}
	}
	m, err := b.receive(ctx, root)
	if err != nil {
		return nil, err
	}
	parts, err := decodePacked(m, b.nranks)
	if err != nil {
		return nil, &collectives.PeerError{Rank: 0, Cause: err}
	}
	return parts, nil
}

// receive waits for p's frame of the current op.
func (b *tcpBootstrap) receive(ctx context.Context, p *peer) ([]byte, error) {
	select {
	case m := <-p.data:
		if m.seq != b.seq {
			return nil, &collectives.PeerError{Rank: p.rank, Cause: fmt.Errorf("%w: bootstrap op %d answered for op %d", errMalformed, b.seq, m.seq)}
		}
		return m.payload, nil
	case <-b.failed:
		return nil, b.failure()
	case <-p.gone:
		// select picks at random among ready cases: a frame that arrived
		// before the peer's goodbye is still this op's answer.
		select {
		case m := <-p.data:
			if m.seq == b.seq {
				return m.payload, nil
			}
		default:
		}
		if p.bye.Load() {
			return nil, &collectives.PeerError{Rank: p.rank, Cause: b.closedCause(p.rank)}
		}
		return nil, b.waitFailure(p.rank)
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: bootstrap op on rank %d: rank %d did not answer in time", collectives.ErrTimeout, b.rank, p.rank)
		}
		return nil, ctx.Err()
	}
}

// closedCause says that rank r closed cleanly while this rank still
// needs it; rank 0 relays it as text, which remoteCause turns back into
// an ErrPeerClosed.
func (b *tcpBootstrap) closedCause(r int) error {
	if n, ok := b.closedCalls(r); ok {
		return fmt.Errorf("%w after call #%d, with calls still outstanding on other ranks (rank %d is in call #%d)",
			collectives.ErrPeerClosed, n, b.rank, b.callCount())
	}
	return fmt.Errorf("%w, with calls still outstanding on other ranks", collectives.ErrPeerClosed)
}

// waitFailure returns the failure the reader of a gone peer recorded.
func (b *tcpBootstrap) waitFailure(rank int) error {
	select {
	case <-b.failed:
		return b.failure()
	case <-time.After(time.Second):
		return &collectives.PeerError{Rank: rank, Cause: errors.New("connection lost")}
	}
}

// Broadcast implements transport.Bootstrap as an AllGather in which only
// root contributes: one round trip, same cost for small messages.
func (b *tcpBootstrap) Broadcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	if root < 0 || root >= b.nranks {
		return nil, fmt.Errorf("%w: bootstrap Broadcast root %d not in [0,%d)", collectives.ErrInvalidRoot, root, b.nranks)
	}
	if b.rank != root {
		data = nil
	}
	all, err := b.AllGather(ctx, data)
	if err != nil {
		return nil, err
	}
	return all[root], nil
}

// Barrier implements transport.Bootstrap.
func (b *tcpBootstrap) Barrier(ctx context.Context) error {
	_, err := b.AllGather(ctx, nil)
	return err
}

// SendFDs implements transport.Bootstrap over the rank's Unix socket.
func (b *tcpBootstrap) SendFDs(ctx context.Context, peer int, fds []int) error {
	if err := b.usable(); err != nil {
		return err
	}
	ctx, cancel := b.opContext(ctx)
	defer cancel()
	return b.fds.send(ctx, peer, fds)
}

// RecvFDs implements transport.Bootstrap.
func (b *tcpBootstrap) RecvFDs(ctx context.Context, peer int, n int) ([]int, error) {
	if err := b.usable(); err != nil {
		return nil, err
	}
	ctx, cancel := b.opContext(ctx)
	defer cancel()
	return b.fds.recv(ctx, peer, n, b.failed, b.failure)
}

// Close says goodbye to the peers (so that they do not take this rank for
// dead), closes every socket and waits for every goroutine.
func (b *tcpBootstrap) Close() error {
	b.closeOnce.Do(func() {
		b.closing.Store(true)
		close(b.done)
		for _, p := range b.peers {
			if p == nil {
				continue
			}
			if b.failure() == nil {
				_ = p.write(kindBye, 0, encodeClosed(b.rank, callsOnWire(int64(min(b.callCount(), 1<<62)))), 100*time.Millisecond)
			}
			_ = p.conn.Close()
		}
		if b.fds != nil {
			b.fds.close()
		}
		b.wg.Wait()
		for _, f := range b.cleanup {
			f()
		}
	})
	return nil
}

package comm

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
)

// rescueHub is the TCP listener of a rank's rescue points: the one its
// communicator opened at init, shared by the children Split and Shrink
// make of it (and theirs), so that a child opens no listener of its own.
// Every rescue connection opens with a hello carrying its communicator's
// rescue magic (a digest of that communicator's secret): the hub accepts
// at all times, reads the hello and queues the connection on the point of
// that magic, where a Shrink takes it as it took connections from its
// own listener's queue before. The hub lives while any of its points
// does, whichever closes first; a closed point's magic is remembered, and
// a dialer naming it is told at once that the rank closed that
// communicator (as a closed listener's refusal told it).
type rescueHub struct {
	ln   *net.TCPListener
	log  *slog.Logger
	done chan struct{} // the accept loop ended

	mu     sync.Mutex
	refs   int
	points map[uint64]*rescuePoint // open points, by rescue magic
	gone   map[uint64]int          // closed points' magics, to their rank
	inHand map[net.Conn]struct{}   // connections whose hello is being read
	wg     sync.WaitGroup          // routing goroutines
}

// maxGone bounds the closed points remembered (oldest dropped first
// would need an order; past the bound a dialer is simply dropped, and
// its own deadline ends its wait).
const maxGone = 4096

// rescueArrival is a connection queued on a point, its hello read.
type rescueArrival struct {
	conn  net.Conn
	hello hello
}

// newRescueHub listens on ip and starts accepting; the caller holds its
// one reference.
func newRescueHub(ip netip.Addr, log *slog.Logger) (*rescueHub, error) {
	ln, err := listenOn(ip)
	if err != nil {
		return nil, err
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		_ = ln.Close()
		return nil, fmt.Errorf("rescue listener of type %T", ln)
	}
	h := &rescueHub{ln: tl, log: log, done: make(chan struct{}), refs: 1,
		points: map[uint64]*rescuePoint{}, gone: map[uint64]int{}, inHand: map[net.Conn]struct{}{}}
	go h.acceptLoop()
	return h, nil
}

// addr is where the hub listens.
func (h *rescueHub) addr() string { return h.ln.Addr().String() }

// acquire takes a reference for a new point; false once the hub closed.
func (h *rescueHub) acquire() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refs == 0 {
		return false
	}
	h.refs++
	return true
}

// release drops a reference; the last one closes the listener and waits
// for the hub's goroutines.
func (h *rescueHub) release() {
	h.mu.Lock()
	h.refs--
	last := h.refs == 0
	h.mu.Unlock()
	if !last {
		return
	}
	_ = h.ln.Close()
	<-h.done
	h.mu.Lock()
	for conn := range h.inHand {
		_ = conn.Close() // ends its hello's read
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// register routes magic's connections to rp.
func (h *rescueHub) register(magic uint64, rp *rescuePoint) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.points[magic] != nil {
		return errors.New("rescue magic registered twice")
	}
	h.points[magic] = rp
	delete(h.gone, magic)
	return nil
}

// unregister stops routing magic to rp; later dialers naming it hear
// that rank closed the communicator.
func (h *rescueHub) unregister(magic uint64, rank int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.points, magic)
	if len(h.gone) < maxGone {
		h.gone[magic] = rank
	}
}

func (h *rescueHub) acceptLoop() {
	defer close(h.done)
	for {
		conn, err := h.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, say: the dialer retries or times out.
			h.log.Debug("goccl: rescue listener: accept failed", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		h.mu.Lock()
		h.inHand[conn] = struct{}{}
		h.mu.Unlock()
		h.wg.Add(1)
		go h.route(conn)
	}
}

// route reads conn's hello and queues it on its point, answers it for a
// closed one, or drops it (a stranger).
func (h *rescueHub) route(conn net.Conn) {
	defer h.wg.Done()
	var buf [helloSize]byte
	_ = conn.SetReadDeadline(time.Now().Add(helloTimeout))
	_, err := io.ReadFull(conn, buf[:])
	_ = conn.SetReadDeadline(time.Time{})
	var hl hello
	if err == nil {
		hl, err = decodeHello(buf[:])
	}
	if err != nil {
		h.mu.Lock()
		delete(h.inHand, conn)
		h.mu.Unlock()
		h.log.Debug("goccl: dropped a connection on the rescue listener", "remote", conn.RemoteAddr().String(), "why", err)
		_ = conn.Close()
		return
	}
	h.mu.Lock()
	rp := h.points[hl.Magic]
	rank, closed := h.gone[hl.Magic]
	delete(h.inHand, conn)
	h.mu.Unlock()
	if rp != nil {
		rank = rp.rank
	}
	switch {
	case rp != nil && rp.deliver(rescueArrival{conn: conn, hello: hl}):
	case rp != nil || closed:
		_ = writeOnce(conn, kindReject, append([]byte{rejectPeer}, encodeFailed(rank, "closed its communicator: Shrink cannot reach it there (a rank that left belongs in exclude)")...))
		_ = conn.Close()
	default:
		h.log.Debug("goccl: dropped a connection on the rescue listener", "remote", conn.RemoteAddr().String(), "why", "unknown magic")
		_ = conn.Close()
	}
}

package comm

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/goccl/goccl/collectives"
)

// The health path. After the rendezvous every star connection stays open
// and carries a heartbeat each interval both ways. A reader per connection
// notices a closed connection (the peer died: its kernel closed the
// socket) or a silent one (the peer is stopped or hung) within hbTimeout,
// and fails the bootstrap with a PeerError naming the rank. Rank 0 relays
// the failure of a leaf to every other leaf; a leaf that loses rank 0 fails
// on its own. The failure reaches the communicator through onFailure,
// which aborts the backend.

// startHealth starts the readers and the heartbeat; called once the star
// has formed.
func (b *tcpBootstrap) startHealth() {
	for _, p := range b.peers {
		if p == nil {
			continue
		}
		b.wg.Add(1)
		go b.readLoop(p)
	}
	if len(b.peers) > 0 {
		b.wg.Add(1)
		go b.heartbeat()
	}
}

func (b *tcpBootstrap) heartbeat() {
	defer b.wg.Done()
	t := time.NewTicker(b.hbInterval)
	defer t.Stop()
	for {
		select {
		case <-b.done:
			return
		case <-t.C:
		}
		for _, p := range b.peers {
			if p == nil || p.bye.Load() {
				continue
			}
			// A failed write shows up in the reader as well; nothing to do.
			_ = p.write(kindHeartbeat, 0, nil, b.hbTimeout)
		}
	}
}

func (b *tcpBootstrap) readLoop(p *peer) {
	defer b.wg.Done()
	defer close(p.gone)
	hdr := make([]byte, frameHeaderSize)
	for {
		_ = p.conn.SetReadDeadline(time.Now().Add(b.hbTimeout))
		h, payload, err := readFrame(p.conn, hdr)
		if err != nil {
			if b.closing.Load() || p.bye.Load() {
				return
			}
			b.peerFailed(p.rank, b.describe(err))
			return
		}
		switch {
		case h.Kind == kindHeartbeat:
		case h.Kind == kindBye:
			p.bye.Store(true)
			b.log.Debug("goccl: peer closed its communicator", "rank", b.rank, "peer", p.rank)
			return
		case h.Kind == kindContrib && b.rank == 0, h.Kind == kindResult && b.rank != 0:
			select {
			case p.data <- message{seq: h.Seq, payload: payload}:
			default:
				b.peerFailed(p.rank, fmt.Errorf("%w: rank %d sent bootstrap data %d ops ahead", errMalformed, p.rank, dataQueue))
				return
			}
		case h.Kind == kindFailed:
			r, msg, err := decodeFailed(payload, b.nranks)
			if err != nil {
				b.peerFailed(p.rank, err)
				return
			}
			// A leaf reports its own abort, or a peer its collective
			// timed out on (see blame); rank 0 relays either.
			b.peerFailed(r, remoteCause(msg))
		default:
			b.peerFailed(p.rank, fmt.Errorf("%w: unexpected %s frame", errMalformed, kindNames[h.Kind]))
			return
		}
	}
}

// describe turns a read error into the cause users see.
func (b *tcpBootstrap) describe(err error) error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%w: no heartbeat for %v", collectives.ErrTimeout, b.hbTimeout)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return errors.New("connection closed (process exited or aborted)")
	}
	return err
}

// peerFailed records that rank r failed; rank 0 tells every other leaf.
func (b *tcpBootstrap) peerFailed(r int, cause error) {
	pe := &collectives.PeerError{Rank: r, Cause: fmt.Errorf("%w: %w", collectives.ErrAborted, cause)}
	b.failThen(pe, func() {
		if b.rank != 0 {
			return
		}
		note := encodeFailed(r, cause.Error())
		for _, p := range b.peers {
			if p == nil || p.bye.Load() {
				continue
			}
			_ = p.write(kindFailed, 0, note, time.Second) // r too: a live rank learns it was given up on
		}
	})
}

// blame records that rank r failed as this rank observed it (a wait for
// r timed out) and tells the others: rank 0 relays to every leaf, a leaf
// tells rank 0, which relays. Every rank then names r, not the rank that
// noticed first.
func (b *tcpBootstrap) blame(r int, cause error) {
	if b.rank == 0 || r == 0 {
		b.peerFailed(r, cause)
		return
	}
	pe := &collectives.PeerError{Rank: r, Cause: fmt.Errorf("%w: %w", collectives.ErrAborted, cause)}
	b.failThen(pe, func() {
		if len(b.peers) > 0 && b.peers[0] != nil && !b.peers[0].bye.Load() {
			_ = b.peers[0].write(kindFailed, 0, encodeFailed(r, cause.Error()), time.Second)
		}
	})
}

// remoteCause rebuilds a failure notice's cause so that errors.Is still
// finds ErrTimeout in a peer's timeout: the notice carries text only.
func remoteCause(msg string) error {
	if rest, ok := strings.CutPrefix(msg, collectives.ErrTimeout.Error()); ok {
		return fmt.Errorf("%w%s", collectives.ErrTimeout, rest)
	}
	return errors.New(msg)
}

// abort is an application's Abort on this rank: the others learn of it
// (through rank 0) so that they stop waiting for us.
func (b *tcpBootstrap) abort(err error, why string) {
	b.failThen(err, func() {
		note := encodeFailed(b.rank, why)
		for _, p := range b.peers {
			if p == nil || p.bye.Load() {
				continue
			}
			_ = p.write(kindFailed, 0, note, time.Second)
		}
	})
}

// fail records the first failure and reports whether this call was first.
func (b *tcpBootstrap) fail(err error) bool { return b.failThen(err, nil) }

// failThen is fail that, when first, runs tell (which notifies peers)
// before waking anyone: a woken waiter may close the connections (an init
// that fails closes its bootstrap), and the notice must be out by then.
func (b *tcpBootstrap) failThen(err error, tell func()) bool {
	b.failMu.Lock()
	if b.failErr != nil || b.failing {
		b.failMu.Unlock()
		b.log.Debug("goccl: further failure", "rank", b.rank, "err", err)
		return false
	}
	b.failing = true
	b.failMu.Unlock()
	if tell != nil {
		tell()
	}
	b.failMu.Lock()
	b.failErr = err
	close(b.failed)
	f := b.onFailure
	b.failMu.Unlock()
	if !b.closing.Load() {
		b.log.Warn("goccl: communicator failed", "rank", b.rank, "err", err)
	}
	if f != nil {
		f(err)
	}
	return true
}

// setOnFailure installs the failure handler; if the bootstrap has failed
// already, f runs now.
func (b *tcpBootstrap) setOnFailure(f func(error)) {
	b.failMu.Lock()
	b.onFailure = f
	err := b.failErr
	b.failMu.Unlock()
	if err != nil && f != nil {
		f(err)
	}
}

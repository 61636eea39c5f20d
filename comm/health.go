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
		b.epoch = time.Now()
		b.lastTick.Store(0)
		b.wg.Add(1)
		go b.heartbeat()
	}
}

// now is the time since epoch, monotonic.
func (b *tcpBootstrap) now() int64 { return int64(time.Since(b.epoch)) }

// tick records that the heartbeat goroutine ran; a gap longer than
// stallLimit since the last run means this process itself did not run
// (stopped, or starved of CPU), long enough for its peers to give up on it.
func (b *tcpBootstrap) tick() {
	now := b.now()
	if gap := now - b.lastTick.Swap(now); gap > int64(b.stallLimit) {
		b.stallFor.Store(gap)
		b.stallAt.Store(now)
	}
}

// stalled reports whether this rank has just stalled, and for how long: a
// tick overdue by more than stallLimit, or a stall that ended less than
// stallLimit ago (whatever fails right after it is its consequence).
func (b *tcpBootstrap) stalled() (time.Duration, bool) {
	if b.epoch.IsZero() {
		return 0, false
	}
	now := b.now()
	if gap := now - b.lastTick.Load(); gap > int64(b.stallLimit) {
		return time.Duration(gap), true
	}
	if at := b.stallAt.Load(); at > 0 && now-at < int64(b.stallLimit) {
		return time.Duration(b.stallFor.Load()), true
	}
	return 0, false
}

// selfStalled fails the bootstrap naming this rank, which stalled: the
// peers that timed out on it were right, and the failure this rank sees
// on resuming (a peer's silence or exit) is their reaction, not a fault
// of theirs.
func (b *tcpBootstrap) selfStalled(d time.Duration, seen error) {
	cause := fmt.Errorf("%w: this rank stalled for %v (stopped, or starved of CPU), longer than its peers wait (%v), so they gave up on it (then: %v)",
		collectives.ErrTimeout, d.Round(time.Millisecond), b.stallLimit, seen)
	err := &collectives.PeerError{Rank: b.rank, Cause: fmt.Errorf("%w: %w", collectives.ErrAborted, cause)}
	b.abort(err, cause.Error())
}

// watchPeriod is how often the heartbeat goroutine looks at the clock, so
// that this rank measures its own stalls finer than the beat.
const watchPeriod = 100 * time.Millisecond

// minStallLimit is the shortest gap taken for a stall of this rank.
const minStallLimit = 5 * watchPeriod

func (b *tcpBootstrap) heartbeat() {
	defer b.wg.Done()
	period := min(b.hbInterval, watchPeriod)
	t := time.NewTicker(period)
	defer t.Stop()
	var sent int64
	for {
		select {
		case <-b.done:
			return
		case <-t.C:
		}
		b.tick()
		now := b.now()
		if now-sent < int64(b.hbInterval-period/2) {
			continue
		}
		sent = now
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
			if d, ok := b.stalled(); ok {
				b.selfStalled(d, b.describe(err))
				return
			}
			cause := b.describe(err)
			b.markLost(p.rank)
			if !b.peerFailed(p.rank, cause) && b.rank == 0 {
				// Not the first failure: still, the leaves learn that no
				// record of this rank will come (recordMayCome).
				b.tellLeaves(p.rank, cause)
			}
			return
		}
		switch {
		case h.Kind == kindHeartbeat:
		case h.Kind == kindBye:
			calls := int64(unknownCalls)
			if r, n, err := decodeClosed(payload, b.nranks); err == nil && r == p.rank {
				calls = callsFromWire(n)
			}
			p.bye.Store(true)
			b.log.Debug("goccl: peer closed its communicator", "rank", b.rank, "peer", p.rank, "calls", calls)
			b.peerClosed(p.rank, calls)
			return
		case h.Kind == kindClosed && b.rank != 0:
			r, n, err := decodeClosed(payload, b.nranks)
			if err == nil && (r == 0 || r == b.rank) {
				err = fmt.Errorf("%w: closed note names rank %d", errMalformed, r)
			}
			if err != nil {
				b.peerFailed(p.rank, err)
				return
			}
			b.peerClosed(r, callsFromWire(n))
		case h.Kind == kindContrib && b.rank == 0, h.Kind == kindResult && b.rank != 0:
			select {
			case p.data <- message{seq: h.Seq, payload: payload}:
			default:
				b.peerFailed(p.rank, fmt.Errorf("%w: rank %d sent bootstrap data %d ops ahead", errMalformed, p.rank, dataQueue))
				return
			}
		case h.Kind == kindRecord:
			if err := b.gotRecord(p, payload); err != nil {
				b.peerFailed(p.rank, err)
				return
			}
		case h.Kind == kindFailed:
			r, msg, err := decodeFailed(payload, b.nranks)
			if err != nil {
				b.peerFailed(p.rank, err)
				return
			}
			// A leaf reports its own abort, or a peer its collective
			// timed out on (see blame); rank 0 relays either, also to the
			// rank named. That rank, when it has just stalled, says so.
			if r == b.rank {
				if d, ok := b.stalled(); ok {
					b.selfStalled(d, remoteCause(msg))
					continue
				}
			}
			if lostCause(msg) && r != p.rank {
				b.markLost(r)
			}
			b.peerFailed(r, remoteCause(msg))
		default:
			b.peerFailed(p.rank, fmt.Errorf("%w: unexpected %s frame", errMalformed, kindNames[h.Kind]))
			return
		}
	}
}

// Values of closedAfter besides call counts.
const (
	notClosed    = -1
	unknownCalls = -2 // closed, count not said
)

// peerClosed records rank r's clean goodbye after calls calls; rank 0
// tells the other leaves, which hear goodbyes from rank 0 only. The
// handler (the communicator's) then ends the waits on r that r left
// unmet.
func (b *tcpBootstrap) peerClosed(r int, calls int64) {
	b.closedMu.Lock()
	if b.closedAfter == nil || b.closedAfter[r] != notClosed {
		b.closedMu.Unlock()
		return
	}
	b.closedAfter[r] = calls
	b.anyClosed.Store(true)
	f := b.onClosed
	b.closedMu.Unlock()
	if b.rank == 0 && !b.closing.Load() {
		note := encodeClosed(r, callsOnWire(calls))
		for _, p := range b.peers {
			if p != nil && p.rank != r && !p.bye.Load() {
				_ = p.write(kindClosed, 0, note, time.Second)
			}
		}
	}
	if f != nil {
		f(r)
	}
	select {
	case b.closedSig <- struct{}{}:
	default:
	}
}

// hasClosed reports whether rank r said goodbye.
func (b *tcpBootstrap) hasClosed(r int) bool {
	b.closedMu.Lock()
	defer b.closedMu.Unlock()
	return r >= 0 && r < len(b.closedAfter) && b.closedAfter[r] != notClosed
}

// callsOnWire and callsFromWire carry a call count, or unknownCalls as
// all ones.
func callsOnWire(calls int64) uint64 {
	if calls < 0 {
		return ^uint64(0)
	}
	return uint64(calls)
}

func callsFromWire(n uint64) int64 {
	if n > 1<<62 {
		return unknownCalls
	}
	return int64(n)
}

// closedCalls reports how many calls rank r made before it closed, and
// whether that is known.
func (b *tcpBootstrap) closedCalls(r int) (uint64, bool) {
	b.closedMu.Lock()
	defer b.closedMu.Unlock()
	if b.closedAfter == nil || r < 0 || r >= len(b.closedAfter) || b.closedAfter[r] < 0 {
		return 0, false
	}
	return uint64(b.closedAfter[r]), true
}

// setOnPeerClosed installs the goodbye handler and runs it for the ranks
// that closed already.
func (b *tcpBootstrap) setOnPeerClosed(f func(rank int)) {
	b.closedMu.Lock()
	b.onClosed = f
	var gone []int
	for r, n := range b.closedAfter {
		if n != notClosed {
			gone = append(gone, r)
		}
	}
	b.closedMu.Unlock()
	for _, r := range gone {
		f(r)
	}
}

// The causes describe gives for a connection that closed or went silent;
// a failure notice that carries one says that the rank is gone.
const (
	noHeartbeatText = "no heartbeat for"
	closedConnText  = "connection closed (process exited or aborted)"
)

// describe turns a read error into the cause users see.
func (b *tcpBootstrap) describe(err error) error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%w: %s %v", collectives.ErrTimeout, noHeartbeatText, b.hbTimeout)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return errors.New(closedConnText)
	}
	return err
}

// lostCause reports whether a failure notice's text is describe's for a
// closed or silent connection (not one that quotes it).
func lostCause(msg string) bool {
	return msg == closedConnText || strings.HasPrefix(msg, collectives.ErrTimeout.Error()+": "+noHeartbeatText+" ")
}

// peerFailed records that rank r failed; rank 0 tells every other leaf.
// It reports whether this was the bootstrap's first failure.
func (b *tcpBootstrap) peerFailed(r int, cause error) bool {
	pe := &collectives.PeerError{Rank: r, Cause: fmt.Errorf("%w: %w", collectives.ErrAborted, cause)}
	return b.failThen(pe, func() {
		if b.rank == 0 {
			b.tellLeaves(r, cause)
		}
	})
}

// tellLeaves sends every leaf (r too: a live rank learns it was given up
// on) a failure notice naming r.
func (b *tcpBootstrap) tellLeaves(r int, cause error) {
	note := encodeFailed(r, cause.Error())
	for _, p := range b.peers {
		if p == nil || p.bye.Load() {
			continue
		}
		_ = p.write(kindFailed, 0, note, time.Second)
	}
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
	for _, e := range []error{collectives.ErrTimeout, collectives.ErrPeerClosed} {
		if rest, ok := strings.CutPrefix(msg, e.Error()); ok {
			return fmt.Errorf("%w%s", e, rest)
		}
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
		// Every call from here on returns err; at WARN this line would
		// repeat it on every rank.
		b.log.Info("goccl: communicator failed", "rank", b.rank, "err", err)
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

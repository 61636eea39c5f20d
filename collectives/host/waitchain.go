package host

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goccl/goccl/collectives"
)

// The wait chain: a rank whose point-to-point wait has gone past spinning
// publishes, in its control words, the peers it waits for, since when
// (its last progress) and when it last looked. A rank that times out on
// a peer follows the chain first: when that peer itself waits, still
// looking, for a third (besides this rank, which is ready for it), and
// has done so for at least half this rank's timeout, the third is the
// one the job waits for. Eager Sends make such chains common: in a ring
// whose rank 1 stopped, rank 0's Send to 1 completes and rank 0 waits
// for rank 2, which waits for rank 1; each would otherwise name its own
// neighbour, whichever timeout fires first. Half, not the whole: rank 2
// may have received the last of a message rank 1 was still writing when
// it stopped after rank 0 began its wait, and its timeout is then still
// to come when rank 0's ends.
const (
	offWaitOn    = 896 // a bit per peer this rank waits for; 0: not waiting
	offWaitSince = 904 // unix ns: its last progress
	offWaitSeen  = 912 // unix ns: when it last looked (a stopped rank's goes stale)
)

// chainSlack is how much later than this rank's wait a peer's wait on a
// third may have begun and still count: it has then waited for the third
// at least half this rank's timeout.
func (b *backend) chainSlack() time.Duration { return b.cfg.Timeout / 2 }

// waitFresh bounds how old a peer's last look may be for its wait to
// count: a rank still waiting looks at least every maxSleep.
const waitFresh = 50 * maxSleep

func (b *backend) waitWords(q int) (on, since, seen *uint64) {
	m := b.seg.Peer(q)
	return (*uint64)(unsafe.Pointer(&m[offWaitOn])), (*uint64)(unsafe.Pointer(&m[offWaitSince])),
		(*uint64)(unsafe.Pointer(&m[offWaitSeen]))
}

// publishWait says this rank waits for the peers of st's unfinished
// operations since start, as of now (up to 64 ranks: a bit each).
func (b *backend) publishWait(st []pending, start, now time.Time) {
	if b.n > 64 {
		return
	}
	var mask uint64
	for i := range st {
		if o := &st[i]; !o.done && b.p2p.active(o) && o.op.Peer != b.rank {
			mask |= 1 << o.op.Peer
		}
	}
	on, since, seen := b.waitWords(b.rank)
	atomic.StoreUint64(since, uint64(start.UnixNano()))
	atomic.StoreUint64(seen, uint64(now.UnixNano()))
	atomic.StoreUint64(on, mask)
	b.p2p.waiting = mask != 0
}

// clearWait withdraws this rank's published wait, if any.
func (b *backend) clearWait() {
	if b.p2p.waiting {
		on, _, _ := b.waitWords(b.rank)
		atomic.StoreUint64(on, 0)
		b.p2p.waiting = false
	}
}

// blameChain follows the waits from peer, which this rank has waited for
// since start: the rank at the chain's end, and the ranks on the way.
func (b *backend) blameChain(peer int, start, now time.Time) (int, []int) {
	if b.n > 64 {
		return peer, nil
	}
	if b.waitCycle(peer, now) {
		// Sends that all wait for their Recvs, say: whichever began
		// waiting first, no rank is more to blame than the peer.
		return peer, nil
	}
	var via []int
	visited := uint64(1)<<b.rank | uint64(1)<<peer
	latest := start.Add(b.chainSlack())
	for range b.n {
		on, since, seen := b.waitWords(peer)
		mask := atomic.LoadUint64(on)
		if time.Unix(0, int64(atomic.LoadUint64(since))).After(latest) ||
			now.Sub(time.Unix(0, int64(atomic.LoadUint64(seen)))) > waitFresh {
			break
		}
		// This rank waits in its own call, ready for whatever peer
		// brings it: peer's waits on it are not what holds peer up.
		others := mask &^ visited
		if others == 0 {
			break
		}
		via = append(via, peer)
		peer = bits.TrailingZeros64(others)
		visited |= 1 << peer
	}
	return peer, via
}

// waitCycle reports whether every rank the waits lead to from peer
// (leaving this rank, which is ready, out) still looks and itself waits:
// then they wait in a cycle, none for a rank outside it, and none is
// more to blame than another. A rank not waiting or not looking any more
// (stopped, gone, or not in the call) is one the job waits for.
func (b *backend) waitCycle(peer int, now time.Time) bool {
	me := uint64(1) << b.rank
	reach := uint64(1) << peer
	for next := reach; next != 0; {
		q := bits.TrailingZeros64(next)
		next &^= 1 << q
		on, _, seen := b.waitWords(q)
		mask := atomic.LoadUint64(on)
		if mask == 0 || now.Sub(time.Unix(0, int64(atomic.LoadUint64(seen)))) > waitFresh {
			return false
		}
		mask &^= me
		next |= mask &^ reach
		reach |= mask
	}
	return true
}

// chainedStuck re-aims a timeout on peer (this rank's wait since start)
// at the end of the wait chain, keeping the original error as the cause.
func (b *backend) chainedStuck(err error, peer int, start time.Time) error {
	end, via := b.blameChain(peer, start, time.Now())
	if len(via) == 0 {
		return err
	}
	s := fmt.Sprintf("host: rank %d waits for rank %d", b.rank, peer)
	for _, r := range via[1:] {
		s += fmt.Sprintf(", which itself waits for rank %d", r)
	}
	return &collectives.PeerError{Rank: end, Cause: fmt.Errorf("%s, which itself waits for rank %d: %w", s, end, err)}
}

package gpu

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// GOCCL_CHECK on the copy-engine point-to-point path (p2pce.go): before
// anything of a group moves, every Send and Recv of the application's
// groups with another rank offers what it is (its path, its offset in its
// registration, its bytes) into the peer's area, and each side reads the
// offer of the op it pairs with and compares: ranks that would take
// different paths, or copy to another offset or count than the receiver
// expects, fail at once, both naming both, instead of one waiting for
// data the copy engines wrote elsewhere.
//
// The offers go on the group's stream before its readies; the reads on a
// stream of their own (a wait for the offer's number, a copy to pinned
// host memory), and the host waits for them before it enqueues the rest.
// So the check holds this rank's host until every peer's stream reached
// the matching ops, as GOCCL_CHECK's exchange does for the collectives.
// Offers sit in a ring of pceRing per peer and direction indexed by the
// number: a peer's next group cannot overwrite one before it is read
// (its ops complete only once we enqueued ours, after the check), but a
// group with more ops than the ring to one peer in one direction, or
// eager Sends that let a peer run that far ahead, overwrite offers not
// yet read; those ops go unverified. An offer's number is cleared before
// its other words are written and set after them, and the reader reads
// the number again after them: a read that overlapped an overwrite does
// not see its own number at the end, and is taken for unverified rather
// than compared (TestP2PCEOfferReadIsNeverTorn).

// pceOffer is an offer's four words: n; ce, bits 32-46 of the offset
// and bits 32-47 of the bytes; the offset's and the bytes' low words.
func pceOffer(x *pceOp) [4]uint32 {
	var ce uint32
	off := uint64(0)
	if x.ce {
		ce, off = 1, uint64(x.off)
	}
	return [4]uint32{x.n, ce | uint32(off>>32&0x7fff)<<1 | uint32(x.bytes>>32&0xffff)<<16, uint32(off), uint32(x.bytes)}
}

// pceOfferFields decodes an offer's path, offset and bytes.
func pceOfferFields(w [4]uint32) (ce bool, off uintptr, bytes uint64) {
	return w[1]&1 == 1, uintptr(w[1]>>1&0x7fff)<<32 | uintptr(w[2]), uint64(w[1]>>16)<<32 | uint64(w[3])
}

// pceSlot is where, in rank owner's area, the offer of peer's op number n
// lies (tx: of a Send, else of a Recv).
func pceSlot(tx bool, peer int, n uint32) uintptr {
	base := uintptr(pceRxOff)
	if tx {
		base = pceTxOff
	}
	return base + uintptr(peer*pceRing+int(n%pceRing))*pceOfferBytes
}

// pceCheck writes the group's offers, reads the peers' and compares them
// (be.mu held). A mismatch aborts the communicator: its peers fail on
// theirs.
func (be *Backend) pceCheck(ctx context.Context, main cuda.Stream) error {
	pc := &be.ce.p2p
	if len(pc.ops) == 0 {
		return nil
	}
	if err := be.pceOffers(main); err != nil {
		be.Abort(fmt.Errorf("gpu backend: GOCCL_CHECK: point-to-point offers not enqueued: %w", err))
		return be.abortErr()
	}
	if err := be.pceReadOffers(ctx); err != nil {
		if be.aborted.Load() {
			return be.abortErr()
		}
		be.Abort(fmt.Errorf("gpu backend: GOCCL_CHECK: point-to-point offers: %w", err))
		return be.abortErr()
	}
	h := unsafe.Slice((*byte)(pc.host), pc.hostOps*pceOfferBytes)
	for j := range pc.ops {
		var got [4]uint32
		for w := range got {
			got[w] = binary.LittleEndian.Uint32(h[16*j+4*w:])
		}
		if err := be.pceCompare(&pc.ops[j], got); err != nil {
			be.Abort(err)
			return be.abortErr()
		}
	}
	return nil
}

// pceWrite is one word of an offer's writes, in order.
type pceWrite struct {
	word int
	val  uint32
}

// pceOfferWrites is the order in which offer w is written over the slot's
// last: its number cleared (no reader waits for 0: numbers start at 1),
// the other words, its number (each write fences the ones before it).
func pceOfferWrites(w [4]uint32) [5]pceWrite {
	return [5]pceWrite{{0, 0}, {1, w[1]}, {2, w[2]}, {3, w[3]}, {0, w[0]}}
}

// pceOffers writes every op's offer into its peer's area.
func (be *Backend) pceOffers(s cuda.Stream) error {
	pc := &be.ce.p2p
	for j := range pc.ops {
		x := &pc.ops[j]
		at := be.pceArea(x.peer) + pceSlot(x.send, be.rank, x.n)
		for _, w := range pceOfferWrites(pceOffer(x)) {
			if err := be.drv.StreamWriteValue32(be.ctx, s, cuda.DevicePtr(at+uintptr(4*w.word)), w.val); err != nil {
				return fmt.Errorf("offer to rank %d: %w", x.peer, err)
			}
		}
	}
	return nil
}

// pceReadOffers copies, once each has arrived, the offer of the op every
// op of the group pairs with into the pinned read-back, and waits for
// them (ctx bounds the wait; Abort's rescue releases it).
func (be *Backend) pceReadOffers(ctx context.Context) error {
	pc := &be.ce.p2p
	if pc.hostOps < len(pc.ops) {
		if err := be.pceGrowHost(len(pc.ops)); err != nil {
			return err
		}
	}
	for j := range pc.ops {
		x := &pc.ops[j]
		// Our Send pairs with the peer's Recv, our Recv with its Send.
		at := be.pceArea(be.rank) + pceSlot(!x.send, x.peer, x.n)
		if err := be.drv.StreamWaitValue32(be.ctx, pc.chk, cuda.DevicePtr(at), x.n, true); err != nil {
			return fmt.Errorf("wait for rank %d's offer: %w", x.peer, err)
		}
		if err := be.drv.MemcpyDtoHAsync(be.ctx, unsafe.Add(pc.host, 16*j), cuda.DevicePtr(at), pceOfferBytes, pc.chk); err != nil {
			return fmt.Errorf("read rank %d's offer: %w", x.peer, err)
		}
		// Its number once more, over the first read's: the copy above
		// is whole only if no later offer began meanwhile.
		if err := be.drv.MemcpyDtoHAsync(be.ctx, unsafe.Add(pc.host, 16*j), cuda.DevicePtr(at), 4, pc.chk); err != nil {
			return fmt.Errorf("read rank %d's offer: %w", x.peer, err)
		}
	}
	pause := 10 * time.Microsecond
	var deadline time.Time
	if be.p2pTimeout > 0 {
		deadline = time.Now().Add(be.p2pTimeout)
	}
	for {
		done, err := be.drv.StreamQuery(be.ctx, pc.chk)
		switch {
		case err != nil:
			return fmt.Errorf("wait for the offers: %w", err)
		case be.aborted.Load():
			// Abort's rescue releases the reads with offers that verify
			// nothing: the group must not go on.
			return be.abortErr()
		case done:
			return nil
		case !deadline.IsZero() && time.Now().After(deadline):
			return be.pceOffersLate()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the peers' offers: %w", ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Millisecond)
	}
}

// pceOffersLate is the check's wait past GOCCL_TIMEOUT: a peer's stream
// has not reached the ops this group pairs with. The check holds this
// rank's host meanwhile, so a peer that put those ops in several groups,
// an earlier one waiting for this rank's, never reaches them.
func (be *Backend) pceOffersLate() error {
	var peers []int
	for j := range be.ce.p2p.ops {
		if p := be.ce.p2p.ops[j].peer; !slices.Contains(peers, p) {
			peers = append(peers, p)
		}
	}
	return fmt.Errorf("%w: waited %v for the offers of the matching Sends and Recvs of ranks %v: a peer has not reached them "+
		"(under GOCCL_CHECK a group on the copy-engine path waits on the host for its peers' matching ops: "+
		"a peer that splits them over groups whose first waits for this rank's never reaches them)",
		collectives.ErrTimeout, be.p2pTimeout, peers)
}

// pceGrowHost makes room for n offers in the pinned read-back.
func (be *Backend) pceGrowHost(n int) error {
	pc := &be.ce.p2p
	n = max(n, 2*pc.hostOps, 64)
	h, err := be.drv.MemAllocHost(be.ctx, uint64(n*pceOfferBytes))
	if err != nil {
		return fmt.Errorf("offer read-back: %w", err)
	}
	if pc.host != nil {
		if err := be.drv.MemFreeHost(be.ctx, pc.host); err != nil {
			be.log.Warn("goccl: gpu backend: free the offer read-back", "rank", be.rank, "err", err)
		}
	}
	pc.host, pc.hostOps = h, n
	return nil
}

// pceCompare checks op x against the offer got of the op it pairs with.
func (be *Backend) pceCompare(x *pceOp, got [4]uint32) error {
	if got[0] != x.n {
		// Overwritten by a later offer, before or while it was read:
		// unverified.
		return nil
	}
	theirCE, theirOff, theirBytes := pceOfferFields(got)
	if !x.ce && !theirCE {
		return nil // the kernels compare the byte counts themselves
	}
	what := func(ce bool, off uintptr, bytes uint64) string {
		if ce {
			return fmt.Sprintf("takes the copy engines at offset %#x of its registration with %d bytes", off, bytes)
		}
		return fmt.Sprintf("takes the kernels with %d bytes (its buffer in no registration, or under p2pce)", bytes)
	}
	// The fields as an offer carries them (offsets below 2^47, counts
	// below 2^48 bytes).
	_, myOff, myBytes := pceOfferFields(pceOffer(x))
	if x.ce == theirCE && myOff == theirOff && myBytes == theirBytes {
		return nil
	}
	// Both ranks say it alike: the Send first.
	sender, receiver := be.rank, x.peer
	sendSide, recvSide := what(x.ce, x.off, x.bytes), what(theirCE, theirOff, theirBytes)
	if !x.send {
		sender, receiver = x.peer, be.rank
		sendSide, recvSide = recvSide, sendSide
	}
	return &collectives.PeerError{Rank: x.peer, Cause: fmt.Errorf(
		"gpu backend: GOCCL_CHECK: rank %d's Send %d to rank %d %s, rank %d's matching Recv from rank %d %s: "+
			"on the copy-engine path (GOCCL_TUNE p2pce) a Send's buffer and its Recv's lie at the same offset of one registration, with the same count: %w",
		sender, x.n, receiver, sendSide, receiver, sender, recvSide, ErrNotSymmetric)}
}

// releaseP2PCE frees the check's read-back (release: the device is done).
func (be *Backend) releaseP2PCE() []error {
	pc := &be.ce.p2p
	if pc.host == nil {
		return nil
	}
	var errs []error
	if err := be.drv.MemFreeHost(be.ctx, pc.host); err != nil {
		errs = append(errs, fmt.Errorf("gpu backend: free the offer read-back: %w", err))
	}
	pc.host, pc.hostOps = nil, 0
	return errs
}

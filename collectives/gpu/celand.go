package gpu

import (
	"fmt"

	"github.com/goccl/goccl/internal/cuda"
)

// The landing area: a copy-engine Broadcast or AllGather may not write a
// peer's receive buffer before the peer's stream has reached the call
// (ready), and on 2x H200 that handshake costs about 6 us with the link
// idle, on every call (probe hop, docs/perf.md). So the first landBytes of
// each copy go instead into a landing area of the peer's workspace that
// belongs to this rank, at once, and only the rest waits for ready, by
// then long arrived (4 MiB take the copy engines about 11 us). The peer's
// side stream moves the landed bytes into its receive buffer once this
// rank's data flag says they are there, while the rest streams in.
//
// Every rank's workspace holds, after the LL lines, two halves of one
// landBytes slot per source. A call that copies at least 2*landBytes per
// peer uses half lands%2, lands counting such calls (the same on every
// rank, as every rank sees the same sizes). Why nothing overwrites landed
// bytes before they are moved: a source writes half h of its slot in
// owner o at call j without waiting, and wrote it last at call j-2 (j-1
// used the other half). The owner moved call j-2's bytes out on its side
// stream, joined into its user stream before call j-2 ended, so before it
// wrote ready for call j-1; and the source waited for that ready in call
// j-1 (the rest of every copy waits for ready, and a Broadcast's root waits
// for every other rank's) before it could reach call j. A Broadcast whose
// source is not the root waits for nothing from the other non-roots, but
// the root did, so the order holds through it.
//
// On the streams, for a peer p (seq the call's flag value, h its half):
//
//	push (forked):  copy my first landBytes -> my slot, half h, in p's area;
//	                write data[me] = seq into p's flags
//	user:           write ready; wait ready; copy the rest into p's receive
//	                buffer; join push; write done; wait done; join side
//	side (forked):  [the local copy]; for each p: wait data[p] >= seq, copy
//	                p's slot, half h, here -> my receive buffer
//
// A Broadcast's root does the push and the user stream's copies (its ready
// waits on every non-root), a non-root writes ready and runs the side
// stream's part for the root.

// landBytes is the size of one rank's landing area: two halves of a slot
// per peer.
func landBytes(nranks int, slot int64) uint64 {
	return 2 * uint64(max(nranks-1, 0)) * uint64(slot)
}

// landAt is where, as mapped here, src's bytes land in owner's area in
// half h: slot k of the owner's nranks-1, counted from the rank after it.
func (be *Backend) landAt(owner, src int, h uint32) uintptr {
	n := be.nranks
	k := (src - owner - 1 + n) % n
	return be.ce.land[owner] + uintptr((uint64(h)*uint64(n-1)+uint64(k))*be.ce.landBytes)
}

// ceAllGatherLanded is ceAllGather through the landing area (c.land > 0).
func (be *Backend) ceAllGatherLanded(c *ceArgs, seq uint32) error {
	ce, drv, cx := &be.ce, be.drv, be.ctx
	push := ce.red[redPush]
	slot := uintptr(be.rank) * uintptr(c.bytes)
	if err := be.landFork(c, true); err != nil {
		return err
	}
	for i := 1; i < be.nranks; i++ {
		p := (be.rank + i) % be.nranks
		if err := drv.MemcpyAsync(cx, cuda.DevicePtr(be.landAt(p, be.rank, c.half)), cuda.DevicePtr(c.src), c.land, push); err != nil {
			return fmt.Errorf("copy to rank %d's landing: %w", p, err)
		}
	}
	if err := be.ceSignal(push, ceDataOff, seq, allPeers); err != nil {
		return err
	}
	if err := be.landCollect(c, seq, allPeers, func(p int) uintptr { return c.dstOwn - slot + uintptr(p)*uintptr(c.bytes) }); err != nil {
		return err
	}
	if err := be.ceSignal(c.s, ceReadyOff, seq, allPeers); err != nil {
		return err
	}
	if err := be.ceWait(c.s, ceReadyOff, seq, allPeers); err != nil {
		return err
	}
	for i := 1; i < be.nranks; i++ {
		p := (be.rank + i) % be.nranks
		dst := c.reg.region.Peers[p] + c.off + slot + uintptr(c.land)
		if err := drv.MemcpyAsync(cx, cuda.DevicePtr(dst), cuda.DevicePtr(c.src+uintptr(c.land)), c.bytes-c.land, c.s); err != nil {
			return fmt.Errorf("copy to rank %d: %w", p, err)
		}
	}
	if err := be.landJoinPush(c); err != nil {
		return err
	}
	if err := be.ceSignal(c.s, ceDoneOff, seq, allPeers); err != nil {
		return err
	}
	if err := be.ceWait(c.s, ceDoneOff, seq, allPeers); err != nil {
		return err
	}
	return be.landJoinSide(c)
}

// ceBroadcastLanded is ceBroadcast through the landing area (c.land > 0).
func (be *Backend) ceBroadcastLanded(c *ceArgs, root int, seq uint32) error {
	ce, drv, cx := &be.ce, be.drv, be.ctx
	if be.rank != root {
		if err := be.ceSignal(c.s, ceReadyOff, seq, root); err != nil {
			return err
		}
		if err := be.landFork(c, false); err != nil {
			return err
		}
		if err := be.landCollect(c, seq, root, func(int) uintptr { return c.dstOwn }); err != nil {
			return err
		}
		if err := be.ceWait(c.s, ceDoneOff, seq, root); err != nil {
			return err
		}
		return be.landJoinSide(c)
	}
	push := ce.red[redPush]
	if err := be.landFork(c, true); err != nil {
		return err
	}
	for i := 1; i < be.nranks; i++ {
		p := (be.rank + i) % be.nranks
		if err := drv.MemcpyAsync(cx, cuda.DevicePtr(be.landAt(p, root, c.half)), cuda.DevicePtr(c.src), c.land, push); err != nil {
			return fmt.Errorf("copy to rank %d's landing: %w", p, err)
		}
	}
	if err := be.ceSignal(push, ceDataOff, seq, allPeers); err != nil {
		return err
	}
	if err := be.landLocal(c); err != nil {
		return err
	}
	if err := be.ceWait(c.s, ceReadyOff, seq, allPeers); err != nil {
		return err
	}
	for i := 1; i < be.nranks; i++ {
		p := (be.rank + i) % be.nranks
		dst := c.reg.region.Peers[p] + c.off + uintptr(c.land)
		if err := drv.MemcpyAsync(cx, cuda.DevicePtr(dst), cuda.DevicePtr(c.src+uintptr(c.land)), c.bytes-c.land, c.s); err != nil {
			return fmt.Errorf("copy to rank %d: %w", p, err)
		}
	}
	if err := be.landJoinPush(c); err != nil {
		return err
	}
	if err := be.ceSignal(c.s, ceDoneOff, seq, allPeers); err != nil {
		return err
	}
	return be.landJoinSide(c)
}

// landFork records the fork on the user's stream and makes the side
// stream (and, with push, the push stream) wait for it.
func (be *Backend) landFork(c *ceArgs, push bool) error {
	ce, drv, cx := &be.ce, be.drv, be.ctx
	if err := drv.EventRecord(cx, ce.fork, c.s); err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	streams := []cuda.Stream{ce.side, ce.red[redPush]}
	if !push {
		streams = streams[:1]
	}
	for _, st := range streams {
		if err := drv.StreamWaitEvent(cx, st, ce.fork); err != nil {
			return fmt.Errorf("fork: %w", err)
		}
	}
	return nil
}

// landLocal puts the local copy of an out-of-place call on the side
// stream (after the fork), and a root with nothing to collect ends the
// side stream there.
func (be *Backend) landLocal(c *ceArgs) error {
	if !c.local || c.bytes == 0 {
		return nil
	}
	if err := be.drv.MemcpyAsync(be.ctx, cuda.DevicePtr(c.dstOwn), cuda.DevicePtr(c.src), c.bytes, be.ce.side); err != nil {
		return fmt.Errorf("local copy: %w", err)
	}
	return nil
}

// landCollect enqueues on the side stream the local copy (out of place)
// and, for each peer p that sends (only, or every peer), the wait for
// p's data flag and the move of p's landed bytes to dst(p).
func (be *Backend) landCollect(c *ceArgs, seq uint32, only int, dst func(p int) uintptr) error {
	ce, drv, cx := &be.ce, be.drv, be.ctx
	if err := be.landLocal(c); err != nil {
		return err
	}
	for i := 1; i < be.nranks; i++ {
		p := (be.rank + i) % be.nranks
		if only != allPeers && p != only {
			continue
		}
		if err := be.ceWait(ce.side, ceDataOff, seq, p); err != nil {
			return err
		}
		if err := drv.MemcpyAsync(cx, cuda.DevicePtr(dst(p)), cuda.DevicePtr(be.landAt(be.rank, p, c.half)), c.land, ce.side); err != nil {
			return fmt.Errorf("move rank %d's landed bytes: %w", p, err)
		}
	}
	return nil
}

// landJoinPush makes the user's stream wait for the push stream's copies.
func (be *Backend) landJoinPush(c *ceArgs) error {
	ce, drv, cx := &be.ce, be.drv, be.ctx
	if err := drv.EventRecord(cx, ce.redJoin[redPush], ce.red[redPush]); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	if err := drv.StreamWaitEvent(cx, c.s, ce.redJoin[redPush]); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	return nil
}

// landJoinSide makes the user's stream wait for the side stream.
func (be *Backend) landJoinSide(c *ceArgs) error {
	ce, drv, cx := &be.ce, be.drv, be.ctx
	if err := drv.EventRecord(cx, ce.join, ce.side); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	if err := drv.StreamWaitEvent(cx, c.s, ce.join); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	return nil
}

package gpu

import (
	"fmt"

	"github.com/goccl/goccl/internal/cuda"
)

// The landing area: a copy-engine Broadcast may not write a peer's
// receive buffer before the peer's stream has reached the call (ready), and
// on 2x H200 that handshake costs about 6 us with the link idle, on every
// call (probe hop, docs/perf.md). So the first landBytes of the root's copy
// to each peer go instead into a landing slot of the peer's workspace that
// belongs to the root, at once, and only the rest waits for ready, by then
// long arrived (8 MiB take the copy engines about 21 us). The peer's side
// stream moves the landed bytes into its receive buffer once the root's
// data flag says they are there, while the rest streams in.
//
// The root's copies run back to back on the user's stream, and its flags
// go out behind them from the signal stream, which nothing joins: the
// user's stream is never held by a flag write, and the next call's first
// copy follows this call's last at once. Those flags (sigData, sigDone)
// have slots of their own that only the signal stream writes, so that a
// late write there cannot overwrite a newer value from another stream.
// On 2x H200 that took Broadcast at 128 MiB from 381-382 to 386 GB/s, with
// 8 MiB slots (2 and 4 MiB slots left the link idle, waiting for ready).
// AllGather, whose copies run both ways at once, measured slower with a
// landing area in every variant tried (128 MiB in place: 331-339 against 345-358),
// so it keeps the plain handshake.
//
// Every rank's workspace holds, after the LL lines, two halves of one
// landBytes slot per source. A Broadcast that copies at least 2*landBytes
// uses half lands%2, lands counting such calls (the same on every rank, as
// every rank sees the same sizes). Why nothing overwrites landed bytes
// before they are moved: a root writes half h of its slot in owner o at
// call j without waiting, and wrote it last at call j-2 (j-1 used the
// other half). The owner moved call j-2's bytes out on its side stream,
// joined into its user stream before call j-2 ended, so before it wrote
// ready for call j-1; and every copy-engine call waits for the ready of
// every rank it writes to (the rest of a copy waits for it) or for the done
// of a root that did, so the root of call j had seen the owner's ready for
// j-1, directly or through the root of j-1, before it could reach call j.
// Without the second half a root could land its next Broadcast before the
// owner moved the last one (the stream simulation shows it).
//
// On the streams, for each non-root p (seq the call's flag value, h its
// half):
//
//	root, user:       copy the first landBytes -> my slot, half h, in p's
//	                  area; wait ready; fork side (the local copy, out of
//	                  place); copy the rest into p's receive buffer; join
//	                  side
//	root, signal:     after the landing copies, write sigData[root] = seq
//	                  into p's flags; after the rest, sigDone[root] = seq
//	p, user:          write ready; wait sigDone; join side
//	p, side (forked): wait sigData[root] >= seq; copy the root's slot,
//	                  half h, here -> my receive buffer

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

// moveLanded enqueues, on a non-root of a landed Broadcast, the side
// stream's move of the root's landed bytes into the receive buffer once
// the root's data flag says they are there (nothing when c.land is 0).
func (be *Backend) moveLanded(c *ceArgs, root int, seq uint32) error {
	if c.land == 0 {
		return nil
	}
	ce := &be.ce
	if err := be.forkSide(c); err != nil {
		return err
	}
	if err := be.ceWait(ce.side, ceSigDataOff, seq, root); err != nil {
		return err
	}
	if err := be.drv.MemcpyAsync(be.ctx, cuda.DevicePtr(c.dstOwn), cuda.DevicePtr(be.landAt(be.rank, root, c.half)), c.land, ce.side); err != nil {
		return fmt.Errorf("move rank %d's landed bytes: %w", root, err)
	}
	return nil
}

// landAtPeers enqueues, on the root of a landed Broadcast, the copies of
// its first c.land bytes into every peer's landing slot, before any ready,
// and their data flag (nothing when c.land is 0).
func (be *Backend) landAtPeers(c *ceArgs, seq uint32) error {
	if c.land == 0 {
		return nil
	}
	for i := 1; i < be.nranks; i++ {
		p := (be.rank + i) % be.nranks
		if err := be.drv.MemcpyAsync(be.ctx, cuda.DevicePtr(be.landAt(p, be.rank, c.half)), cuda.DevicePtr(c.src), c.land, c.s); err != nil {
			return fmt.Errorf("copy to rank %d's landing: %w", p, err)
		}
	}
	return be.signalAfter(c.s, ceSigDataOff, seq)
}

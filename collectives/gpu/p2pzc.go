package gpu

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/goccl/goccl/internal/cuda"
)

// Zero-copy point-to-point (kernels/p2p.cu): a Recv of at least
// tuning.p2pZC bytes whose buffer lies in a registration offers the
// registration's number (its tag, the same on every rank) and the buffer's
// offset in it; a sender that maps that registration of the receiver in its
// zero-copy table writes the data straight into the receiver's buffer, and
// both kernels follow the sender's published choice, so a receiver with no
// registration or a sender without the mapping falls back to staging on
// both sides alike.
//
// The table is device memory, ZcEntry[zcSlots] indexed by tag % zcSlots,
// read by thread 0 of a sending block once per op. A registration takes
// its entry only while the entry is free; one whose entry a live
// registration holds, or whose number passes zcMaxTag, runs on staging.
const (
	zcSlots      = 1024
	zcEntryBytes = 8 + 8*maxRanks // tag, pad, a base per rank
	zcOffBits    = 40             // P2POp.src of a Recv: tag << 40 | offset
	zcMaxTag     = 1<<(64-zcOffBits) - 1
	zcMaxOff     = 1<<zcOffBits - 1
)

// zcTable is the backend's zero-copy table (guarded by Backend.mu).
type zcTable struct {
	dev    cuda.DevicePtr // zcSlots entries, zeroed at creation (0: none yet)
	host   unsafe.Pointer // a pinned entry to copy from
	stream cuda.Stream    // its own, so that writing it waits for no user work
	owner  [zcSlots]uint64
}

// zcPublish enters r into the table (be.mu held): each peer's copy of it as
// mapped here, then its tag, in that order on one stream, so that a kernel
// that reads the tag (with acquire) finds the bases. A failure leaves r on
// staging: zero copy is only a faster path, and the registration itself
// is already made on every rank.
func (be *Backend) zcPublish(r *registration) error {
	t := &be.zc
	if r.region == nil || r.seq > zcMaxTag || len(r.region.Peers) < be.nranks {
		return nil
	}
	slot := r.seq % zcSlots
	if t.owner[slot] != 0 {
		return nil
	}
	if t.dev == 0 {
		if err := be.zcCreate(); err != nil {
			return err
		}
	}
	e := unsafe.Slice((*byte)(t.host), zcEntryBytes)
	clear(e)
	for p := range be.nranks {
		if p != be.rank {
			binary.LittleEndian.PutUint64(e[8+8*p:], uint64(r.region.Peers[p]))
		}
	}
	at := t.dev + cuda.DevicePtr(slot*zcEntryBytes)
	if err := be.zcWrite(at+8, unsafe.Add(t.host, 8), zcEntryBytes-8); err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(e, uint32(r.seq))
	if err := be.zcWrite(at, t.host, 4); err != nil {
		return err
	}
	t.owner[slot], r.zcSlot = r.seq, true
	return nil
}

// zcRetract frees r's entry (be.mu held) once no kernel of this rank runs
// (registration.free synchronized first): its tag goes to 0.
func (be *Backend) zcRetract(r *registration) error {
	if !r.zcSlot {
		return nil
	}
	t := &be.zc
	slot := r.seq % zcSlots
	t.owner[slot], r.zcSlot = 0, false
	clear(unsafe.Slice((*byte)(t.host), 4))
	return be.zcWrite(t.dev+cuda.DevicePtr(slot*zcEntryBytes), t.host, 4)
}

func (be *Backend) zcWrite(dst cuda.DevicePtr, src unsafe.Pointer, n uint64) error {
	t := &be.zc
	if err := be.drv.MemcpyHtoDAsync(be.ctx, dst, src, n, t.stream); err != nil {
		return fmt.Errorf("gpu backend: zero-copy table: %w", err)
	}
	if err := be.drv.StreamSynchronize(be.ctx, t.stream); err != nil {
		return fmt.Errorf("gpu backend: zero-copy table: %w", err)
	}
	return nil
}

// zcCreate allocates the table, zeroed, its pinned entry and its stream.
func (be *Backend) zcCreate() error {
	t := &be.zc
	var err error
	if t.stream == 0 {
		if t.stream, err = be.drv.StreamCreate(be.ctx, true); err != nil {
			return fmt.Errorf("gpu backend: zero-copy table: %w", err)
		}
	}
	if t.host == nil {
		if t.host, err = be.drv.MemAllocHost(be.ctx, zcEntryBytes); err != nil {
			return fmt.Errorf("gpu backend: zero-copy table: %w", err)
		}
	}
	dev, err := be.drv.MemAlloc(be.ctx, zcSlots*zcEntryBytes)
	if err != nil {
		return fmt.Errorf("gpu backend: zero-copy table: %w", err)
	}
	if err := be.drv.MemsetD8Async(be.ctx, dev, 0, zcSlots*zcEntryBytes, t.stream); err != nil {
		_ = be.drv.MemFree(be.ctx, dev)
		return fmt.Errorf("gpu backend: zero-copy table: %w", err)
	}
	if err := be.drv.StreamSynchronize(be.ctx, t.stream); err != nil {
		_ = be.drv.MemFree(be.ctx, dev)
		return fmt.Errorf("gpu backend: zero-copy table: %w", err)
	}
	t.dev = dev
	return nil
}

// releaseZC frees the table (the device's work is done: release drained it).
func (be *Backend) releaseZC() []error {
	t := &be.zc
	var errs []error
	if t.dev != 0 {
		if err := be.drv.MemFree(be.ctx, t.dev); err != nil {
			errs = append(errs, fmt.Errorf("gpu backend: free zero-copy table: %w", err))
		}
		t.dev = 0
	}
	if t.host != nil {
		if err := be.drv.MemFreeHost(be.ctx, t.host); err != nil {
			errs = append(errs, fmt.Errorf("gpu backend: free zero-copy table: %w", err))
		}
		t.host = nil
	}
	if t.stream != 0 {
		if err := be.drv.StreamDestroy(be.ctx, t.stream); err != nil {
			errs = append(errs, fmt.Errorf("gpu backend: destroy zero-copy stream: %w", err))
		}
		t.stream = 0
	}
	t.owner = [zcSlots]uint64{}
	return errs
}

// zcOffer is a Recv's P2POp.src (be.mu held): its registration's tag and
// its offset in it when it may take zero copy, else 0.
func (be *Backend) zcOffer(buf uintptr, bytes int) uint64 {
	if be.tune.p2pZC == 0 || int64(bytes) < be.tune.p2pZC || len(be.regs) == 0 {
		return 0
	}
	r := be.lookup(buf, uint64(bytes))
	if r == nil || r.seq > zcMaxTag {
		return 0
	}
	off := uint64(buf - r.base)
	if off > zcMaxOff {
		return 0
	}
	return r.seq<<zcOffBits | off
}

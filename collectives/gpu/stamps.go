package gpu

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// The flight recorder's GPU timestamps: a table of Stamps
// (kernels/common.cuh) in host-pinned, device-mapped memory, one per call
// number modulo its size. Run hands a kernel its call's Stamp in
// Params.reserved[0]; the kernel stores %globaltimer at its start and its
// last block's end, then the call number, and the host reads them when a
// record is read (CallTimes), with no synchronisation on either side.
// A group's point-to-point launches time the group in the slot of its last
// numbered call (p2p.go). A copy engine has no clock to read: a
// copy-engine call enqueues goccl_stamp (kernels/stamp.cu) before and
// after its copies (stampOnStream, cestamps.go), a launch of one thread
// each. A captured graph keeps the Stamp it was captured with: each
// replay overwrites it, so the record shows the last replay (the recorder
// counts the replays it saw).

const (
	stampBytes    = 32       // sizeof(Stamp)
	stampCountOff = 30 << 10 // kStampCountOffset: the blocks-done counter in the signal area
)

// The counter sits between the call numbers (kSeqOffset) and the
// copy-engine flags (a negative array length fails the build).
var (
	_ [stampCountOff - (seqOff + 2*4*maxRanks)]struct{}
	_ [ceFlagOff - (stampCountOff + 4)]struct{}
)

// stampTable is the backend's Stamps; n == 0 when the recorder is off.
type stampTable struct {
	mu   sync.RWMutex // CallTimes against the table's free
	host unsafe.Pointer
	dev  cuda.DevicePtr
	n    uint64
	// seqs[i] is the call slot(seq) last handed Stamp i to (guarded by
	// Backend.mu), which stampOnStream stores as the Stamp's number.
	seqs []uint64
	// fn is kernels/stamp.cu's goccl_stamp, 0 when the fatbin lacks it;
	// prm its parameter buffer (StampArgs), an allocation of its own: cgo
	// refuses memory that also holds Go pointers (seqs).
	fn  cuda.Function
	prm *[stampArgsBytes]byte
}

// goccl_stamp's which (kStampStart, kStampEnd) and StampArgs.
const (
	stampStart     = 0
	stampEnd       = 1
	stampArgsBytes = 24
)

// setupStamps allocates n Stamps, zeroed (no call number is 0).
func (be *Backend) setupStamps(n int) error {
	if n <= 0 {
		return nil
	}
	t := &be.stamps
	host, err := be.drv.MemAllocHost(be.ctx, uint64(n)*stampBytes)
	if err != nil {
		return fmt.Errorf("gpu backend: timestamp table: %w", err)
	}
	clear(unsafe.Slice((*byte)(host), n*stampBytes))
	dev, err := be.drv.MemHostGetDevicePointer(be.ctx, host)
	if err != nil {
		_ = be.drv.MemFreeHost(be.ctx, host)
		return fmt.Errorf("gpu backend: timestamp table: %w", err)
	}
	t.mu.Lock()
	t.host, t.dev, t.n = host, dev, uint64(n)
	t.seqs = make([]uint64, n)
	t.mu.Unlock()
	return nil
}

// setupStampKernel looks goccl_stamp up; a fatbin built before it leaves
// stampOnStream a no-op.
func (be *Backend) setupStampKernel() {
	fn, err := be.drv.ModuleGetFunction(be.ctx, be.module, "goccl_stamp")
	if err != nil {
		be.log.Debug("goccl: gpu backend: no timestamps around copy-engine calls: the kernels lack goccl_stamp", "rank", be.rank, "err", err)
		return
	}
	be.stamps.fn = fn
	be.stamps.prm = new([stampArgsBytes]byte)
}

// stampOnStream enqueues goccl_stamp on stream for the Stamp at slot (as
// slot returned it): which stampStart claims it and stores the start,
// stampEnd stores the end and then the number of the call slot handed it
// to. For calls that run no kernel of their own (the copy engines'): one
// launch of one thread each. A no-op returning nil for slot 0 or a fatbin
// without goccl_stamp. be.mu is held.
func (be *Backend) stampOnStream(stream cuda.Stream, slot uint64, which uint32) error {
	t := &be.stamps
	if slot == 0 || t.fn == 0 || t.n == 0 {
		return nil
	}
	if slot < uint64(t.dev) || (slot-uint64(t.dev))/stampBytes >= t.n || (slot-uint64(t.dev))%stampBytes != 0 {
		return fmt.Errorf("gpu backend: timestamp slot %#x outside the table: %w", slot, collectives.ErrInvalidArgument)
	}
	binary.LittleEndian.PutUint64(t.prm[0:], slot)
	binary.LittleEndian.PutUint32(t.prm[8:], which)
	binary.LittleEndian.PutUint64(t.prm[16:], t.seqs[(slot-uint64(t.dev))/stampBytes])
	cfg := cuda.LaunchConfig{Grid: cuda.Dim3{X: 1, Y: 1, Z: 1}, Block: cuda.Dim3{X: 32, Y: 1, Z: 1}, Stream: stream}
	if err := be.drv.LaunchKernel(be.ctx, t.fn, cfg, t.prm[:]); err != nil {
		return fmt.Errorf("gpu backend: launch timestamp: %w", err)
	}
	return nil
}

// slot is the device address of call seq's Stamp; 0 (store nothing) for
// an unnumbered call or with the recorder off. be.mu is held, which the
// table's free also takes.
func (t *stampTable) slot(seq uint64) uint64 {
	if t.n == 0 || seq == 0 {
		return 0
	}
	t.seqs[seq%t.n] = seq
	return uint64(t.dev) + seq%t.n*stampBytes
}

// CallTimes reports call seq's start and end on the device, in wall-clock
// nanoseconds (%globaltimer), once its kernel has written them (for
// recorder.DeviceClock). A Stamp a later call is overwriting is refused:
// it holds another number, or an end before its start.
func (be *Backend) CallTimes(seq uint64) (start, finish int64, ok bool) {
	t := &be.stamps
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.n == 0 || seq == 0 {
		return 0, 0, false
	}
	w := (*[4]uint64)(unsafe.Add(t.host, seq%t.n*stampBytes))
	if atomic.LoadUint64(&w[2]) != seq {
		return 0, 0, false
	}
	s, f := atomic.LoadUint64(&w[0]), atomic.LoadUint64(&w[1])
	if atomic.LoadUint64(&w[2]) != seq || s == 0 || f < s || int64(s) < 0 {
		return 0, 0, false
	}
	return int64(s), int64(f), true
}

// releaseStamps frees the table (the device's work is done: release
// drained it first).
func (be *Backend) releaseStamps() error {
	t := &be.stamps
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.host == nil {
		return nil
	}
	err := be.drv.MemFreeHost(be.ctx, t.host)
	t.host, t.dev, t.n, t.seqs = nil, 0, 0, nil
	if err != nil {
		return fmt.Errorf("gpu backend: free timestamp table: %w", err)
	}
	return nil
}

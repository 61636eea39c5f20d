package gpu

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// Group fusion: consecutive AllReduces of a group that would each take the
// LL kernel, of one type and op, on one stream, run as one launch of
// kernels/fused.cu's goccl_fused_allreduce_ll_<type>_<op>, which runs the
// LL kernel's code once per call, on the blocks that call's own launch
// would have had. The wire protocol (lines, epochs, call numbers) is that
// of separate launches, so every rank decides alone: a rank whose ring
// slot is still in use, whose capture storage is full or that has fusion
// off launches the calls one by one and still meets its peers' fused
// launch.
//
// The calls' descriptors live in host-pinned memory mapped into the
// device, written by plain stores before the launch (no copy, no sync):
//   - outside graph capture, in a ring of fuseSlots slots; the kernel
//     writes the launch's ticket into the slot's done word once every
//     block has read the slot, and a slot is written again only after
//     that (else the group is not fused);
//   - while capturing, in capture storage that is never written again
//     while the communicator lives, so that a graph replays the
//     descriptors it was captured with. It is allocated outside capture
//     (at New, and after a capture filled it) since allocating during a
//     capture may invalidate it.
const (
	fuseMaxDescs  = 64 // kFuseMaxDescs
	fuseDescSize  = 32 // sizeof(FusedDesc)
	fuseDoneBack  = 16 // kFuseDoneBack: a slot's done word, before its descriptors
	fuseSlotHead  = 64
	fuseSlotBytes = fuseSlotHead + fuseMaxDescs*fuseDescSize
	fuseSlots     = 64
	fuseRingBytes = fuseSlots * fuseSlotBytes
	// fuseArenaBytes is one block of capture storage (2048 descriptors).
	fuseArenaBytes = 64 << 10
	// fuseCountOff (kFuseCountOffset): the fused launch's count of blocks
	// that have read the descriptors, in the signal area.
	fuseCountOff = 64 << 10
	// Params.reserved[2] and [3] (kernels/common.cuh): the descriptors'
	// device address; their count | ticket<<32.
	offFuseDescs = 200
	offFuseCount = 208

	// EnvGroupFuse turns group fusion off with 0.
	EnvGroupFuse = "GOCCL_GROUP_FUSE"
	// levelTrace is GOCCL_DEBUG=TRACE's level (comm.LevelTrace).
	levelTrace = slog.LevelDebug - 4
)

// The counter lies between the error claim and the LL epochs.
var (
	_ [fuseCountOff - (errClaimOff + 4)]struct{}
	_ [llEpochOff - (fuseCountOff + 4)]struct{}
)

// fuseState is the backend's fusion state (guarded by Backend.mu).
type fuseState struct {
	on  bool // GOCCL_GROUP_FUSE is not 0, the kernels and the memory are there
	fns [numTypes][numOps]cuda.Function

	ring    unsafe.Pointer // fuseSlots slots, host-pinned
	ringDev cuda.DevicePtr
	tickets [fuseSlots]uint32 // each slot's last ticket (0: never used)
	next    int               // the next slot
	ticket  uint32            // the last ticket given

	// Capture storage: blocks in use (every one kept until Close), the
	// bytes taken in the last, and whether a capture ran out of room.
	arenas    []fuseArena
	arenaUsed int
	grow      bool

	// Counters (tests and the log): launches of the last group; fused
	// launches and the calls in them so far.
	groupLaunches int
	fused, calls  int64
	told          atomic.Bool // the first fused group was logged at INFO
}

type fuseArena struct {
	host unsafe.Pointer
	dev  cuda.DevicePtr
}

// parseGroupFuse reads GOCCL_GROUP_FUSE: unset or 1 fuses, 0 does not.
func parseGroupFuse(v string) (bool, error) {
	switch v {
	case "", "1":
		return true, nil
	case "0":
		return false, nil
	}
	return false, fmt.Errorf("gpu backend: %s=%q: want 0 or 1: %w", EnvGroupFuse, v, collectives.ErrInvalidArgument)
}

// setupFuse loads the fused kernels and allocates the ring and the first
// capture block. A fatbin without the kernels, or memory that cannot be
// had, leaves fusion off: every group then runs as separate launches.
func (be *Backend) setupFuse(spec string) error {
	on, err := parseGroupFuse(spec)
	if err != nil || !on {
		return err
	}
	st := &be.fuse
	for dt := range numTypes {
		for op := range numOps {
			if collectives.Op(op) == collectives.PreMulSum {
				continue // never fused (fusable), so never built
			}
			name := "goccl_fused_allreduce_ll_" + typeNames[dt] + "_" + opNames[op]
			fn, err := be.drv.ModuleGetFunction(be.ctx, be.module, name)
			if err != nil {
				be.log.Debug("goccl: gpu backend: group fusion off: the kernels lack "+name, "rank", be.rank, "err", err)
				return nil
			}
			st.fns[dt][op] = fn
		}
	}
	if st.ring, st.ringDev, err = be.pinned(fuseRingBytes); err != nil {
		be.log.Warn("goccl: gpu backend: group fusion off: descriptor ring", "rank", be.rank, "err", err)
		return nil
	}
	clear(unsafe.Slice((*byte)(st.ring), fuseRingBytes))
	if !be.growArena() {
		return nil
	}
	st.on = true
	return nil
}

// pinned allocates host-pinned memory mapped into the device.
func (be *Backend) pinned(n uint64) (unsafe.Pointer, cuda.DevicePtr, error) {
	h, err := be.drv.MemAllocHost(be.ctx, n)
	if err != nil {
		return nil, 0, err
	}
	d, err := be.drv.MemHostGetDevicePointer(be.ctx, h)
	if err != nil {
		_ = be.drv.MemFreeHost(be.ctx, h)
		return nil, 0, err
	}
	return h, d, nil
}

// growArena adds a block of capture storage (never while capturing).
func (be *Backend) growArena() bool {
	st := &be.fuse
	h, d, err := be.pinned(fuseArenaBytes)
	if err != nil {
		be.log.Warn("goccl: gpu backend: group fusion: capture storage", "rank", be.rank, "err", err)
		return false
	}
	st.arenas = append(st.arenas, fuseArena{host: h, dev: d})
	st.arenaUsed = 0
	st.grow = false
	return true
}

// releaseFuse frees the ring and the capture storage (after the drain).
func (be *Backend) releaseFuse() []error {
	st := &be.fuse
	var errs []error
	free := func(p unsafe.Pointer) {
		if err := be.drv.MemFreeHost(be.ctx, p); err != nil {
			errs = append(errs, fmt.Errorf("gpu backend: free group descriptors: %w", err))
		}
	}
	if st.ring != nil {
		free(st.ring)
		st.ring = nil
	}
	for _, a := range st.arenas {
		free(a.host)
	}
	st.arenas = nil
	st.on = false
	return errs
}

// fusable reports whether a (a validated collective) would take the LL
// kernel in Run, with its size in bytes: the same choice on every rank.
// Only the five plain ops fuse (a scaled sum carries its own scalar).
func (be *Backend) fusable(a *collectives.Args) (int64, bool) {
	if a.Coll != collectives.AllReduce || !a.Type.Valid() {
		return 0, false
	}
	switch a.Op {
	case collectives.Sum, collectives.Prod, collectives.Min, collectives.Max, collectives.Avg:
	default:
		return 0, false
	}
	bytes := int64(a.Count) * int64(a.Type.Size())
	if bytes == 0 {
		return 0, true
	}
	if bytes > llMaxBytes || be.tune.th.Choose(a.Coll, bytes, be.nranks, be.forced, be.ce.ok) != collectives.LL {
		return 0, false
	}
	return bytes, be.pickNVLS(a, bytes) == 0
}

// batch returns how many collectives from colls[0] one fused launch takes
// (1 or 0: none; run colls[0] as usual): consecutive fusable AllReduces of
// colls[0]'s type, op and stream, at most fuseMaxDescs that launch, of at
// most llMaxBytes together. Zero-count calls join a batch and launch
// nothing, as in Run.
func (be *Backend) batch(colls []collectives.Args) int {
	if !be.fuse.on || be.fuse.fns[colls[0].Type][colls[0].Op] == 0 {
		return 0
	}
	first := &colls[0]
	var total int64
	descs, n := 0, 0
	for n < len(colls) {
		a := &colls[n]
		if a.Type != first.Type || a.Op != first.Op || a.Stream != first.Stream {
			break
		}
		bytes, ok := be.fusable(a)
		if !ok {
			break
		}
		if bytes > 0 {
			if descs == fuseMaxDescs || total+bytes > llMaxBytes {
				break
			}
			descs++
			total += bytes
		}
		n++
	}
	if descs < 2 {
		return 0
	}
	return n
}

// runFused launches colls (a batch) as one fused launch; taken is false
// when this rank launches them one by one instead (its ring slot or capture
// storage is not free).
func (be *Backend) runFused(colls []collectives.Args) (taken bool, err error) {
	if be.aborted.Load() {
		return true, be.abortErr()
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if be.closed {
		return true, collectives.ErrClosed
	}
	st := &be.fuse
	first := &colls[0]
	stream := cuda.Stream(first.Stream)
	capturing, err := be.drv.StreamIsCapturing(be.ctx, stream)
	if err != nil {
		return false, nil // the launches one by one work either way
	}
	var (
		descs  []byte
		dev    cuda.DevicePtr
		slot   int
		ticket uint32
	)
	n := 0
	for i := range colls {
		if colls[i].Count > 0 {
			n++
		}
	}
	if capturing {
		a := &st.arenas[len(st.arenas)-1]
		if st.arenaUsed+n*fuseDescSize > fuseArenaBytes {
			st.grow = true
			return false, nil
		}
		descs = unsafe.Slice((*byte)(unsafe.Add(a.host, st.arenaUsed)), n*fuseDescSize)
		dev = a.dev + cuda.DevicePtr(st.arenaUsed)
		st.arenaUsed += n * fuseDescSize
	} else {
		if st.grow && !be.growArena() {
			st.grow = false // try again after the next capture runs out
		}
		slot = st.next
		base := unsafe.Add(st.ring, slot*fuseSlotBytes)
		done := (*uint32)(unsafe.Add(base, fuseSlotHead-fuseDoneBack))
		if t := st.tickets[slot]; t != 0 && atomic.LoadUint32(done) != t {
			return false, nil // the slot's launch has not read it yet
		}
		st.ticket++
		if st.ticket == 0 {
			st.ticket = 1
		}
		ticket = st.ticket
		st.tickets[slot] = ticket
		st.next = (slot + 1) % fuseSlots
		descs = unsafe.Slice((*byte)(unsafe.Add(base, fuseSlotHead)), n*fuseDescSize)
		dev = st.ringDev + cuda.DevicePtr(slot*fuseSlotBytes+fuseSlotHead)
	}
	size := int64(first.Type.Size())
	grid, k := 1, 0
	for i := range colls {
		a := &colls[i]
		if a.Count == 0 {
			continue
		}
		blocks := be.tune.shape(famAllReduceLL, int64(a.Count)*size)
		grid = max(grid, blocks)
		d := descs[k*fuseDescSize:]
		binary.LittleEndian.PutUint64(d[0:], uint64(a.Send))
		binary.LittleEndian.PutUint64(d[8:], uint64(a.Recv))
		binary.LittleEndian.PutUint64(d[16:], a.Seq)
		binary.LittleEndian.PutUint32(d[24:], uint32(a.Count))
		binary.LittleEndian.PutUint32(d[28:], uint32(blocks))
		k++
	}
	// The other fields are the communicator's; each call's come from its
	// descriptor.
	be.prm.u64(offFuseDescs, uint64(dev))
	be.prm.u64(offFuseCount, uint64(n)|uint64(ticket)<<32)
	// The launch's timestamps go to its last call's slot, under its number
	// (the kernel takes each call's number from its descriptor).
	lastSeq := colls[len(colls)-1].Seq
	be.prm.u64(offSeq, lastSeq)
	be.prm.u64(offStamp, be.stamps.slot(lastSeq))
	be.last = collectives.Path{Algo: collectives.LL, Transport: be.transport}
	cfg := cuda.LaunchConfig{
		Grid:         cuda.Dim3{X: uint32(grid), Y: 1, Z: 1},
		Block:        cuda.Dim3{X: uint32(be.tune.threads), Y: 1, Z: 1},
		Stream:       stream,
		Programmatic: be.pdl,
	}
	err = be.drv.LaunchKernel(be.ctx, st.fns[first.Type][first.Op], cfg, be.prm[:])
	be.prm.u64(offFuseDescs, 0)
	be.prm.u64(offFuseCount, 0)
	be.prm.u64(offStamp, 0)
	if err != nil {
		// The peers' kernels may already wait for this rank's lines.
		be.Abort(fmt.Errorf("gpu backend: launch fused AllReduces: %w", err))
		return true, be.abortErr()
	}
	st.fused++
	st.calls += int64(n)
	return true, nil
}

// runColls enqueues a group's collectives in order, fusing what batch
// allows, and counts the launches.
func (be *Backend) runColls(ctx context.Context, colls []collectives.Args) error {
	launches, fused := 0, 0
	for i := 0; i < len(colls); {
		if n := be.batch(colls[i:]); n > 0 {
			taken, err := be.runFused(colls[i : i+n])
			if err != nil {
				return err
			}
			if taken {
				launches++
				fused++
				i += n
				continue
			}
			// One by one: the same lines and epochs as the fused launch.
			for j := i; j < i+n; j++ {
				if err := be.Run(ctx, &colls[j]); err != nil {
					return err
				}
				if colls[j].Count > 0 {
					launches++
				}
			}
			i += n
			continue
		}
		if err := be.Run(ctx, &colls[i]); err != nil {
			return err
		}
		if colls[i].Count > 0 {
			launches++
		}
		i++
	}
	be.fuse.groupLaunches = launches
	if fused > 0 && !be.fuse.told.Swap(true) {
		be.log.Info("goccl: gpu backend: group fusion: a group's collectives fused", "rank", be.rank,
			"collectives", len(colls), "launches", launches)
	}
	if be.log.Enabled(ctx, levelTrace) {
		be.log.Log(ctx, levelTrace, "goccl: gpu backend: group", "rank", be.rank, "collectives", len(colls), "launches", launches)
	}
	return nil
}

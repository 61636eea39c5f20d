package gpu

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// The copy-engine path: Broadcast and AllGather into registered receive
// buffers as cuMemcpyAsync straight into the peers' buffers (zero copy, no
// kernel, the copy engines' 397 GB/s rather than SM stores' 370), ordered
// across GPUs by stream memory operations on 32-bit flags.
//
// Contract (as NCCL's symmetric registration): every rank registers its
// corresponding buffer with the same size (checked at Register/Alloc), and
// a call's receive buffer lies at the same offset of that registration on
// every rank (not checked per call: nothing is exchanged per call). Then
// every rank finds the buffer registered, and all ranks choose alike.
//
// Flags live in the workspace's signal area, past the kernels' slots and
// epochs: ready[r] and done[r], written by rank r into every peer's area.
// With seq the communicator's count of copy-engine calls (host-side, the
// same on every rank), an AllGather is on every rank's stream:
//
//	write ready[me]=seq to every peer; wait ready[p] >= seq for every peer
//	copy send -> peer p's recv + me*bytes, for every peer (rotated order)
//	write done[me]=seq to every peer;  wait done[p] >= seq for every peer
//
// ready says the peer's stream reached this call, so its earlier work on
// the receive buffer is over; done says the peer's copies into us landed
// (cuStreamWriteValue32 fences the stream's earlier writes first). The
// local slot (out of place) is copied on a side stream, forked and joined
// through events, so that it overlaps the peer copies. Broadcast needs only
// non-roots' ready to the root and the root's done to the non-roots, which
// the root raises from its signal stream (in a slot of its own, sigDone)
// so that the flag write does not hold its user's stream; from 2*celand
// bytes it sends the first celand bytes without waiting for ready, into a
// landing slot of the peer's workspace (celand.go).
// The waits are cyclic (CU_STREAM_WAIT_VALUE_GEQ compares (int32)(a-b)), so
// seq may wrap.
//
// Limits: a host counter would be frozen into a CUDA graph, so a stream
// being captured takes the kernels (every rank must capture alike). A
// cuStreamWaitValue32 does not poll the abort flag: Abort stops new
// copy-engine calls and, best effort, releases this rank's pending waits by
// overwriting its own flags far past seq on a stream of its own; a peer
// that keeps writing older values can still hold a wait.
//
// The copy-engine reductions (cereduce.go) add their flags to the same
// area, with the layout of kernels/common.cuh (kCEFlagOffset).
const (
	ceFlagOff    = 32 << 10 // the flag area in the signal area; kernels use < 5 KiB
	ceReadyOff   = 0        // in the flag area: ready[maxRanks] u32
	ceDoneOff    = 128      // done[maxRanks] u32, on a line of its own
	ceDataOff    = 256      // data[maxRanks] u32 (cereduce.go)
	ceLandedOff  = 384      // landed u32
	ceReducedOff = 512      // reduced[ceSlots] u32
	ceSigDataOff = 768      // sigData[maxRanks] u32: a landed Broadcast's data, from the signal stream only
	ceSigDoneOff = 896      // sigDone[maxRanks] u32: its done, from the signal stream only
	ceFreeOff    = 1024     // free[maxRanks][ceSlots] u32
	ceSlots      = 64       // kCESlots
	ceFlagBytes  = 4096     // the flag area, which Abort overwrites (but landed)
	ceCountBytes = 4 * ceSlots
	ceRescue     = 1 << 30 // Abort writes issued+ceRescue
	allPeers     = -1      // ceSignal/ceWait: every peer
)

// The flags sit past the kernels' slots and epochs and inside the signal
// area, and the areas inside the flag area do not overlap (a negative
// array length fails the build).
var (
	_ [ceFlagOff - epochOff - 4*maxBlocks]struct{}
	_ [signalSize - ceFlagOff - ceFlagBytes - ceCountBytes]struct{}
	_ [ceDataOff - ceDoneOff - 4*maxRanks]struct{}
	_ [ceLandedOff - ceDataOff - 4*maxRanks]struct{}
	_ [ceReducedOff - ceLandedOff - 4]struct{}
	_ [ceSigDataOff - ceReducedOff - 4*ceSlots]struct{}
	_ [ceSigDoneOff - ceSigDataOff - 4*maxRanks]struct{}
	_ [ceFreeOff - ceSigDoneOff - 4*maxRanks]struct{}
	_ [ceFlagBytes - ceFreeOff - 4*maxRanks*ceSlots]struct{}
)

// copyEngine is the backend's copy-engine state.
type copyEngine struct {
	ok    bool // every rank can run stream memory ops (agreed at New)
	local uintptr
	peers [maxRanks]uintptr // every rank's flag area, as mapped here
	// staging is every rank's staging as mapped here, of which a reduction
	// uses the first stageBytes (the kernels' slots; not the LL lines,
	// whose stale flags must stay the LL kernel's own).
	staging    [maxRanks]uintptr
	stageBytes uint64
	// land is every rank's landing area as mapped here, of landBytes per
	// source and half (celand.go); lands counts the Broadcasts that used
	// it, the same on every rank (guarded by Backend.mu).
	land      [maxRanks]uintptr
	landBytes uint64
	lands     uint32
	halves    uint32 // 2 (tests take 1, to show why)

	seq uint32 // calls issued; guarded by Backend.mu
	// refreshed is the seq of the last staging call that refreshed the
	// staging mode's flags (ceRefresh); guarded by Backend.mu.
	refreshed uint32
	issued    atomic.Uint32      // seq, for Abort
	cuts      [maxRanks][]uint64 // cePlan.cuts' buffers; guarded by Backend.mu

	mu     sync.Mutex  // the handles below against Abort and release
	side   cuda.Stream // the local copy of Broadcast and AllGather
	rescue cuda.Stream
	fork   cuda.Event
	join   cuda.Event // side done
	// A reduction's streams (cereduce.go), forked from and joined into
	// the user's stream through fork and redJoin; in direct mode pushed
	// orders a chunk's data flag after its copy, and reduced a chunk's
	// spread after its kernel. A Broadcast root's flags go out on the
	// signal stream too, behind its copies through pushed (signalAfter),
	// and nothing joins them.
	red     [numRedStreams]cuda.Stream
	redJoin [numRedStreams]cuda.Event
	pushed  cuda.Event
	reduced cuda.Event

	p2p pceState // copy-engine point-to-point (p2pce.go)
}

// The copy-engine reductions' streams, by role.
const (
	redPush   = iota // this rank's parts of the pieces to their owners
	redLand          // waits for the peers' chunks, then the landed flag
	redSpread        // AllReduce: the reduced piece to the peers
	redSignal        // direct mode: the data flags, each behind its copy; a Broadcast root's flags
	numRedStreams
)

// setupCE creates the copy-engine streams and events, probes stream memory
// operations on this rank (a write into every peer's flag area, a wait on
// our own) and agrees with the peers: the path is on only where every rank
// passed, so that every rank makes the same choice per call. Failing the
// probe is not an error: the kernels serve every call.
func (be *Backend) setupCE(ctx context.Context, local uintptr, peers []uintptr, stageBytes, landOff, land uint64) error {
	ce := &be.ce
	ce.local = local + ceFlagOff
	for r, p := range peers {
		ce.peers[r] = p + ceFlagOff
		ce.staging[r] = p + signalSize
		ce.land[r] = p + uintptr(landOff)
	}
	ce.stageBytes = stageBytes
	ce.landBytes, ce.halves = land, 2
	ce.p2p.on = be.tune.p2pCE > 0
	probe := be.probeCE()
	ok := byte(1)
	if probe != nil {
		ok = 0
	}
	all, err := be.boot.AllGather(ctx, []byte{ok})
	if err != nil {
		return fmt.Errorf("gpu backend: agree on copy engines: %w", err)
	}
	ce.ok = true
	for r, m := range all {
		if len(m) != 1 || m[0] != 1 {
			ce.ok = false
			be.log.Warn("goccl: gpu backend: copy-engine path off (stream memory operations unavailable)", "rank", be.rank, "on_rank", r, "err", probe)
			break
		}
	}
	return nil
}

func (be *Backend) probeCE() error {
	ce := &be.ce
	drv, cx := be.drv, be.ctx
	// Only the 64-bit operations have an attribute; the 32-bit ones (the v2
	// entry points) are always there since CUDA 12, so the probe decides.
	if v, err := drv.DeviceAttribute(be.dev, cuda.AttrCanUse64BitStreamMemOps); err == nil {
		be.log.Debug("goccl: gpu backend: stream memory ops", "rank", be.rank, "64bit", v)
	}
	ce.mu.Lock()
	defer ce.mu.Unlock()
	var err error
	for _, s := range ce.streams() {
		if *s, err = drv.StreamCreate(cx, true); err != nil {
			return err
		}
	}
	for _, e := range ce.events() {
		if *e, err = drv.EventCreate(cx, false); err != nil {
			return err
		}
	}
	// The slots written hold 0 already (or are being cleared to 0 by
	// their owner): writing 0 changes nothing.
	for r := range be.nranks {
		if r != be.rank {
			if err = drv.StreamWriteValue32(cx, ce.side, cuda.DevicePtr(ce.peers[r]+ceReadyOff+4*uintptr(be.rank)), 0); err != nil {
				return err
			}
		}
	}
	if err = drv.StreamWaitValue32(cx, ce.side, cuda.DevicePtr(ce.local+ceReadyOff+4*uintptr(be.rank)), 0, true); err != nil {
		return err
	}
	return drv.StreamSynchronize(cx, ce.side)
}

// ceArgs is where one copy-engine call reads and writes.
type ceArgs struct {
	s      cuda.Stream
	reg    *registration
	off    uintptr // recv's offset in reg, the same on every rank
	bytes  uint64  // each rank's input
	local  bool    // copy send -> own recv slot (out of place)
	src    uintptr // own input
	dstOwn uintptr // own recv slot
	land   uint64  // Broadcast: bytes of each copy through the landing area (celand.go); 0: none
	half   uint32  // the landing area's half this call uses
}

// runCE enqueues one copy-engine call (be.mu held): Broadcast, AllGather,
// or with a plan a reduction (cereduce.go). Any failure once the peers may
// be waiting for us aborts the communicator, so that the peers' waits are
// released too.
func (be *Backend) runCE(a *collectives.Args, reg *registration, bytes uint64, pl *cePlan) error {
	ce := &be.ce
	// A call takes one flag value, a reduction one per chunk.
	seq := ce.seq + 1
	if pl != nil {
		ce.seq += pl.chunks
	} else {
		ce.seq++
	}
	ce.issued.Store(ce.seq)
	// Abort stores aborted and then reads issued; we store issued and then
	// read aborted: either Abort's rescue covers this seq or we stop here.
	if be.aborted.Load() {
		return be.abortErr()
	}
	var err error
	c := ceArgs{s: cuda.Stream(a.Stream), reg: reg, bytes: bytes, src: a.Send, dstOwn: a.Recv}
	if reg != nil {
		c.off = a.Recv - reg.base
	}
	if a.Coll == collectives.Broadcast && ce.landBytes > 0 && bytes >= 2*ce.landBytes && be.nranks > 1 {
		c.land, c.half = ce.landBytes, ce.lands%ce.halves
		ce.lands++
	}
	be.ceStamp(c.s, a.Seq, ceStampStart) // cestamps.go
	switch {
	case pl != nil:
		err = be.ceReduce(a, reg, pl, seq)
	case a.Coll == collectives.AllGather:
		c.dstOwn = a.Recv + uintptr(be.rank)*uintptr(bytes)
		c.local = a.Send != c.dstOwn
		err = be.ceAllGather(&c, seq)
	default:
		c.local = be.rank == a.Root && a.Send != a.Recv
		err = be.ceBroadcast(&c, a.Root, seq)
	}
	if err != nil {
		be.Abort(fmt.Errorf("gpu backend: copy-engine %s (call %d) not enqueued: %w", a.Coll, seq, err))
		return be.abortErr()
	}
	be.ceStamp(c.s, a.Seq, ceStampEnd)
	return nil
}

func (be *Backend) ceAllGather(c *ceArgs, seq uint32) error {
	if err := be.ceSignal(c.s, ceReadyOff, seq, allPeers); err != nil {
		return err
	}
	if err := be.ceWait(c.s, ceReadyOff, seq, allPeers); err != nil {
		return err
	}
	if err := be.ceFork(c); err != nil {
		return err
	}
	if err := be.copyToPeers(c, uintptr(be.rank)*uintptr(c.bytes), 0); err != nil {
		return err
	}
	if err := be.ceSignal(c.s, ceDoneOff, seq, allPeers); err != nil {
		return err
	}
	if err := be.ceWait(c.s, ceDoneOff, seq, allPeers); err != nil {
		return err
	}
	return be.ceJoin(c)
}

// ceBroadcast runs a copy-engine Broadcast, its first c.land bytes through
// the landing area when c.land > 0 (celand.go).
func (be *Backend) ceBroadcast(c *ceArgs, root int, seq uint32) error {
	if be.rank != root {
		if err := be.ceSignal(c.s, ceReadyOff, seq, root); err != nil {
			return err
		}
		if err := be.moveLanded(c, root, seq); err != nil {
			return err
		}
		if err := be.ceWait(c.s, ceSigDoneOff, seq, root); err != nil {
			return err
		}
		if c.land == 0 {
			return nil
		}
		return be.joinInto(c.s, be.ce.side, be.ce.join)
	}
	if err := be.landAtPeers(c, seq); err != nil {
		return err
	}
	if err := be.ceWait(c.s, ceReadyOff, seq, allPeers); err != nil {
		return err
	}
	if err := be.ceFork(c); err != nil {
		return err
	}
	if err := be.copyToPeers(c, 0, c.land); err != nil {
		return err
	}
	if err := be.signalAfter(c.s, ceSigDoneOff, seq); err != nil {
		return err
	}
	return be.ceJoin(c)
}

// copyToPeers copies, on the user's stream, this rank's input from byte
// skip on into every peer's registered receive buffer at offset at+skip
// (rotated order).
func (be *Backend) copyToPeers(c *ceArgs, at uintptr, skip uint64) error {
	for i := 1; i < be.nranks; i++ {
		p := (be.rank + i) % be.nranks
		dst := c.reg.region.Peers[p] + c.off + at + uintptr(skip)
		if err := be.drv.MemcpyAsync(be.ctx, cuda.DevicePtr(dst), cuda.DevicePtr(c.src+uintptr(skip)), c.bytes-skip, c.s); err != nil {
			return fmt.Errorf("copy to rank %d: %w", p, err)
		}
	}
	return nil
}

// ceSignal writes seq into flag slot [me] of peer only, or of every peer
// (allPeers).
func (be *Backend) ceSignal(s cuda.Stream, off uintptr, seq uint32, only int) error {
	for i := 1; i < be.nranks; i++ {
		p := (be.rank + i) % be.nranks
		if only != allPeers && p != only {
			continue
		}
		addr := be.ce.peers[p] + off + 4*uintptr(be.rank)
		if err := be.drv.StreamWriteValue32(be.ctx, s, cuda.DevicePtr(addr), seq); err != nil {
			return fmt.Errorf("signal rank %d: %w", p, err)
		}
	}
	return nil
}

// ceWait makes s wait until our flag slot [p] >= seq for peer only, or for
// every peer (allPeers).
func (be *Backend) ceWait(s cuda.Stream, off uintptr, seq uint32, only int) error {
	for i := 1; i < be.nranks; i++ {
		p := (be.rank + i) % be.nranks
		if only != allPeers && p != only {
			continue
		}
		addr := be.ce.local + off + 4*uintptr(p)
		if err := be.drv.StreamWaitValue32(be.ctx, s, cuda.DevicePtr(addr), seq, true); err != nil {
			return fmt.Errorf("wait for rank %d: %w", p, err)
		}
	}
	return nil
}

// ceFork starts the local copy on the side stream once the user's stream
// has passed this call's ready wait. Forked any earlier, the local copy
// takes the copy engines first and the peer copies queued behind it run
// slower: on 2x H200 an AllGather of 128 MiB out of place took 196 us with
// the fork before ready, 190 after it, as in place (probe ipcev).
func (be *Backend) ceFork(c *ceArgs) error {
	if !c.local || c.bytes == 0 {
		return nil
	}
	if err := be.forkSide(c); err != nil {
		return err
	}
	if err := be.drv.MemcpyAsync(be.ctx, cuda.DevicePtr(c.dstOwn), cuda.DevicePtr(c.src), c.bytes, be.ce.side); err != nil {
		return fmt.Errorf("local copy: %w", err)
	}
	if err := be.drv.EventRecord(be.ctx, be.ce.join, be.ce.side); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	return nil
}

// forkSide makes the side stream wait for the user's stream to reach this
// point.
func (be *Backend) forkSide(c *ceArgs) error {
	if err := be.drv.EventRecord(be.ctx, be.ce.fork, c.s); err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	if err := be.drv.StreamWaitEvent(be.ctx, be.ce.side, be.ce.fork); err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	return nil
}

// joinInto makes stream into wait for everything enqueued on from so far,
// through event e.
func (be *Backend) joinInto(into, from cuda.Stream, e cuda.Event) error {
	if err := be.drv.EventRecord(be.ctx, e, from); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	if err := be.drv.StreamWaitEvent(be.ctx, into, e); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	return nil
}

// ceJoin makes the user's stream wait for the local copy.
func (be *Backend) ceJoin(c *ceArgs) error {
	if !c.local || c.bytes == 0 {
		return nil
	}
	if err := be.drv.StreamWaitEvent(be.ctx, c.s, be.ce.join); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	return nil
}

// signalAfter raises flag off to seq in every peer from the signal stream
// once everything enqueued on s so far has run, without holding s.
func (be *Backend) signalAfter(s cuda.Stream, off uintptr, seq uint32) error {
	if be.nranks < 2 {
		return nil
	}
	sig := be.ce.red[redSignal]
	if err := be.joinInto(sig, s, be.ce.pushed); err != nil {
		return err
	}
	return be.ceSignal(sig, off, seq, allPeers)
}

// streams and events list the handles setupCE creates and releaseCE
// destroys.
func (ce *copyEngine) streams() []*cuda.Stream {
	s := []*cuda.Stream{&ce.side, &ce.rescue}
	for k := range ce.red {
		s = append(s, &ce.red[k])
	}
	return ce.pceStreams(s)
}

func (ce *copyEngine) events() []*cuda.Event {
	e := []*cuda.Event{&ce.fork, &ce.join, &ce.pushed, &ce.reduced}
	for k := range ce.redJoin {
		e = append(e, &ce.redJoin[k])
	}
	return ce.pceEvents(e)
}

// rescueCE is Abort's best effort for copy-engine waits: it overwrites
// this rank's flags with a value every issued call's waits accept.
func (be *Backend) rescueCE() {
	ce := &be.ce
	ce.mu.Lock()
	defer ce.mu.Unlock()
	be.rescueP2PCE()
	seq := ce.issued.Load()
	if ce.rescue == 0 || seq == 0 {
		return
	}
	v := seq + ceRescue
	// Every flag a stream waits on; not landed, which only the reduction
	// kernel polls: released through it, the kernel would reduce stale
	// staging and publish free flags older than the peers' rescue values,
	// while it leaves through the abort flag anyway.
	for _, span := range [2][2]uintptr{{0, ceLandedOff}, {ceLandedOff + 4, ceFlagBytes}} {
		if err := be.drv.MemsetD32Async(be.ctx, cuda.DevicePtr(ce.local+span[0]), v, uint64(span[1]-span[0])/4, ce.rescue); err != nil {
			be.log.Warn("goccl: gpu backend: abort could not release copy-engine waits", "rank", be.rank, "err", err)
			return
		}
	}
	be.log.Info("goccl: gpu backend: abort released copy-engine waits", "rank", be.rank, "calls", seq)
}

// releaseCE destroys the streams and events (release).
func (be *Backend) releaseCE() []error {
	ce := &be.ce
	ce.mu.Lock()
	defer ce.mu.Unlock()
	errs := be.releaseP2PCE()
	for _, s := range ce.streams() {
		if *s != 0 {
			if err := be.drv.StreamDestroy(be.ctx, *s); err != nil {
				errs = append(errs, fmt.Errorf("gpu backend: destroy copy-engine stream: %w", err))
			}
			*s = 0
		}
	}
	for _, e := range ce.events() {
		if *e != 0 {
			if err := be.drv.EventDestroy(be.ctx, *e); err != nil {
				errs = append(errs, fmt.Errorf("gpu backend: destroy copy-engine event: %w", err))
			}
			*e = 0
		}
	}
	return errs
}

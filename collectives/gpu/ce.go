package gpu

import (
	"context"
	"fmt"
	"log/slog"
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
// non-roots' ready to the root and the root's done to the non-roots.
// The waits are cyclic (CU_STREAM_WAIT_VALUE_GEQ compares (int32)(a-b)), so
// seq may wrap.
//
// Limits: a host counter would be frozen into a CUDA graph, so a stream
// being captured takes the kernels (every rank must capture alike). A
// cuStreamWaitValue32 does not poll the abort flag: Abort stops new
// copy-engine calls and, best effort, releases this rank's pending waits by
// overwriting its own flags far past seq on a stream of its own; a peer
// that keeps writing older values can still hold a wait.
const (
	ceFlagOff   = 32 << 10 // the flag area in the signal area; kernels use < 5 KiB
	ceReadyOff  = 0        // in the flag area: ready[maxRanks] u32
	ceDoneOff   = 128      // done[maxRanks] u32, on a line of its own
	ceFlagBytes = 256      // the flag area, which Abort overwrites
	ceRescue    = 1 << 30  // Abort writes issued+ceRescue
	allPeers    = -1       // ceSignal/ceWait: every peer
)

// The flags sit past the kernels' slots and epochs and inside the signal
// area (a negative array length fails the build).
var (
	_ [ceFlagOff - epochOff - 4*maxBlocks]struct{}
	_ [signalSize - ceFlagOff - ceFlagBytes]struct{}
)

// copyEngine is the backend's copy-engine state.
type copyEngine struct {
	ok    bool // every rank can run stream memory ops (agreed at New)
	local uintptr
	peers [maxRanks]uintptr // every rank's flag area, as mapped here

	seq    uint32        // calls issued; guarded by Backend.mu
	issued atomic.Uint32 // seq, for Abort

	mu         sync.Mutex // the handles below against Abort and release
	side       cuda.Stream
	rescue     cuda.Stream
	fork, join cuda.Event
}

// setupCE creates the copy-engine streams and events, probes stream memory
// operations on this rank (a write into every peer's flag area, a wait on
// our own) and agrees with the peers: the path is on only where every rank
// passed, so that every rank makes the same choice per call. Failing the
// probe is not an error: the kernels serve every call.
func (be *Backend) setupCE(ctx context.Context, local uintptr, peers []uintptr) error {
	ce := &be.ce
	ce.local = local + ceFlagOff
	for r, p := range peers {
		ce.peers[r] = p + ceFlagOff
	}
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
			slog.Warn("gpu backend: copy-engine path off (stream memory operations unavailable)", "rank", be.rank, "on_rank", r, "err", probe)
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
		slog.Debug("gpu backend: stream memory ops", "rank", be.rank, "64bit", v)
	}
	ce.mu.Lock()
	defer ce.mu.Unlock()
	var err error
	if ce.side, err = drv.StreamCreate(cx, true); err != nil {
		return err
	}
	if ce.rescue, err = drv.StreamCreate(cx, true); err != nil {
		return err
	}
	if ce.fork, err = drv.EventCreate(cx, false); err != nil {
		return err
	}
	if ce.join, err = drv.EventCreate(cx, false); err != nil {
		return err
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
}

// runCE enqueues one copy-engine Broadcast or AllGather (be.mu held). Any
// failure once the peers may be waiting for us aborts the communicator, so
// that the peers' waits are released too.
func (be *Backend) runCE(a *collectives.Args, reg *registration, bytes uint64) error {
	ce := &be.ce
	ce.seq++
	ce.issued.Store(ce.seq)
	// Abort stores aborted and then reads issued; we store issued and then
	// read aborted: either Abort's rescue covers this seq or we stop here.
	if be.aborted.Load() {
		return be.abortErr()
	}
	c := ceArgs{s: cuda.Stream(a.Stream), reg: reg, off: a.Recv - reg.base, bytes: bytes, src: a.Send, dstOwn: a.Recv}
	var err error
	if a.Coll == collectives.AllGather {
		c.dstOwn = a.Recv + uintptr(be.rank)*uintptr(bytes)
		c.local = a.Send != c.dstOwn
		err = be.ceAllGather(&c, ce.seq)
	} else {
		c.local = be.rank == a.Root && a.Send != a.Recv
		err = be.ceBroadcast(&c, a.Root, ce.seq)
	}
	if err != nil {
		be.Abort(fmt.Errorf("gpu backend: copy-engine %s (call %d) not enqueued: %w", a.Coll, ce.seq, err))
		return be.abortErr()
	}
	return nil
}

func (be *Backend) ceAllGather(c *ceArgs, seq uint32) error {
	if err := be.ceFork(c); err != nil {
		return err
	}
	if err := be.ceSignal(c.s, ceReadyOff, seq, allPeers); err != nil {
		return err
	}
	if err := be.ceWait(c.s, ceReadyOff, seq, allPeers); err != nil {
		return err
	}
	slot := uintptr(be.rank) * uintptr(c.bytes)
	for i := 1; i < be.nranks; i++ {
		p := (be.rank + i) % be.nranks
		dst := c.reg.region.Peers[p] + c.off + slot
		if err := be.drv.MemcpyAsync(be.ctx, cuda.DevicePtr(dst), cuda.DevicePtr(c.src), c.bytes, c.s); err != nil {
			return fmt.Errorf("copy to rank %d: %w", p, err)
		}
	}
	if err := be.ceSignal(c.s, ceDoneOff, seq, allPeers); err != nil {
		return err
	}
	if err := be.ceWait(c.s, ceDoneOff, seq, allPeers); err != nil {
		return err
	}
	return be.ceJoin(c)
}

func (be *Backend) ceBroadcast(c *ceArgs, root int, seq uint32) error {
	if be.rank != root {
		if err := be.ceSignal(c.s, ceReadyOff, seq, root); err != nil {
			return err
		}
		return be.ceWait(c.s, ceDoneOff, seq, root)
	}
	if err := be.ceFork(c); err != nil {
		return err
	}
	if err := be.ceWait(c.s, ceReadyOff, seq, allPeers); err != nil {
		return err
	}
	for i := 1; i < be.nranks; i++ {
		p := (be.rank + i) % be.nranks
		dst := c.reg.region.Peers[p] + c.off
		if err := be.drv.MemcpyAsync(be.ctx, cuda.DevicePtr(dst), cuda.DevicePtr(c.src), c.bytes, c.s); err != nil {
			return fmt.Errorf("copy to rank %d: %w", p, err)
		}
	}
	if err := be.ceSignal(c.s, ceDoneOff, seq, allPeers); err != nil {
		return err
	}
	return be.ceJoin(c)
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
// has reached this call.
func (be *Backend) ceFork(c *ceArgs) error {
	if !c.local || c.bytes == 0 {
		return nil
	}
	ce, drv := &be.ce, be.drv
	if err := drv.EventRecord(be.ctx, ce.fork, c.s); err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	if err := drv.StreamWaitEvent(be.ctx, ce.side, ce.fork); err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	if err := drv.MemcpyAsync(be.ctx, cuda.DevicePtr(c.dstOwn), cuda.DevicePtr(c.src), c.bytes, ce.side); err != nil {
		return fmt.Errorf("local copy: %w", err)
	}
	if err := drv.EventRecord(be.ctx, ce.join, ce.side); err != nil {
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

// rescueCE is Abort's best effort for copy-engine waits: it overwrites
// this rank's flags with a value every issued call's waits accept.
func (be *Backend) rescueCE() {
	ce := &be.ce
	ce.mu.Lock()
	defer ce.mu.Unlock()
	seq := ce.issued.Load()
	if ce.rescue == 0 || seq == 0 {
		return
	}
	v := seq + ceRescue
	if err := be.drv.MemsetD32Async(be.ctx, cuda.DevicePtr(ce.local), v, ceFlagBytes/4, ce.rescue); err != nil {
		slog.Warn("gpu backend: abort could not release copy-engine waits", "rank", be.rank, "err", err)
		return
	}
	slog.Info("gpu backend: abort released copy-engine waits", "rank", be.rank, "calls", seq)
}

// releaseCE destroys the streams and events (release).
func (be *Backend) releaseCE() []error {
	ce := &be.ce
	ce.mu.Lock()
	defer ce.mu.Unlock()
	var errs []error
	for _, s := range []*cuda.Stream{&ce.side, &ce.rescue} {
		if *s != 0 {
			if err := be.drv.StreamDestroy(be.ctx, *s); err != nil {
				errs = append(errs, fmt.Errorf("gpu backend: destroy copy-engine stream: %w", err))
			}
			*s = 0
		}
	}
	for _, e := range []*cuda.Event{&ce.fork, &ce.join} {
		if *e != 0 {
			if err := be.drv.EventDestroy(be.ctx, *e); err != nil {
				errs = append(errs, fmt.Errorf("gpu backend: destroy copy-engine event: %w", err))
			}
			*e = 0
		}
	}
	return errs
}

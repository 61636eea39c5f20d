package gpu

import (
	"fmt"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// The copy-engine reductions: AllReduce into registered receive buffers and
// ReduceScatter (any buffers) of large messages, with the copy engines
// carrying every byte between GPUs (their ~395 GB/s rather than SM stores'
// ~370) and a kernel doing only the arithmetic.
//
// The message is cut into one piece per rank (AllReduce: segments rounded
// to 16 bytes; ReduceScatter: the output slices) and each piece into chunks.
// After the ready handshake of ce.go, on every rank:
//
//	push:   for chunk i, for each peer r: [wait free[r][i-depth] here]
//	        copy my part of r's piece, chunk i -> r's staging slot i%depth
//	        write data[me] = seq+i into r's flags
//	land:   for chunk i of my piece: wait data[r] >= seq+i for every r,
//	        write landed = seq+i here
//	user:   goccl_cereduce: for chunk i of my piece, wait landed >= seq+i,
//	        reduce into my piece, write reduced[i] here and free[me][i] to r
//	spread: (AllReduce) for chunk i: wait reduced[i] >= seq+i here,
//	        copy my reduced chunk i -> every peer's receive buffer;
//	        then write done[me] = seq into every peer's flags
//	user:   join them all; (ReduceScatter) write done[me] = seq into every
//	        peer's flags; wait done[r] >= seq for every r
//
// so the pushes, the reduction and the pushes of the result overlap chunk
// by chunk, and the staging is reused depth chunks behind. The kernel
// polls landed, written by this rank's own stream after stream waits on the
// peers' data flags, rather than the data flags themselves: CUDA lets a
// device reorder writes arriving from a peer, so a flag seen by a kernel
// does not order the data written before it, while a stream wait orders the
// work after it (the same ordering the copy-engine Broadcast relies on). A
// call uses one flag value per chunk (seq, seq+1, ...), taken from the
// copy-engine counter that ready and done use, so that every flag only
// grows and Abort's rescue covers them all. The kernel's side of this is
// kernels/cereduce.cu.
//
// Direct mode, at 2 ranks with both buffers registered (symmetric, so
// every rank makes the same choice) and out of place: the peer's part of my
// piece lands in my receive buffer itself rather than in staging, and a
// kernel per chunk reduces there in place (recv = send op recv). Nothing is
// staged, so no slot is reused (no free flags, no staging waits) and chunks
// may be as large as the piece: they halve what is left of it down to a
// floor (tuning.ceFloor), so that a handful of copies carries the message
// (each copy costs the link about 5 us on 2x H200) while the last chunk,
// the only one reduced after the last copy, stays small. ReduceScatter
// then needs no done handshake either: no peer reads anything of this
// rank's after the kernel has seen every chunk land. The peers' copies
// into my output can only start after ready, i.e. once my stream has
// reached the call. Each chunk's reduction is a kernel of its own, queued
// on the land stream behind that chunk's wait (launchChunk), rather than
// one kernel spinning through the whole call (on 2x H200 that took
// AllReduce at 1 GiB from 330-337 to 375 GB/s). Between this rank's own
// streams the order goes by events, and no stream memory operation sits
// between two copies (ceDirect): that took AllReduce at 1 GiB on to 382
// and at 256 MiB from 352 to 369, 372 with a 64 MiB floor (docs/perf.md).
// An AllReduce pushes from the user's stream itself, with no fork ahead of
// its first copy (tuning.ceInline): 357 -> 360 GB/s at 128 MiB.
// This is the mode the thresholds choose where it passes the kernels
// (AllReduce from 128 MiB, ReduceScatter from an output of 256 MiB); the
// staging mode runs only when forced or given a threshold explicitly.
//
// Limits: eager streams only (a stream being captured takes the kernels, as
// for the other copy-engine calls); about 3 stream operations per chunk and
// peer (direct mode: and a kernel launch per chunk); every rank must
// register alike (both buffers or neither, at the same offsets), as the
// choice of mode is made on each rank from what it sees (GOCCL_CHECK=1
// compares it: Backend.PathFacts); and on 2x H200
// each chunk costs a stall of about 10 us beyond its copy, which leaves the
// staging mode slower than the kernels (docs/perf.md), so it runs only
// when forced or given a threshold (GOCCL_TUNE ce.<coll>); direct mode pays
// the stall on a few large chunks.

// ceMaxChunks bounds one call's chunks, so that flag values stay far from
// wrapping into each other (cyclic compares span 2^31).
const ceMaxChunks = 1 << 24

// ceRefreshEvery: the staging mode's reduced and free flags are written
// only by staging-mode kernels, and slot k only by calls of more than k
// chunks, so between two such writes any number of other calls may move
// the counter on. A flag left behind by 2^31 would pass its next wait at
// once (the compare is cyclic), so a staging call that finds the counter
// this far past the last refresh first lowers every such flag of this rank
// to just below its own values (ceRefresh).
const ceRefreshEvery = 1 << 30

// cePlan is how one copy-engine reduction is cut up; it depends only on
// values every rank has alike.
type cePlan struct {
	es     uint64 // bytes per element
	piece  uint64 // elements of every piece but the last ones (AllReduce)
	chunk  uint64 // elements per chunk (direct: the smallest chunk)
	chunks uint32 // per piece: the most any piece takes, the same on every rank
	depth  uint32 // staging slots per source
	direct bool   // chunks land in the owner's receive buffer (2 ranks)
	// cuts (direct mode) is, per rank, where each chunk of its piece
	// starts, and last the piece's end: the halving computed once per call
	// (into the backend's buffers, valid until the next plan).
	cuts [][]uint64
}

// planCEReduce cuts a call up, in direct mode or through staging; ok is
// false when the chunks would be too many for the flags (the kernels take
// the call then).
func (be *Backend) planCEReduce(a *collectives.Args, direct bool) (cePlan, bool) {
	es := uint64(a.Type.Size())
	align := 16 / es
	n := uint64(be.nranks)
	piece := uint64(a.Count)
	if a.Coll == collectives.AllReduce {
		piece = roundUp(ceilDiv(piece, n), align)
	}
	pl := cePlan{es: es, piece: piece, depth: 1, direct: direct}
	if direct {
		// Every piece halves on its own, and a shorter piece (the
		// AllReduce rounding) can take one chunk more than a full one.
		pl.chunk = max(align, uint64(be.tune.ceFloor[a.Coll])/es/align*align)
		// At least two chunks: a call of one would reduce all of its piece
		// after its only copy, with the link idle.
		pl.chunk = min(pl.chunk, max(align, roundUp(ceilDiv(piece, 2), align)))
		// Halving takes about log2(piece/floor) chunks, far below the
		// flags' limit, which is checked all the same.
		pl.cuts = be.ce.cuts[:be.nranks]
		chunks := 0
		for r := range be.nranks {
			length, cut := pl.length(a, r), append(pl.cuts[r][:0], 0)
			for lo := uint64(0); lo < length && len(cut) <= ceMaxChunks; {
				lo += pl.next(lo, length)
				cut = append(cut, lo)
			}
			pl.cuts[r] = cut
			chunks = max(chunks, len(cut)-1)
		}
		if chunks > ceMaxChunks {
			return cePlan{}, false
		}
		pl.chunks = uint32(chunks)
		return pl, true
	}
	// At least two slots per source, so that a push overlaps a reduction.
	chunkBytes := min(uint64(be.tune.ceChunk), be.ce.stageBytes/(2*n)) &^ 15
	pl.chunk = min(chunkBytes/es, roundUp(piece, align))
	if pl.chunk == 0 {
		return cePlan{}, false
	}
	chunks := ceilDiv(piece, pl.chunk)
	if chunks > ceMaxChunks {
		return cePlan{}, false
	}
	pl.chunks = uint32(chunks)
	pl.depth = uint32(min(ceSlots, be.ce.stageBytes/(n*pl.chunk*es)))
	return pl, true
}

// next is the length of the chunk that starts at lo of a piece of length
// elements: the chunk size, or in direct mode half of what is left in
// whole 16-byte vectors, at least the floor (each direct chunk's kernel is
// then given that chunk alone: launchChunk).
func (pl *cePlan) next(lo, length uint64) uint64 {
	left := length - lo
	c := pl.chunk
	if pl.direct {
		vec := 16 / pl.es
		c = max(c, left/2/vec*vec)
	}
	return min(c, left)
}

// length is the elements of rank r's piece.
func (pl *cePlan) length(a *collectives.Args, r int) uint64 {
	if a.Coll != collectives.AllReduce {
		return pl.piece
	}
	count := uint64(a.Count)
	return min(pl.piece, count-min(uint64(r)*pl.piece, count))
}

// span is chunk i of rank r's piece: its first element in the piece and
// its length (0 past the piece's end).
func (pl *cePlan) span(a *collectives.Args, r int, i uint32) (lo, n uint64) {
	if pl.direct {
		cut := pl.cuts[r]
		if int(i)+1 >= len(cut) {
			return cut[len(cut)-1], 0
		}
		return cut[i], cut[i+1] - cut[i]
	}
	length := pl.length(a, r)
	lo = uint64(i) * pl.chunk
	if lo >= length {
		return lo, 0
	}
	return lo, min(pl.chunk, length-lo)
}

// ceReduce enqueues one copy-engine AllReduce or ReduceScatter whose chunk
// flags are seq, seq+1, ... (be.mu held; runCE aborts on failure).
func (be *Backend) ceReduce(a *collectives.Args, reg *registration, pl *cePlan, seq uint32) error {
	drv, cx, ce := be.drv, be.ctx, &be.ce
	s := cuda.Stream(a.Stream)
	spread := a.Coll == collectives.AllReduce
	if err := be.ceSignal(s, ceReadyOff, seq, allPeers); err != nil {
		return err
	}
	if !pl.direct && seq-ce.refreshed >= ceRefreshEvery {
		if err := be.ceRefresh(s, seq); err != nil {
			return err
		}
	}
	if err := drv.EventRecord(cx, ce.fork, s); err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	push := ce.red[redPush]
	inline := pl.direct && be.tune.ceInline[a.Coll]
	if inline {
		push = s
	}
	used := func(k int) bool {
		return k == redPush && !inline || k == redLand || k == redSpread && spread || k == redSignal && pl.direct
	}
	for k := range numRedStreams {
		if !used(k) {
			continue
		}
		if err := drv.StreamWaitEvent(cx, ce.red[k], ce.fork); err != nil {
			return fmt.Errorf("fork: %w", err)
		}
	}
	// Only the pushes need the peers' ready: every other write into a
	// peer (a spread, a free flag) follows a chunk the peer pushed, i.e.
	// the peer's own ready. Waiting after the fork spares the push a hop
	// through it. Pushed from the user's stream itself (tuning.ceInline)
	// the first copy starts without any hop: a copy forked onto another
	// stream and joined back took about 11 us more per call on 2x H200
	// (scripts/gpu/probe/mix.cu).
	if err := be.ceWait(push, ceReadyOff, seq, allPeers); err != nil {
		return err
	}
	if err := be.ceChunks(a, reg, pl, seq, push); err != nil {
		return err
	}
	for k := range numRedStreams {
		if !used(k) {
			continue
		}
		if err := be.joinInto(s, ce.red[k], ce.redJoin[k]); err != nil {
			return err
		}
	}
	// Done: every peer has its output (AllReduce: the peers' spread
	// streams copied into ours) and has finished reading its staging, which
	// the next call, a kernel's push included, may then overwrite. At
	// AllReduce the peers' spread streams say so (they waited for every
	// chunk the kernel reduced); at ReduceScatter the user stream, after
	// the kernel. A direct ReduceScatter stages nothing, so it is done
	// when its kernel is.
	if !spread && pl.direct {
		return nil
	}
	if !spread {
		if err := be.ceSignal(s, ceDoneOff, seq, allPeers); err != nil {
			return err
		}
		return be.ceWait(s, ceDoneOff, seq, allPeers)
	}
	return be.ceWait(s, ceDoneOff, seq, allPeers)
}

// ceRefresh sets this rank's reduced flags and its free flags for every
// peer to seq-1 on the user's stream s, ahead of the fork: below every
// value this call waits for, and no longer far enough behind to wrap.
// Nothing else writes them meanwhile: this rank's earlier kernels are
// done before s gets here, and a peer's kernel writes our free flags only
// for chunks we push, all of which follow the fork (a late write of an
// older call's value is lower still, which no wait mistakes for ahead).
func (be *Backend) ceRefresh(s cuda.Stream, seq uint32) error {
	ce := &be.ce
	for k := range ceSlots {
		if err := be.drv.StreamWriteValue32(be.ctx, s, cuda.DevicePtr(ce.local+ceReducedOff+4*uintptr(k)), seq-1); err != nil {
			return fmt.Errorf("refresh reduced flags: %w", err)
		}
	}
	for r := range be.nranks {
		if r == be.rank {
			continue
		}
		for k := range ceSlots {
			free := ce.local + ceFreeOff + 4*uintptr(r*ceSlots+k)
			if err := be.drv.StreamWriteValue32(be.ctx, s, cuda.DevicePtr(free), seq-1); err != nil {
				return fmt.Errorf("refresh free flags: %w", err)
			}
		}
	}
	ce.refreshed = seq
	return nil
}

// ceChunks enqueues a call's chunks on the reduction's streams.
func (be *Backend) ceChunks(a *collectives.Args, reg *registration, pl *cePlan, seq uint32, push cuda.Stream) error {
	if pl.direct {
		return be.ceDirect(a, reg, pl, seq, push)
	}
	if err := be.cePush(a, pl, seq); err != nil {
		return err
	}
	if err := be.ceLand(a, pl, seq); err != nil {
		return err
	}
	if a.Coll == collectives.AllReduce {
		if err := be.ceSpread(a, reg, pl, seq); err != nil {
			return err
		}
	}
	return be.launchCEReduce(a, pl, seq)
}

// ceDirect enqueues a direct-mode call (2 ranks) chunk by chunk, each
// chunk's steps on every stream together, so that one event can carry each
// order between this rank's own streams: the copies on push (the push
// stream, or the user's: tuning.ceInline) run back to back while each
// copy's data flag follows it on the signal stream, and
// a reduced chunk's spread waits for its kernel by event rather than by
// flag. Stream memory operations cost about 2 us each on 2x H200, a flag
// between the GPUs about 6 and an event about half that (probe hop:
// docs/perf.md), and every one of them on the push or the spread stream
// was time the link sat idle. The kernels are launched behind their
// chunk's wait, so the landed flag they poll is written once for the call.
func (be *Backend) ceDirect(a *collectives.Args, reg *registration, pl *cePlan, seq uint32, push cuda.Stream) error {
	drv, cx, ce := be.drv, be.ctx, &be.ce
	land, spread := ce.red[redLand], ce.red[redSpread]
	peer := 1 - be.rank
	off := a.Recv - reg.base
	if err := drv.StreamWriteValue32(cx, land, cuda.DevicePtr(ce.local+ceLandedOff), seq+pl.chunks-1); err != nil {
		return fmt.Errorf("landed: %w", err)
	}
	for i := range pl.chunks {
		// This rank's part of the peer's chunk i, straight into its output.
		if lo, n := pl.span(a, peer, i); n > 0 {
			at := lo * pl.es
			if a.Coll == collectives.AllReduce {
				at += uint64(peer) * pl.piece * pl.es
			}
			src := a.Send + uintptr(uint64(peer)*pl.piece*pl.es+lo*pl.es)
			if err := drv.MemcpyAsync(cx, cuda.DevicePtr(reg.region.Peers[peer]+off+uintptr(at)), cuda.DevicePtr(src), n*pl.es, push); err != nil {
				return fmt.Errorf("copy to rank %d: %w", peer, err)
			}
		}
		if err := be.signalAfter(push, ceDataOff, seq+i); err != nil {
			return err
		}
		// Chunk i of this rank's piece: the peer's part lands, the kernel
		// reduces it in place, and (AllReduce) the copy engines spread it.
		lo, n := pl.span(a, be.rank, i)
		if n == 0 {
			continue
		}
		if err := be.ceWait(land, ceDataOff, seq+i, peer); err != nil {
			return err
		}
		if err := be.launchChunk(a, pl, seq, i, lo, n); err != nil {
			return err
		}
		if a.Coll != collectives.AllReduce {
			continue
		}
		if err := be.joinInto(spread, land, ce.reduced); err != nil {
			return err
		}
		at := uintptr((uint64(be.rank)*pl.piece + lo) * pl.es)
		if err := drv.MemcpyAsync(cx, cuda.DevicePtr(reg.region.Peers[peer]+off+at), cuda.DevicePtr(a.Recv+at), n*pl.es, spread); err != nil {
			return fmt.Errorf("copy to rank %d: %w", peer, err)
		}
	}
	if a.Coll != collectives.AllReduce {
		return nil
	}
	return be.ceSignal(spread, ceDoneOff, seq, allPeers)
}

// cePush enqueues on the push stream the copies of this rank's parts of
// the peers' pieces into their staging, chunk by chunk.
func (be *Backend) cePush(a *collectives.Args, pl *cePlan, seq uint32) error {
	drv, cx, ce := be.drv, be.ctx, &be.ce
	chunkBytes := pl.chunk * pl.es
	st := ce.red[redPush]
	for i := range pl.chunks {
		for k := 1; k < be.nranks; k++ {
			r := (be.rank + k) % be.nranks
			lo, n := pl.span(a, r, i)
			if n > 0 {
				if i >= pl.depth {
					// r has reduced the chunk that last used this slot.
					free := ce.local + ceFreeOff + 4*uintptr(r*ceSlots+int((i-pl.depth)%ceSlots))
					if err := drv.StreamWaitValue32(cx, st, cuda.DevicePtr(free), seq+i-pl.depth, true); err != nil {
						return fmt.Errorf("wait for rank %d's staging: %w", r, err)
					}
				}
				slot := uint64(i%pl.depth)*uint64(be.nranks) + uint64(be.rank)
				dst := ce.staging[r] + uintptr(slot*chunkBytes)
				src := a.Send + uintptr((uint64(r)*pl.piece+lo)*pl.es)
				if err := drv.MemcpyAsync(cx, cuda.DevicePtr(dst), cuda.DevicePtr(src), n*pl.es, st); err != nil {
					return fmt.Errorf("copy to rank %d: %w", r, err)
				}
			}
			if err := be.ceSignal(st, ceDataOff, seq+i, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// ceLand enqueues on the land stream, for each chunk of this rank's piece,
// the waits for every peer's copy of it and then the landed flag the
// kernel polls.
func (be *Backend) ceLand(a *collectives.Args, pl *cePlan, seq uint32) error {
	drv, cx, ce := be.drv, be.ctx, &be.ce
	land := ce.red[redLand]
	for i := range pl.chunks {
		if _, n := pl.span(a, be.rank, i); n == 0 {
			break
		}
		if err := be.ceWait(land, ceDataOff, seq+i, allPeers); err != nil {
			return err
		}
		if err := drv.StreamWriteValue32(cx, land, cuda.DevicePtr(ce.local+ceLandedOff), seq+i); err != nil {
			return fmt.Errorf("landed: %w", err)
		}
	}
	return nil
}

// ceSpread enqueues on the spread stream the copies of this rank's reduced
// piece into every peer's registered receive buffer, each chunk once the
// kernel has finished it, then the done signal.
func (be *Backend) ceSpread(a *collectives.Args, reg *registration, pl *cePlan, seq uint32) error {
	drv, cx, ce := be.drv, be.ctx, &be.ce
	off := a.Recv - reg.base
	st := ce.red[redSpread]
	for i := range pl.chunks {
		lo, n := pl.span(a, be.rank, i)
		if n == 0 {
			break
		}
		reduced := ce.local + ceReducedOff + 4*uintptr(i%ceSlots)
		if err := drv.StreamWaitValue32(cx, st, cuda.DevicePtr(reduced), seq+i, true); err != nil {
			return fmt.Errorf("wait for the reduction: %w", err)
		}
		at := uintptr((uint64(be.rank)*pl.piece + lo) * pl.es)
		for k := 1; k < be.nranks; k++ {
			r := (be.rank + k) % be.nranks
			dst := reg.region.Peers[r] + off + at
			if err := drv.MemcpyAsync(cx, cuda.DevicePtr(dst), cuda.DevicePtr(a.Recv+at), n*pl.es, st); err != nil {
				return fmt.Errorf("copy to rank %d: %w", r, err)
			}
		}
	}
	return be.ceSignal(st, ceDoneOff, seq, allPeers)
}

// launchCEReduce launches, through staging, the kernel that reduces this
// rank's piece as its chunks land.
func (be *Backend) launchCEReduce(a *collectives.Args, pl *cePlan, seq uint32) error {
	at := uintptr(uint64(be.rank) * pl.piece * pl.es)
	recv := a.Recv
	if a.Coll == collectives.AllReduce {
		recv += at
	}
	be.prm.setCall(a.Send+at, recv, pl.length(a, be.rank), 0, int(pl.es), 0)
	be.prm.setCE(pl.chunks, pl.chunk, seq, pl.depth, false)
	return be.launchCE(a, cuda.Stream(a.Stream))
}

// launchChunk launches, in direct mode, the kernel for chunk i of this
// rank's piece alone (lo, n elements) on the land stream, behind the wait
// for that chunk: one chunk as the whole piece, so that its kernel finds
// landed already written (ceDirect) and its end is the end of the chunk.
// Launched this way no kernel spins on an SM while the copies run (one
// spinning kernel for the whole call measured 330-343 GB/s at 1 GiB, these
// 363-376: docs/perf.md); the launches queue on the stream ahead of time,
// so the next chunk's kernel starts as soon as its data has landed.
func (be *Backend) launchChunk(a *collectives.Args, pl *cePlan, seq, i uint32, lo, n uint64) error {
	at := uintptr((uint64(be.rank)*pl.piece + lo) * pl.es)
	recv := a.Recv + uintptr(lo*pl.es)
	if a.Coll == collectives.AllReduce {
		recv = a.Recv + at
	}
	be.prm.setCall(a.Send+at, recv, n, 0, int(pl.es), 0)
	be.prm.setCE(1, n, seq+i, 1, true)
	return be.launchCE(a, be.ce.red[redLand])
}

func (be *Backend) launchCE(a *collectives.Args, s cuda.Stream) error {
	cfg := cuda.LaunchConfig{
		Grid:   cuda.Dim3{X: uint32(be.tune.ceGrid), Y: 1, Z: 1},
		Block:  cuda.Dim3{X: maxThreads, Y: 1, Z: 1},
		Stream: s,
	}
	if err := be.drv.LaunchKernel(be.ctx, be.fns.get(famCEReduce, a.Type, a.Op), cfg, be.prm[:]); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	return nil
}

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }
func roundUp(a, b uint64) uint64 { return ceilDiv(a, b) * b }

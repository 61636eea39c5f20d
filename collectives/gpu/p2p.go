package gpu

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// Point-to-point operations run as kernels/p2p.cu's goccl_p2p: one launch
// takes a group's Sends and Recvs of this communicator, in lanes (every
// Send to one peer, every Recv from one peer, and the copies of Sends to
// this rank into its Recvs from itself), each lane on p2pChannels blocks.
// The k-th Send from A to B meets the k-th Recv on B from A because each
// lane runs its ops in order on both sides; a lane longer than
// p2pLaneOps spills into further launches, the k-th op of every lane into
// launch k/p2pLaneOps on every rank, so each launch's ops pair with ops of
// the same launch on the peers and the launches never wait for each other.

// Layout of kernels/p2p.cu's P2PParams and signal records.
const (
	p2pMaxOps      = 128
	p2pMaxLanes    = 16
	p2pMaxChannels = 16
	p2pLaneOps     = p2pMaxOps / p2pMaxLanes
	p2pChannels    = 8 // blocks per lane, at most the staging's grid

	offP2PNLanes   = paramSize     // 288
	offP2PChannels = paramSize + 4 // 292
	offP2PZCTable  = paramSize + 8 // 296: the zero-copy table (p2pzc.go)
	offP2PStamp    = 216           // Params.reserved[4]: p2pStamp* flags and p2pEagerOff
	offP2PEager    = 224           // Params.reserved[5]: the eager area's offset in every rank's staging
	offP2PLanes    = paramSize + 16
	offP2POps      = offP2PLanes + 8*p2pMaxLanes // 432
	p2pParamSize   = offP2POps + 24*p2pMaxOps    // 3504

	p2pOffset      = 40 << 10 // kP2POffset: records in the signal area
	p2pRecordBytes = 64
	p2pRecRPath    = 52 // kRecRPath: the path a rank's last Recv from the peer took
	p2pPathStaging = 0  // P2PPath
	p2pPathZC      = 1
	p2pPathEager   = 2

	laneSend = 0
	laneRecv = 1
	laneCopy = 2

	// A group's launches time it in one Stamp: the first claims it (and
	// stores the start when no collective of the group did), the last
	// stores the end and the number.
	p2pStampClaim = 1
	p2pStampStart = 2
	p2pStampEnd   = 4
	// p2pEagerOff (the same word): every Send is a rendezvous
	// (GOCCL_TUNE p2peager=0).
	p2pEagerOff = 8
	// p2pTimeoutShift: the word's high 32 bits bound every wait on a peer,
	// in milliseconds (0: none).
	p2pTimeoutShift = 32

	// The eager area (kernels/p2p.cu): per source but the rank itself, the
	// mailboxes of p2pMaxChannels channels, then p2pEagerData bytes of
	// rings shared by the lane's channels (a power of 2 each, at most its
	// share). A channel's part of a Send that fits its ring goes there
	// without waiting for the Recv.
	p2pEagerQ         = 16 // mailbox entries per (source, channel): 15 eager Sends past the receiver's op
	p2pEagerEntry     = 32
	p2pEagerMailboxes = p2pMaxChannels * p2pEagerQ * p2pEagerEntry
	p2pEagerData      = 256 << 10
	p2pEagerSrcBytes  = p2pEagerMailboxes + p2pEagerData // 270336 (p2p.cu asserts it)
	p2pMinChunk       = 2048                             // kP2PMinChunk
)

// p2pTimeoutMs is d in whole milliseconds, rounded up, at most the 32 bits
// the kernels read (49 days); 0 stays 0 (no bound).
func p2pTimeoutMs(d time.Duration) uint64 {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return uint64(min(max(ms, 0), 1<<32-1))
}

// eagerBytes is the size of one rank's eager area.
func eagerBytes(nranks int) uint64 { return uint64(max(nranks-1, 0)) * p2pEagerSrcBytes }

// eagerRing is a channel's eager ring on channels channels (eager_ring).
func eagerRing(channels int) uint64 {
	e := uint64(p2pEagerData / channels)
	for e&(e-1) != 0 {
		e &= e - 1
	}
	return e
}

// eagerLimit is the largest Send (a multiple of 16) whose part on every
// channel fits its eager ring, with the kernel's chunking (Chunks in
// p2p.cu) of slot-byte staging slots: 256 KiB on the default 8 channels.
func eagerLimit(channels int, slot uint64) uint64 {
	c := uint64(channels)
	fits := func(b uint64) bool {
		size := ((b+c-1)/c + 15) &^ 15
		size = min(max(size, p2pMinChunk), slot)
		n := (b + size - 1) / size
		for ch := range c {
			if n <= ch {
				break
			}
			m := (n-ch-1)/c + 1
			last := ch + (m-1)*c
			part := (m-1)*size + min(size, b-last*size)
			if (part+15)&^15 > eagerRing(channels) {
				return false
			}
		}
		return true
	}
	b := uint64(16)
	for fits(b + 16) {
		b += 16
	}
	return b
}

// The p2p records lie between the copy-engine counters and the error claim.
var (
	_ [p2pOffset - (ceFlagOff + ceFlagBytes + ceCountBytes)]struct{}
	_ [errClaimOff - (p2pOffset + maxRanks*p2pMaxChannels*p2pRecordBytes)]struct{}
)

// Each rank's ring of every channel holds a smallest chunk, and the eager
// area's size per source is the one kernels/p2p.cu asserts.
var (
	_ [p2pEagerData/p2pMaxChannels - p2pMinChunk]struct{}
	_ [p2pEagerSrcBytes - 270336]struct{}
	_ [270336 - p2pEagerSrcBytes]struct{}
)

type p2pParams [p2pParamSize]byte

// p2pState is the backend's reused storage for groups (guarded by mu).
type p2pState struct {
	prm      *p2pParams // own allocation, as params (cgo's pointer check)
	channels int
	eagerAt  uint64 // the eager area's offset in each staging (Params.reserved[5])
	// sends[p], recvs[p]: indexes into the group's P2P of the ops to and
	// from rank p, in group order.
	sends, recvs [maxRanks][]int32
	streams      []cuda.Stream // the group's streams other than the launch's
	evIn, evOut  cuda.Event    // created at the first group that needs them
}

// initP2P copies the communicator-constant fields of prm; channels follow
// the staging's grid (every rank has the same, agreed at New).
func (be *Backend) initP2P(eagerAt uint64) {
	be.p2p.prm = new(p2pParams)
	copy(be.p2p.prm[:paramSize], be.prm[:])
	be.p2p.channels = min(p2pChannels, be.tune.grid)
	binary.LittleEndian.PutUint32(be.p2p.prm[offP2PChannels:], uint32(be.p2p.channels))
	binary.LittleEndian.PutUint64(be.p2p.prm[offP2PEager:], eagerAt)
}

var _ collectives.GroupRunner = (*Backend)(nil)

// RunGroup enqueues a group: its collectives in order, consecutive small
// AllReduces fused into one launch where they can be (fuse.go), the others
// one launch each, then its point-to-point operations in one launch (more when a lane
// holds more than p2pLaneOps) on the stream of the first. Operations on
// other streams are ordered through events: the launch waits for work
// already on them, and they wait for the launch.
func (be *Backend) RunGroup(ctx context.Context, g *collectives.Group) error {
	if err := be.kernelError(); err != nil {
		return err
	}
	// What this rank can check alone fails the group before anything of
	// it is enqueued.
	if err := checkP2P(g.P2P, be.rank, be.nranks); err != nil {
		return err
	}
	if err := be.runColls(ctx, g.Colls); err != nil {
		return err
	}
	if len(g.P2P) == 0 {
		return nil
	}
	if taken, err := be.tryAllToAllLL(g); taken {
		return err
	}
	if be.aborted.Load() {
		return be.abortErr()
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if be.closed {
		return collectives.ErrClosed
	}
	if len(g.Colls) == 0 {
		be.last = collectives.Path{Transport: be.transport}
	}
	st := &be.p2p
	st.sort(g.P2P, be.nranks)
	main := cuda.Stream(g.P2P[0].Stream)
	st.streams = st.streams[:0]
	for i := range g.P2P {
		s := cuda.Stream(g.P2P[i].Stream)
		if s != main && !containsStream(st.streams, s) {
			st.streams = append(st.streams, s)
		}
	}
	if err := be.joinStreams(main, true); err != nil {
		return err
	}
	// The copy-engine ops leave the lanes and go first (p2pce.go).
	pg, err := be.runP2PCE(ctx, g, main)
	if err != nil {
		return err
	}
	seq := groupStampSeq(g)
	launches := st.launches()
	binary.LittleEndian.PutUint64(st.prm[offStamp:], be.stamps.slot(seq))
	binary.LittleEndian.PutUint64(st.prm[offSeq:], seq)
	binary.LittleEndian.PutUint64(st.prm[offP2PZCTable:], uint64(be.zc.dev))
	for L := 0; L < launches; L++ {
		lanes := st.fill(be, g.P2P, L*p2pLaneOps)
		flags := uint64(0)
		if !be.tune.p2pEager {
			flags |= p2pEagerOff
		}
		flags |= p2pTimeoutMs(be.p2pTimeout) << p2pTimeoutShift
		if L == 0 {
			flags |= p2pStampClaim
			if len(g.Colls) == 0 && !pg.startStamped {
				flags |= p2pStampStart
			}
		}
		if L == launches-1 && !pg.pending {
			flags |= p2pStampEnd
		}
		binary.LittleEndian.PutUint64(st.prm[offP2PStamp:], flags)
		cfg := cuda.LaunchConfig{
			Grid:         cuda.Dim3{X: uint32(lanes * st.channels), Y: 1, Z: 1},
			Block:        cuda.Dim3{X: uint32(be.tune.threads), Y: 1, Z: 1},
			Stream:       main,
			Programmatic: be.pdl,
		}
		if err := be.drv.LaunchKernel(be.ctx, be.fns.get(famP2P, 0, 0), cfg, st.prm[:]); err != nil {
			// Peers' kernels may already wait for this rank's.
			be.Abort(fmt.Errorf("gpu backend: launch point-to-point: %w", err))
			return be.abortErr()
		}
	}
	if pg.pending {
		if err := be.finishP2PCE(g, main); err != nil {
			return err
		}
	}
	return be.joinStreams(main, false)
}

func containsStream(ss []cuda.Stream, s cuda.Stream) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// joinStreams orders the group's other streams (p2pState.streams) with
// main: before the launch (in) main waits for each, after it each waits
// for main. One event serves every stream in turn, as a wait takes the
// record made before it.
func (be *Backend) joinStreams(main cuda.Stream, in bool) error {
	st := &be.p2p
	if len(st.streams) == 0 {
		return nil
	}
	ev := &st.evOut
	if in {
		ev = &st.evIn
	}
	if *ev == 0 {
		e, err := be.drv.EventCreate(be.ctx, false)
		if err != nil {
			return fmt.Errorf("gpu backend: point-to-point: stream event: %w", err)
		}
		*ev = e
	}
	for _, s := range st.streams {
		from, to := s, main
		if !in {
			from, to = main, s
		}
		if err := be.drv.EventRecord(be.ctx, *ev, from); err != nil {
			return fmt.Errorf("gpu backend: point-to-point: order streams: %w", err)
		}
		if err := be.drv.StreamWaitEvent(be.ctx, to, *ev); err != nil {
			return fmt.Errorf("gpu backend: point-to-point: order streams: %w", err)
		}
	}
	return nil
}

// checkP2P checks what this rank can check alone: every peer is a rank,
// and its Sends to itself pair with its Recvs from itself (the k-th with
// the k-th) with equal byte counts.
func checkP2P(ops []collectives.P2P, rank, nranks int) error {
	k, r := 0, 0 // pairs checked; where the next Recv from itself is sought
	for i := range ops {
		o := &ops[i]
		if o.Peer < 0 || o.Peer >= nranks {
			return fmt.Errorf("gpu backend: %s: peer %d not in [0,%d): %w", o.Kind, o.Peer, nranks, collectives.ErrInvalidPeer)
		}
		if o.Peer != rank || o.Kind != collectives.SendOp {
			continue
		}
		// The Recv from itself that pairs with this Send: the next one.
		for r < len(ops) && (ops[r].Peer != rank || ops[r].Kind != collectives.RecvOp) {
			r++
		}
		if r == len(ops) {
			break
		}
		if a, b := o.Bytes(), ops[r].Bytes(); a != b {
			return fmt.Errorf("gpu backend: rank %d: Send %d to itself has %d bytes, its Recv %d from itself %d: %w",
				rank, k, a, k, b, collectives.ErrInvalidCount)
		}
		k++
		r++
	}
	ns, nr := 0, 0
	for i := range ops {
		if ops[i].Peer == rank {
			if ops[i].Kind == collectives.SendOp {
				ns++
			} else {
				nr++
			}
		}
	}
	if ns != nr {
		return fmt.Errorf("gpu backend: rank %d: %d Sends to itself and %d Recvs from itself in one group: %w",
			rank, ns, nr, collectives.ErrInvalidArgument)
	}
	return nil
}

// groupStampSeq is the call whose Stamp times a group's point-to-point
// part: its last numbered collective, after whose kernels the part runs
// (a plain group of Sends and Recvs has none: the group's own number), so
// that the group spans from its first collective's start to its last
// op's end, as the recorder reads a group (its first call's start, its
// last's finish).
func groupStampSeq(g *collectives.Group) uint64 {
	if n := len(g.Colls); n > 0 {
		return g.Colls[n-1].Seq
	}
	return g.Seq
}

// launches is how many launches the sorted ops take: the longest lane's
// share of p2pLaneOps each.
func (st *p2pState) launches() int {
	most := 0
	for p := range maxRanks {
		most = max(most, len(st.sends[p]), len(st.recvs[p]))
	}
	return (most + p2pLaneOps - 1) / p2pLaneOps
}

// sort files the (checked) ops by peer and direction.
func (st *p2pState) sort(ops []collectives.P2P, nranks int) {
	for p := range nranks {
		st.sends[p], st.recvs[p] = st.sends[p][:0], st.recvs[p][:0]
	}
	for i := range ops {
		o := &ops[i]
		if o.Kind == collectives.SendOp {
			st.sends[o.Peer] = append(st.sends[o.Peer], int32(i))
		} else {
			st.recvs[o.Peer] = append(st.recvs[o.Peer], int32(i))
		}
	}
}

// fill writes launch lo/p2pLaneOps's lanes (ops lo.. of each lane) into
// prm and returns how many there are (0: nothing left). be.mu is held (a
// Recv's zero-copy offer looks its buffer up in the registrations).
func (st *p2pState) fill(be *Backend, ops []collectives.P2P, lo int) int {
	rank, nranks := be.rank, be.nranks
	q := st.prm
	nl, n := 0, 0
	lane := func(peer, kind, cnt int) {
		o := offP2PLanes + 8*nl
		binary.LittleEndian.PutUint16(q[o:], uint16(n))
		binary.LittleEndian.PutUint16(q[o+2:], uint16(cnt))
		q[o+4], q[o+5] = byte(peer), byte(kind)
		nl++
	}
	op := func(src, dst uintptr, bytes int) {
		o := offP2POps + 24*n
		binary.LittleEndian.PutUint64(q[o:], uint64(src))
		binary.LittleEndian.PutUint64(q[o+8:], uint64(dst))
		binary.LittleEndian.PutUint64(q[o+16:], uint64(bytes))
		n++
	}
	for kind, byPeer := range [2]*[maxRanks][]int32{&st.sends, &st.recvs} {
		for p := range nranks {
			idx := byPeer[p]
			if p == rank || len(idx) <= lo {
				continue
			}
			hi := min(len(idx), lo+p2pLaneOps)
			lane(p, kind, hi-lo)
			for _, i := range idx[lo:hi] {
				o := &ops[i]
				if kind == laneSend {
					op(o.Buf, 0, o.Bytes())
				} else {
					op(uintptr(be.zcOffer(o.Buf, o.Bytes())), o.Buf, o.Bytes())
				}
			}
		}
	}
	if s, r := st.sends[rank], st.recvs[rank]; len(s) > lo {
		hi := min(len(s), lo+p2pLaneOps)
		lane(rank, laneCopy, hi-lo)
		for k := lo; k < hi; k++ {
			op(ops[s[k]].Buf, ops[r[k]].Buf, ops[s[k]].Bytes())
		}
	}
	binary.LittleEndian.PutUint32(q[offP2PNLanes:], uint32(nl))
	return nl
}

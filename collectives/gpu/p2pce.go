package gpu

import (
	"context"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// Point-to-point on the copy engines (opt-in: GOCCL_TUNE p2pce=BYTES): a
// Send of at least that many bytes whose source lies in a registration goes
// as one cuMemcpyAsync from the source straight into the peer's copy of
// that registration, at the same offset; no SM touches the data.
//
// Contract (symmetric, as the copy-engine collectives'): a Send from a
// registered buffer meets a Recv whose buffer lies at the same offset of
// the receiver's copy of the same registration, with the same count. Then
// the sender and the receiver decide alike from what each sees alone (the
// buffer lies in a registration, the bytes reach the threshold, the group
// is the application's own, the stream is not being captured), and the
// k-th copy-engine Send from A to B meets the k-th copy-engine Recv on B
// from A, while the kernel path (p2p.go) pairs the others among themselves
// with its own counters, untouched. A program that Sends from a registered
// buffer into another offset or into unregistered memory breaks the
// contract (the receiver would wait in the kernel for data the copy
// engines wrote elsewhere), which is why the path is off unless asked for;
// GOCCL_CHECK=1 verifies it per call (p2pcecheck.go).
//
// Ordering, per pair and direction, with k the host-side count of
// copy-engine ops (the same on both sides under the contract):
//
//	receiver: write ready[me]=k into the sender's flags ... wait done[sender] >= k
//	sender:   wait ready[receiver] >= k, copy, write done[me]=k into the receiver's flags
//
// ready says the receiver's stream reached the Recv, so its earlier work on
// the buffer is over; done (cuStreamWriteValue32 fences the stream's
// earlier writes) says the bytes landed. In a group every copy-engine
// Recv's ready goes first, then the Sends (each peer's on a stream of its
// own, forked from the group's stream and joined back through events, as
// ce.go's local copy; where no kernel op follows, the first peer's on the
// group's stream itself), then the kernel launches of the ops that did
// not qualify, then the joins and the Recvs' waits. No order of ops in
// the groups deadlocks: every copy-engine wait is on a flag the peer
// raises before any wait of its own group, and no kernel op queues behind
// one (the peer may need that op before it reaches the group that raises
// the flag, when it splits the same ops over two groups). A receiver
// writes ready once per peer (its last k in the group) and waits done once
// per peer; a sender waits and signals per op, since the receiver's Recvs
// may be spread over several of its groups.
// The waits are cyclic (CU_STREAM_WAIT_VALUE_GEQ), so k may wrap. As for
// the copy-engine collectives, the communicator's calls run on the device
// in the order they were issued (one stream, or streams ordered by the
// caller).
const (
	pceOff      = ceFlagOff + ceFlagBytes + ceCountBytes // the area in the signal area: right after the copy-engine counters
	pceReadyOff = 0                                      // ready[maxRanks] u32: rank p's last Recv from us ready
	pceDoneOff  = 128                                    // done[maxRanks] u32: rank p's Sends to us landed up to k
	pceRxOff    = 256                                    // rx[maxRanks][pceRing] offers of rank p's Recvs from us (p2pcecheck.go)
	pceTxOff    = pceRxOff + maxRanks*pceRing*pceOfferBytes
	pceBytes    = pceTxOff + maxRanks*pceRing*pceOfferBytes // tx: offers of rank p's Sends to us
	pceRing     = 8
	// An offer: n, ce | offset bits 32-46 <<1 | bytes bits 32-47 <<16,
	// offset low, bytes low (u32 each; pceOffer).
	pceOfferBytes = 16
)

// The area lies between the copy-engine counters and the kernels' p2p
// records, and its arrays do not overlap (a negative array length fails
// the build).
var (
	_ [pceOff - (ceFlagOff + ceFlagBytes + ceCountBytes)]struct{}
	_ [p2pOffset - (pceOff + pceBytes)]struct{}
	_ [pceDoneOff - pceReadyOff - 4*maxRanks]struct{}
	_ [pceRxOff - pceDoneOff - 4*maxRanks]struct{}
	_ [pceTxOff - pceRxOff - maxRanks*pceRing*pceOfferBytes]struct{}
)

// pceState is the copy-engine point-to-point state (guarded by Backend.mu,
// but the counters, which Abort's rescue reads, and the handles, which
// copyEngine.mu guards with the others).
type pceState struct {
	on    bool // GOCCL_TUNE p2pce > 0 (agreed at New)
	check bool // GOCCL_CHECK: offers exchanged per op (p2pcecheck.go)
	// sendK[p], recvK[p]: copy-engine Sends to and Recvs from rank p so
	// far; sendN, recvN: every op of the application's groups with rank p
	// under the check (the offers' numbers).
	sendK, recvK [maxRanks]atomic.Uint32
	sendN, recvN [maxRanks]atomic.Uint32

	side  [maxRanks]cuda.Stream // rank p's copies (pceEnqueue: the first peer's may go on the group's stream)
	joins [maxRanks]cuda.Event  // side[p] done
	fork  cuda.Event
	chk   cuda.Stream // the check's reads of the peers' offers

	// Per group (reused): the ops with a peer, and which of the group's
	// ops the copy engines take.
	ops  []pceOp
	isCE []bool
	// lastRecv[p], firstSend[p]: the group's last copy-engine Recv from
	// and first Send to p (k, 0: none); sided[p]: its Sends to p went on
	// side[p] (pceEnqueue), to be joined (pceFinish).
	lastRecv, firstSend [maxRanks]uint32
	sided               [maxRanks]bool
	// The check's pinned read-back, room for hostOps offers.
	host    unsafe.Pointer
	hostOps int
}

// pceOp is one Send or Recv of a group with another rank.
type pceOp struct {
	i     int // index in the group
	peer  int
	send  bool
	ce    bool
	k, n  uint32 // copy-engine number (ce), offer number (check)
	reg   *registration
	off   uintptr // the buffer's offset in reg
	bytes uint64
	buf   uintptr
}

// agreeP2PCE fails New on every rank when the path is on and the ranks
// disagree on GOCCL_CHECK: a checking rank would wait for offers its
// peers never make. The tuning is agreed already, so every rank or none
// exchanges here.
func (be *Backend) agreeP2PCE(ctx context.Context) error {
	pc := &be.ce.p2p
	if !pc.on {
		return nil
	}
	mine := byte(0)
	if pc.check {
		mine = 1
	}
	all, err := be.boot.AllGather(ctx, []byte{mine})
	if err != nil {
		return fmt.Errorf("gpu backend: agree on GOCCL_CHECK: %w", err)
	}
	for r, m := range all {
		if len(m) != 1 || m[0] != mine {
			return fmt.Errorf("gpu backend: GOCCL_TUNE p2pce is on and rank %d runs with GOCCL_CHECK=%d, rank %d with another: every rank must check alike: %w",
				be.rank, mine, r, collectives.ErrInvalidArgument)
		}
	}
	return nil
}

// pceArea is rank r's area as mapped here (r == be.rank: our own).
func (be *Backend) pceArea(r int) uintptr {
	if r == be.rank {
		return be.ce.local - ceFlagOff + pceOff
	}
	return be.ce.peers[r] - ceFlagOff + pceOff
}

// pceTakes is the path of one op with another rank: the copy engines when
// its buffer of at least the threshold lies in a registration every peer
// maps. be.mu is held.
func (be *Backend) pceTakes(x *pceOp) {
	if int64(x.bytes) < be.tune.p2pCE || len(be.regs) == 0 {
		return
	}
	r := be.lookup(x.buf, x.bytes)
	if r == nil || r.region == nil || len(r.region.Peers) != be.nranks {
		return
	}
	x.ce, x.reg, x.off = true, r, x.buf-r.base
}

// runP2PCE is RunGroup's copy-engine phase (be.mu held), on main once the
// group's streams are joined into it and before the launches: it takes
// the ops that qualify out of the kernel's lanes (st.sends, st.recvs) and
// enqueues them; where kernel launches follow, RunGroup ends the phase
// after them (pceGroup.pending, finishP2PCE). A failure once the peers
// may be waiting aborts the communicator. With the recorder on, a copy
// engine has no clock of its own: the group's start is stamped before its
// first copy-engine op where no collective of the group stores it
// (pceGroup.startStamped: the launches then store none), and its end
// after the phase's end (pceGroup.pending: the launches store none).
func (be *Backend) runP2PCE(ctx context.Context, g *collectives.Group, main cuda.Stream) (pg pceGroup, err error) {
	pc := &be.ce.p2p
	if !pc.on || !be.ce.ok || g.Kind != collectives.PlainGroup || be.nranks < 2 {
		return pg, nil
	}
	pc.ops = pc.ops[:0]
	some := false
	for i := range g.P2P {
		o := &g.P2P[i]
		if o.Peer == be.rank {
			continue // the kernel's self-copy lane
		}
		x := pceOp{i: i, peer: o.Peer, send: o.Kind == collectives.SendOp, bytes: uint64(o.Bytes()), buf: o.Buf}
		be.pceTakes(&x)
		some = some || x.ce
		pc.ops = append(pc.ops, x)
	}
	if !some && !pc.check {
		return pg, nil
	}
	// A graph would freeze the host-side numbers: a captured group runs
	// on the kernels (every rank captures alike). The group's other
	// streams are joined into main already, so main is captured when any
	// of them is.
	capturing, err := be.drv.StreamIsCapturing(be.ctx, main)
	if err != nil {
		be.Abort(fmt.Errorf("gpu backend: point-to-point: stream capture status: %w", err))
		return pg, be.abortErr()
	}
	if capturing {
		return pg, nil
	}
	be.pceNumber()
	// Abort stores aborted and then reads the counters; we stored the
	// counters and now read aborted: its rescue covers them or we stop.
	if be.aborted.Load() {
		return pg, be.abortErr()
	}
	if pc.check {
		if err := be.pceCheck(ctx, main); err != nil {
			return pg, err
		}
	}
	if !some {
		return pg, nil
	}
	if be.pceUnlane(len(g.P2P)) && len(g.Colls) == 0 {
		be.last.Algo = collectives.CopyEngine
	}
	seq := groupStampSeq(g)
	if len(g.Colls) == 0 {
		be.ceStamp(main, seq, ceStampStart)
	}
	pg = pceGroup{startStamped: len(g.Colls) == 0, pending: be.p2p.launches() > 0}
	if err := be.pceEnqueue(main, pg.pending); err != nil {
		be.Abort(fmt.Errorf("gpu backend: copy-engine point-to-point not enqueued: %w", err))
		return pg, be.abortErr()
	}
	if !pg.pending {
		return pg, be.finishP2PCE(g, main)
	}
	return pg, nil
}

// pceGroup says what the copy-engine phase of a group left to RunGroup.
type pceGroup struct {
	startStamped bool // the group's start is stamped: the launches store none
	pending      bool // the launches come before the phase's end (finishP2PCE)
}

// finishP2PCE ends a group's copy-engine phase (after its launches when
// pending) and stamps the group's end.
func (be *Backend) finishP2PCE(g *collectives.Group, main cuda.Stream) error {
	if err := be.pceFinish(main); err != nil {
		be.Abort(fmt.Errorf("gpu backend: copy-engine point-to-point not enqueued: %w", err))
		return be.abortErr()
	}
	be.ceStamp(main, groupStampSeq(g), ceStampEnd)
	return nil
}

// pceNumber gives the group's ops their numbers, in group order per pair
// and direction.
func (be *Backend) pceNumber() {
	pc := &be.ce.p2p
	for j := range pc.ops {
		x := &pc.ops[j]
		k, n := &pc.recvK[x.peer], &pc.recvN[x.peer]
		if x.send {
			k, n = &pc.sendK[x.peer], &pc.sendN[x.peer]
		}
		if pc.check {
			x.n = n.Add(1)
		}
		if x.ce {
			x.k = k.Add(1)
		}
	}
}

// pceUnlane drops the copy-engine ops from the kernel's lanes and reports
// whether every op of the group went.
func (be *Backend) pceUnlane(nops int) (all bool) {
	pc, st := &be.ce.p2p, &be.p2p
	if cap(pc.isCE) < nops {
		pc.isCE = make([]bool, nops)
	}
	pc.isCE = pc.isCE[:nops]
	clear(pc.isCE)
	all = len(pc.ops) == nops
	for j := range pc.ops {
		pc.isCE[pc.ops[j].i] = pc.ops[j].ce
		all = all && pc.ops[j].ce
	}
	for _, byPeer := range [2]*[maxRanks][]int32{&st.sends, &st.recvs} {
		for p := range be.nranks {
			kept := byPeer[p][:0]
			for _, i := range byPeer[p] {
				if !pc.isCE[i] {
					kept = append(kept, i)
				}
			}
			byPeer[p] = kept
		}
	}
	return all
}

// pceEnqueue enqueues the copy-engine ops' readies and Sends; pceFinish
// ends them. In a group with kernel launches too (mixed) every peer's
// Sends go on a side stream and pceFinish comes after the launches, so
// that no kernel op of the group queues behind a copy-engine wait: the
// peer may need that op done before it raises the flag the wait is for
// (a peer that split the same ops over two groups runs its first group's
// kernel first).
func (be *Backend) pceEnqueue(main cuda.Stream, mixed bool) error {
	pc := &be.ce.p2p
	pc.lastRecv, pc.firstSend, pc.sided = [maxRanks]uint32{}, [maxRanks]uint32{}, [maxRanks]bool{}
	for j := range pc.ops {
		x := &pc.ops[j]
		switch {
		case !x.ce:
		case x.send && pc.firstSend[x.peer] == 0:
			pc.firstSend[x.peer] = x.k
		case !x.send:
			pc.lastRecv[x.peer] = x.k
		}
	}
	for i := 1; i < be.nranks; i++ {
		p := (be.rank + i) % be.nranks
		if pc.lastRecv[p] == 0 {
			continue
		}
		at := be.pceArea(p) + pceReadyOff + 4*uintptr(be.rank)
		if err := be.drv.StreamWriteValue32(be.ctx, main, cuda.DevicePtr(at), pc.lastRecv[p]); err != nil {
			return fmt.Errorf("ready to rank %d: %w", p, err)
		}
	}
	// The first peer's copies on main where nothing follows them there,
	// the others' each on its side stream, forked once the readies are out.
	peers := 0
	for p := range be.nranks {
		if pc.firstSend[p] != 0 {
			peers++
		}
	}
	if peers > 1 || (mixed && peers > 0) {
		if err := be.drv.EventRecord(be.ctx, pc.fork, main); err != nil {
			return fmt.Errorf("fork: %w", err)
		}
	}
	onMain := !mixed
	for i := 1; i < be.nranks; i++ {
		p := (be.rank + i) % be.nranks
		if pc.firstSend[p] == 0 {
			continue
		}
		s := main
		if !onMain {
			s = pc.side[p]
			if err := be.drv.StreamWaitEvent(be.ctx, s, pc.fork); err != nil {
				return fmt.Errorf("fork: %w", err)
			}
			pc.sided[p] = true
		}
		if err := be.pceSends(s, p); err != nil {
			return err
		}
		onMain = false
	}
	return nil
}

// pceFinish joins the side streams of pceEnqueue's Sends into main and
// enqueues the Recvs' waits.
func (be *Backend) pceFinish(main cuda.Stream) error {
	pc := &be.ce.p2p
	for p := range be.nranks {
		if pc.sided[p] {
			if err := be.joinInto(main, pc.side[p], pc.joins[p]); err != nil {
				return err
			}
		}
	}
	for i := 1; i < be.nranks; i++ {
		p := (be.rank + i) % be.nranks
		if pc.lastRecv[p] == 0 {
			continue
		}
		at := be.pceArea(be.rank) + pceDoneOff + 4*uintptr(p)
		if err := be.drv.StreamWaitValue32(be.ctx, main, cuda.DevicePtr(at), pc.lastRecv[p], true); err != nil {
			return fmt.Errorf("wait for rank %d: %w", p, err)
		}
	}
	return nil
}

// pceSends enqueues on s the group's copy-engine Sends to p, in order.
func (be *Backend) pceSends(s cuda.Stream, p int) error {
	pc := &be.ce.p2p
	ready := be.pceArea(be.rank) + pceReadyOff + 4*uintptr(p)
	done := be.pceArea(p) + pceDoneOff + 4*uintptr(be.rank)
	for j := range pc.ops {
		x := &pc.ops[j]
		if !x.ce || !x.send || x.peer != p {
			continue
		}
		if err := be.drv.StreamWaitValue32(be.ctx, s, cuda.DevicePtr(ready), x.k, true); err != nil {
			return fmt.Errorf("wait for rank %d: %w", p, err)
		}
		dst := x.reg.region.Peers[p] + x.off
		if err := be.drv.MemcpyAsync(be.ctx, cuda.DevicePtr(dst), cuda.DevicePtr(x.buf), x.bytes, s); err != nil {
			return fmt.Errorf("copy to rank %d: %w", p, err)
		}
		if err := be.drv.StreamWriteValue32(be.ctx, s, cuda.DevicePtr(done), x.k); err != nil {
			return fmt.Errorf("signal rank %d: %w", p, err)
		}
	}
	return nil
}

// pceStreams and pceEvents are the handles setupCE creates and releaseCE
// destroys with the copy engines' own (none when the path is off).
func (ce *copyEngine) pceStreams(s []*cuda.Stream) []*cuda.Stream {
	if !ce.p2p.on {
		return s
	}
	for p := range ce.p2p.side {
		s = append(s, &ce.p2p.side[p])
	}
	return append(s, &ce.p2p.chk)
}

func (ce *copyEngine) pceEvents(e []*cuda.Event) []*cuda.Event {
	if !ce.p2p.on {
		return e
	}
	for p := range ce.p2p.joins {
		e = append(e, &ce.p2p.joins[p])
	}
	return append(e, &ce.p2p.fork)
}

// rescueP2PCE is Abort's best effort for the copy-engine point-to-point
// waits (ce.mu held): every flag of this rank's area goes past the
// numbers issued with its rank, as rescueCE does for the collectives'.
func (be *Backend) rescueP2PCE() {
	pc := &be.ce.p2p
	if !pc.on || be.ce.rescue == 0 {
		return
	}
	local := be.pceArea(be.rank)
	set := func(at uintptr, v uint32, words uint64) bool {
		if err := be.drv.MemsetD32Async(be.ctx, cuda.DevicePtr(at), v+ceRescue, words, be.ce.rescue); err != nil {
			be.log.Warn("goccl: gpu backend: abort could not release copy-engine point-to-point waits", "rank", be.rank, "err", err)
			return false
		}
		return true
	}
	released := false
	for p := range be.nranks {
		// Our Sends to p wait on ready[p], our Recvs from p on done[p],
		// our checks on p's offers.
		sk, rk, sn, rn := pc.sendK[p].Load(), pc.recvK[p].Load(), pc.sendN[p].Load(), pc.recvN[p].Load()
		ring := uint64(pceRing * pceOfferBytes / 4)
		if (sk != 0 && !set(local+pceReadyOff+4*uintptr(p), sk, 1)) ||
			(rk != 0 && !set(local+pceDoneOff+4*uintptr(p), rk, 1)) ||
			(sn != 0 && !set(local+pceRxOff+uintptr(p*pceRing*pceOfferBytes), sn, ring)) ||
			(rn != 0 && !set(local+pceTxOff+uintptr(p*pceRing*pceOfferBytes), rn, ring)) {
			return
		}
		released = released || sk|rk|sn|rn != 0
	}
	if released {
		be.log.Info("goccl: gpu backend: abort released copy-engine point-to-point waits", "rank", be.rank)
	}
}

package host

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/goccl/goccl/collectives"
)

// Point-to-point operations do not take part in the lock-step barriers:
// a Send from rank 0 to rank 1 must not involve rank 2. They travel over
// one channel per ordered pair of ranks (the pair of a rank with itself
// included, so that a self Send pairs with a self Recv like any other).
// The channel s->d lives in the sender's segment, after the staging
// halves: a control block and a ring of chanSlots slots, each a 64-byte
// header and data. The sender fills slot posted%chanSlots and advances
// posted; the receiver empties slot consumed%chanSlots and advances
// consumed; each writes only its own counter, on its own cache line.
// Large messages are cut into slot-sized chunks, so the copies in and out
// overlap.
//
// Every chunk's header carries the pair's message number (the k-th Send
// from s to d is message k, and so is the k-th Recv on d from s: NCCL's
// matching rule) and the sender's count, type and byte count, so that the
// receiver checks the sizes before it copies anything. On a mismatch the
// receiver drains the sender's chunks without copying them (the channel
// stays in step) and, before it frees the message's last slot, writes its
// own count, type and the message number into that slot's header (the
// reject words), which the sender reads before it reuses the slot.
//
// A Send whose message fits the ring (eagerBytes: every chunk can be in
// a slot at once) is eager, as NCCL's Sends that fit its buffers are: it
// returns once every chunk is in the ring, without its Recv, so two ranks
// that each Send before they Recv do not deadlock. A larger Send is a
// rendezvous: it returns once its receiver emptied every chunk. The sender
// learns of a size mismatch of a rendezvous Send at once, of an eager one
// when it finds the reject words (before reusing the slot, or at the end
// of any later group: lateMismatch), and that group returns the error
// naming both counts. A sender starts a message to a peer only after its
// earlier messages to that peer are all in the ring.
//
// A message from a rank to itself whose Send and Recv are in the same
// group is one copy, not two through the ring (selfCopy); an eager self
// Send outside a group waits in the ring for the Recv.
//
// Any change of a channel rings the doorbell of the rank on the other
// side (a counter in its segment); a rank with nothing to do sleeps on
// its own doorbell, so one futex word serves every channel it waits on.

const (
	offBell     = 1024 // this rank's doorbell: bumped when a channel to or from it moves
	offBellWait = 1088 // sleepers on the doorbell

	chanCtrl  = 128 // a channel's control block: the posted line, the consumed line
	offPosted = 0   // slots filled, by the sender
	offConsum = 64  // slots emptied, by the receiver

	chanSlots = 4  // slots per ring: a power of two
	slotHdr   = 64 // header bytes of a slot
	minRing   = chanSlots * 2 * slotHdr
	pageBytes = 4096
	hdrSeq    = 0  // uint64: the pair's message number, from 1
	hdrType   = 8  // uint32: the sender's datatype
	hdrGKind  = 12 // uint32: the kind of the sender's group (AllToAll, Gather, ...)
	hdrCount  = 16 // uint64: the sender's element count
	hdrBytes  = 24 // uint64: the sender's byte count
	hdrGSeq   = 32 // uint64: the call number of the sender's group
	// The reject words, by the receiver, in the last slot of a message
	// whose size it rejected.
	hdrRejSeq = 40 // uint64: the rejected message's number
	hdrRejCnt = 48 // uint64: the receiver's count
	hdrRejTyp = 56 // uint32: the receiver's datatype
)

// ringBytes is the ring of each ordered pair: the staging size split over
// the destinations, so that every rank's shared memory grows by about one
// staging half whatever the number of ranks.
func ringBytes(staging, n int) int {
	return max(staging/n/lineBytes*lineBytes, minRing)
}

// p2pBytes is the size of the channels' region of each segment.
func p2pBytes(staging, n int) int {
	return ctrlRegion(n) + n*ringBytes(staging, n)
}

func ctrlRegion(n int) int { return (n*chanCtrl + pageBytes - 1) / pageBytes * pageBytes }

// channel is one direction of one pair, as this rank maps it.
type channel struct {
	posted, consumed *uint32
	slots            [chanSlots][]byte
}

// eagerMsg is an eager Send whose receiver has not yet freed its last
// slot: the sender still has to read that slot's reject words.
type eagerMsg struct {
	seq   uint64
	end   uint32 // the ring position after its last chunk
	count int
	typ   collectives.DataType
}

// inFlight is the queue of one peer's eager messages, oldest first. Every
// one holds a distinct slot not yet freed when it is queued or kept, so
// at most chanSlots are queued.
type inFlight struct {
	q       [chanSlots]eagerMsg
	head, n int
}

// pairs is the point-to-point state of one rank.
type pairs struct {
	slotData int       // data bytes per slot
	out, in  []channel // out[q]: this rank to q; in[q]: q to this rank
	bells    []*uint32 // every rank's doorbell
	bellWait []*uint32
	// Per peer: messages begun and finished in each direction, and this
	// rank's own counter of each channel (only it writes that word).
	sendSeq, sendDone, recvSeq, recvDone []uint64
	posted, consumed                     []uint32
	eager                                []inFlight // per peer
	inFlight                             int        // eager messages queued, over all peers
	late                                 error      // the first mismatch of an eager Send not yet returned
	eagerBytes                           int        // the largest eager Send
	waiting                              bool       // this rank's wait is published (waitchain.go)
	ops                                  []pending  // reused by every group
	kind                                 collectives.GroupKind
	gseq                                 uint64 // the running group's kind and call number
}

// initPairs maps the channels: base is where the region starts in every
// segment.
func (b *backend) initPairs(base int) {
	n := b.n
	ring := ringBytes(b.cfg.StagingBytes, n)
	slot := ring / chanSlots / lineBytes * lineBytes
	p := &b.p2p
	p.slotData = slot - slotHdr
	p.eagerBytes = chanSlots * p.slotData
	p.eager = make([]inFlight, n)
	p.out, p.in = make([]channel, n), make([]channel, n)
	p.bells, p.bellWait = make([]*uint32, n), make([]*uint32, n)
	for _, s := range []*[]uint64{&p.sendSeq, &p.sendDone, &p.recvSeq, &p.recvDone} {
		*s = make([]uint64, n)
	}
	p.posted, p.consumed = make([]uint32, n), make([]uint32, n)
	ch := func(m []byte, d int) channel {
		c := m[base+d*chanCtrl : base+(d+1)*chanCtrl]
		c0 := channel{posted: word(c, offPosted), consumed: word(c, offConsum)}
		r := base + ctrlRegion(n) + d*ring
		for i := range c0.slots {
			c0.slots[i] = m[r+i*slot : r+(i+1)*slot]
		}
		return c0
	}
	for q := 0; q < n; q++ {
		m := b.seg.Peer(q)
		p.out[q] = ch(b.seg.Peer(b.rank), q)
		p.in[q] = ch(m, b.rank)
		p.bells[q] = word(m, offBell)
		p.bellWait[q] = word(m, offBellWait)
	}
}

// ring tells rank q that a channel it shares with this rank moved; the
// system call happens only when q sleeps.
func (p *pairs) ring(q int) {
	atomic.AddUint32(p.bells[q], 1)
	if atomic.LoadUint32(p.bellWait[q]) != 0 {
		futexWake(p.bells[q])
	}
}

// wakeAll wakes every rank sleeping on its doorbell (an abort: they must
// see it at once, not at the end of their bounded sleep).
func (p *pairs) wakeAll() {
	for _, w := range p.bells {
		atomic.AddUint32(w, 1)
		futexWake(w)
	}
}

// pending is one point-to-point operation of the running group.
type pending struct {
	op    *collectives.P2P
	buf   []byte
	seq   uint64 // the pair's message number
	off   int    // bytes moved so far
	total int    // Recv: the sender's byte count, -1 until its first chunk
	// Recv on a size mismatch: the sender's count and type.
	theirCount int
	theirType  collectives.DataType
	posted     bool // Send: every chunk is in the ring
	started    bool // a chunk went through the ring
	done       bool
	err        error
}

// active reports whether o is the next message of its pair: earlier
// messages between the two ranks in the same direction have finished.
func (p *pairs) active(o *pending) bool {
	if o.op.Kind == collectives.SendOp {
		return o.seq == p.sendDone[o.op.Peer]+1
	}
	return o.seq == p.recvDone[o.op.Peer]+1
}

// advanceSend fills every free slot with o's next chunks. An eager o
// finishes once they are all in the ring, a rendezvous o once the
// receiver has emptied them all. It reports whether anything moved.
func (b *backend) advanceSend(o *pending) bool {
	p := &b.p2p
	q := o.op.Peer
	ch := &p.out[q]
	pos := p.posted[q]
	cons := atomic.LoadUint32(ch.consumed)
	// Before a slot is refilled: the reject words of the eager messages
	// whose slots the receiver freed.
	b.confirm(q, cons)
	moved := false
	for !o.posted && pos-cons < chanSlots {
		s := ch.slots[pos%chanSlots]
		m := min(p.slotData, len(o.buf)-o.off)
		le := binary.LittleEndian
		le.PutUint64(s[hdrSeq:], o.seq)
		le.PutUint32(s[hdrType:], uint32(o.op.Type))
		le.PutUint64(s[hdrCount:], uint64(o.op.Count))
		le.PutUint64(s[hdrBytes:], uint64(len(o.buf)))
		le.PutUint32(s[hdrGKind:], uint32(p.kind))
		le.PutUint64(s[hdrGSeq:], p.gseq)
		copy(s[slotHdr:slotHdr+m], o.buf[o.off:o.off+m])
		o.started = true
		o.off += m
		o.posted = o.off == len(o.buf)
		pos++
		p.posted[q] = pos
		atomic.StoreUint32(ch.posted, pos)
		p.ring(q)
		moved = true
	}
	if !o.posted {
		return moved
	}
	if len(o.buf) <= p.eagerBytes {
		f := &p.eager[q]
		f.q[(f.head+f.n)%chanSlots] = eagerMsg{seq: o.seq, end: pos, count: o.op.Count, typ: o.op.Type}
		f.n++
		p.inFlight++
	} else {
		if atomic.LoadUint32(ch.consumed) != pos {
			return moved
		}
		if r, ok := b.rejected(q, pos, o.seq); ok {
			o.err = b.mismatch(o.op, b.rank, o.op.Count, o.op.Type, q, r.count, r.typ, o.seq)
		}
	}
	o.done = true
	p.sendDone[q]++
	return true
}

// rejected reads the reject words of message seq to q, whose last chunk
// ended at ring position end and has been emptied.
func (b *backend) rejected(q int, end uint32, seq uint64) (eagerMsg, bool) {
	s := b.p2p.out[q].slots[(end-1)%chanSlots]
	le := binary.LittleEndian
	if le.Uint64(s[hdrRejSeq:]) != seq {
		return eagerMsg{}, false
	}
	return eagerMsg{seq: seq, count: int(le.Uint64(s[hdrRejCnt:])), typ: collectives.DataType(le.Uint32(s[hdrRejTyp:]))}, true
}

// confirm retires q's eager messages whose last slot the receiver freed
// (cons: its consumed counter), keeping the first mismatch among them
// for lateMismatch.
func (b *backend) confirm(q int, cons uint32) {
	p := &b.p2p
	f := &p.eager[q]
	for f.n > 0 {
		e := f.q[f.head]
		if int32(cons-e.end) < 0 {
			return
		}
		if r, ok := b.rejected(q, e.end, e.seq); ok && p.late == nil {
			op := collectives.P2P{Kind: collectives.SendOp, Peer: q, Count: e.count, Type: e.typ}
			p.late = b.mismatch(&op, b.rank, e.count, e.typ, q, r.count, r.typ, e.seq)
		}
		f.head = (f.head + 1) % chanSlots
		f.n--
		p.inFlight--
	}
}

// lateMismatch returns, once, the first size mismatch of an eager Send
// whose receiver has rejected it by now. It does not wait: a receiver
// that has not reached its Recv yet is found by a later group.
func (b *backend) lateMismatch() error {
	p := &b.p2p
	for q := 0; p.inFlight > 0 && q < b.n; q++ {
		if p.eager[q].n > 0 {
			b.confirm(q, atomic.LoadUint32(p.out[q].consumed))
		}
	}
	err := p.late
	p.late = nil
	return err
}

// advanceRecv empties every filled slot of o's channel into o's buffer;
// it fails only on a broken protocol (a chunk of another message).
func (b *backend) advanceRecv(o *pending) (bool, error) {
	p := &b.p2p
	q := o.op.Peer
	ch := &p.in[q]
	cons := p.consumed[q]
	pos := atomic.LoadUint32(ch.posted)
	moved := false
	for !o.done && cons != pos {
		s := ch.slots[cons%chanSlots]
		le := binary.LittleEndian
		if seq := le.Uint64(s[hdrSeq:]); seq != o.seq {
			return moved, b.fail(&collectives.PeerError{Rank: q, Cause: fmt.Errorf(
				"%w: host: rank %d: Recv from rank %d: message %d arrived, want %d", collectives.ErrAborted, b.rank, q, seq, o.seq)})
		}
		if o.total < 0 {
			// Both calls numbered (AllToAll, Gather, ...): a rank that
			// skipped or added one meets its peer in another call, and the
			// communicator cannot go on.
			k, gs := collectives.GroupKind(le.Uint32(s[hdrGKind:])), le.Uint64(s[hdrGSeq:])
			if k != collectives.PlainGroup && p.kind != collectives.PlainGroup && (k != p.kind || gs != p.gseq) {
				return moved, b.fail(&collectives.PeerError{Rank: q, Cause: fmt.Errorf(
					"%w: %w: host: rank %d is in %s (call %d), rank %d in %s (call %d)",
					collectives.ErrAborted, collectives.ErrCallMismatch, q, k, gs, b.rank, p.kind, p.gseq)})
			}
			o.started = true
			o.total = int(le.Uint64(s[hdrBytes:]))
			if o.total != len(o.buf) {
				o.theirCount = int(le.Uint64(s[hdrCount:]))
				o.theirType = collectives.DataType(le.Uint32(s[hdrType:]))
			}
		}
		m := min(p.slotData, o.total-o.off)
		if o.total == len(o.buf) {
			copy(o.buf[o.off:o.off+m], s[slotHdr:slotHdr+m])
		}
		o.off += m
		if o.off == o.total && o.total != len(o.buf) {
			// The reject words go in before the slot is freed.
			le.PutUint64(s[hdrRejSeq:], o.seq)
			le.PutUint64(s[hdrRejCnt:], uint64(o.op.Count))
			le.PutUint32(s[hdrRejTyp:], uint32(o.op.Type))
		}
		cons++
		p.consumed[q] = cons
		atomic.StoreUint32(ch.consumed, cons)
		p.ring(q)
		moved = true
		if o.off == o.total {
			o.done = true
			p.recvDone[q]++
			if o.total != len(o.buf) {
				o.err = b.mismatch(o.op, q, o.theirCount, o.theirType, b.rank, o.op.Count, o.op.Type, o.seq)
			}
		}
	}
	return moved, nil
}

// mismatch is the error both sides of a pair return when a Send and its
// Recv disagree on the size.
func (b *backend) mismatch(op *collectives.P2P, from, sent int, st collectives.DataType, to, want int, rt collectives.DataType, seq uint64) error {
	dir := "to"
	if op.Kind == collectives.RecvOp {
		dir = "from"
	}
	return fmt.Errorf("host: rank %d: %s %s rank %d: rank %d sends %d %s (%d bytes), rank %d receives %d %s (%d bytes), message %d of the pair: %w",
		b.rank, op.Kind, dir, op.Peer, from, sent, st, sent*st.Size(), to, want, rt, want*rt.Size(), seq, collectives.ErrInvalidCount)
}

// selfCopy finishes a message from this rank to itself with one copy
// when its Send and Recv are both in st, both next on the self pair and
// neither begun in the ring, and their sizes agree (a mismatch takes the
// ring, which reports it). It reports whether it did.
func (b *backend) selfCopy(st []pending, o *pending) bool {
	if o.op.Peer != b.rank || o.started {
		return false
	}
	want := collectives.RecvOp
	if o.op.Kind == collectives.RecvOp {
		want = collectives.SendOp
	}
	for i := range st {
		q := &st[i]
		if q.op.Kind != want || q.op.Peer != b.rank || q.seq != o.seq || q.done {
			continue
		}
		if q.started || len(q.buf) != len(o.buf) || !b.p2p.active(q) {
			return false
		}
		if o.op.Kind == collectives.SendOp {
			copy(q.buf, o.buf)
		} else {
			copy(o.buf, q.buf)
		}
		o.done, q.done = true, true
		b.p2p.sendDone[b.rank]++
		b.p2p.recvDone[b.rank]++
		return true
	}
	return false
}

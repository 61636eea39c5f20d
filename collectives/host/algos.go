package host

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// Every collective runs in rounds, one per chunk of staging: each rank
// writes what its peers need into its staging half of the next step's
// parity, arrives, waits for all, and reads its peers' halves. The first
// round also publishes and checks the call's descriptor.

// A call's descriptor: collective, type and op (a byte each), root,
// count, and the call's number (Args.Seq, counted alike on every rank).
const descBytes = 24

// sync is the barrier of a round; on the first one of a call it also
// checks that every rank is in the same call, and makes it the same way.
// Two ranks that meet in calls of different numbers (one skipped a call,
// or returned at once from a count-0 call its peers did not make with 0)
// both fail here, with ErrCallMismatch naming both calls.
func (b *backend) sync(ctx context.Context, a *collectives.Args, first *bool) error {
	if !*first {
		return b.barrier(ctx)
	}
	*first = false
	p := b.parity()
	encodeDesc(b.desc[p][b.rank], a)
	b.desc[p][b.rank][3] = b.descFlag
	if err := b.barrier(ctx); err != nil {
		return err
	}
	mine := b.desc[p][b.rank]
	for q := 0; q < b.n; q++ {
		theirs := b.desc[p][q]
		if q == b.rank || descEqual(theirs, mine) {
			continue
		}
		if descSeq(theirs) != descSeq(mine) {
			return fmt.Errorf("%w: host: rank %d is in call #%d (%s), rank %d in #%d (%s)",
				collectives.ErrCallMismatch, q, descSeq(theirs), describeDesc(theirs), b.rank, descSeq(mine), describeDesc(mine))
		}
		return fmt.Errorf("%w: host: mismatched collective calls: rank %d called %s, rank %d called %s",
			collectives.ErrInvalidArgument, q, describeDesc(theirs), b.rank, describeDesc(mine))
	}
	return nil
}

func encodeDesc(d []byte, a *collectives.Args) {
	op, root := a.Op, a.Root
	if !a.Coll.Reduces() {
		op = 0
	}
	if !a.Coll.Rooted() {
		root = 0
	}
	d = d[:descBytes]
	d[0], d[1], d[2], d[3] = byte(a.Coll), byte(a.Type), byte(op), 0
	binary.LittleEndian.PutUint32(d[4:], uint32(root))
	binary.LittleEndian.PutUint64(d[8:], uint64(a.Count))
	binary.LittleEndian.PutUint64(d[16:], a.Seq)
}

func descSeq(d []byte) uint64 { return binary.LittleEndian.Uint64(d[16:]) }

// descEqual compares two descriptors as three words, inline, where a
// string comparison calls the runtime's memequal.
func descEqual(x, y []byte) bool {
	le := binary.LittleEndian
	x, y = x[:descBytes], y[:descBytes]
	return le.Uint64(x) == le.Uint64(y) && le.Uint64(x[8:]) == le.Uint64(y[8:]) && le.Uint64(x[16:]) == le.Uint64(y[16:])
}

func describeDesc(d []byte) string {
	le := binary.LittleEndian
	c := collectives.Collective(d[0])
	s := fmt.Sprintf("%s of %d %s", c, le.Uint64(d[8:]), collectives.DataType(d[1]))
	if c.Reduces() {
		s += " " + collectives.Op(d[2]).String()
	}
	if c.Rooted() {
		s += fmt.Sprintf(" root %d", le.Uint32(d[4:]))
	}
	if d[3] == descDirect {
		s += " (with buffers from Alloc live)"
	}
	return s
}

// span is the byte range [lo, hi) of rank q's part of an m-byte chunk of
// es-byte elements, parts aligned to cache lines.
func span(m, n, q int) (lo, hi int) {
	per := (m + n - 1) / n
	per = (per + lineBytes - 1) / lineBytes * lineBytes
	lo = min(q*per, m)
	return lo, min(lo+per, m)
}

// sources lists every rank's bytes [lo, hi) of staging half p, except
// this rank's, which is own. The order is by rank on every rank, so that
// floating-point results do not depend on which rank reduces. Only rank
// 0's source may alias the destination of a reduceFunc.
func (b *backend) sources(own []byte, p, lo, hi int) [][]byte {
	return b.sourcesIn(b.stage[p], own, lo, hi)
}

// sourcesIn is sources from area[q] (a staging half or the boxes of one
// parity) for every rank q.
func (b *backend) sourcesIn(area [][]byte, own []byte, lo, hi int) [][]byte {
	s := b.srcs[:0]
	for q := 0; q < b.n; q++ {
		if q == b.rank {
			s = append(s, own)
		} else {
			s = append(s, area[q][lo:hi])
		}
	}
	return s
}

// boxLinesOf is how many cache lines after the counter's a call of m
// bytes in the box spans (0 for calls in the staging halves).
func boxLinesOf(m int) int {
	if m > boxData {
		return 0
	}
	return (boxHead + m - 1) / lineBytes
}

// area is where the data of a round of m bytes goes at parity p: the
// boxes, in the descriptor's cache line and those after it, when it fits
// there, else the staging halves.
func (b *backend) area(p, m int) [][]byte {
	if m <= boxData {
		return b.box[p]
	}
	return b.stage[p]
}

// allReduceOneShot: every rank stages its chunk; every rank reduces all.
// With all false it is Reduce: only the root reduces.
func (b *backend) allReduceOneShot(ctx context.Context, a *collectives.Args, all bool) error {
	total := a.Count * a.Type.Size()
	if total <= boxData {
		return b.allReduceBox(ctx, a, total, all)
	}
	send, recv := hostBytes(a.Send, total), hostBytes(a.Recv, total)
	red := reducer(a.Type, a.Op)
	reduces := all || b.rank == a.Root
	first := true
	for off := 0; off < total; off += b.cfg.StagingBytes {
		m := min(b.cfg.StagingBytes, total-off)
		p := b.parity()
		area := b.area(p, total)
		mine := area[b.rank][:m]
		copyCached(mine, send[off:off+m])
		b.boxLines = boxLinesOf(total)
		err := b.sync(ctx, a, &first)
		b.boxLines = 0
		if err != nil {
			return err
		}
		// The staged copy, not send, is this rank's source: send may be
		// recv, and the reduction visits ranks in order.
		if reduces {
			red(recv[off:off+m], b.sourcesIn(area, mine, 0, m), b.n, &b.sc)
		}
	}
	return nil
}

// allReduceTwoShot is a reduce-scatter then all-gather per chunk, one
// step per chunk: at each step every rank publishes, in its staging half
// of the step's parity, the parts of chunk k its peers reduce (the inputs
// region, the first half of the staging half) and its own reduced part of
// chunk k-1 (the results region, the second half). Between steps each
// rank gathers its peers' results of chunk k-1, reduces its part of chunk
// k from its send buffer and the peers' inputs, and stages chunk k+1.
// With all false it is Reduce: only the root gathers.
//
// Each byte of send is read once, each byte of recv written once; the
// staging a rank writes is read by its peers while still in cache, as
// chunks are sized for that. Results go to recv with stores that bypass
// the caches once the call is large enough to evict staging otherwise.
// The three jobs of a step advance together, a piece of each in turn, so
// that reading send from memory overlaps writing recv to it, as in a
// memcpy, rather than the two alternating by the half chunk.
func (b *backend) allReduceTwoShot(ctx context.Context, a *collectives.Args, all bool) error {
	total := a.Count * a.Type.Size()
	t := twoShot{b: b, send: hostBytes(a.Send, total), recv: hostBytes(a.Recv, total), total: total,
		chunk: b.twoShotChunk(), red: reducer(a.Type, a.Op), out: copyCached}
	gathers := all || b.rank == a.Root
	if total >= ntMinBytes {
		t.out = copyNT
	}
	per := 0 // the longest part of a chunk
	for q := 0; q < b.n; q++ {
		lo, hi := span(t.chunk, b.n, q)
		per = max(per, hi-lo)
	}
	first := true
	t.stage(0, b.parity(), 0, per)
	if err := b.sync(ctx, a, &first); err != nil {
		return err
	}
	for off := 0; off < total; off += t.chunk {
		p := int(b.step & 1)
		for x := 0; x < per; x += piece {
			y := min(x+piece, per)
			if gathers && off > 0 {
				t.gather(off-t.chunk, p, x, y)
			}
			t.reduce(off, p, x, y, gathers)
			if off+t.chunk < total {
				t.stage(off+t.chunk, p^1, x, y)
			}
		}
		if err := b.barrier(ctx); err != nil {
			return err
		}
	}
	if gathers {
		t.gather((total-1)/t.chunk*t.chunk, int(b.step&1), 0, per)
	}
	return nil
}

// twoShot is one two-shot call. Its jobs work on bytes [x, y) of each
// part of the chunk at off (parts are span's, of the chunk's own length).
type twoShot struct {
	b            *backend
	send, recv   []byte
	total, chunk int
	red          reduceFunc
	out          func(dst, src []byte)
}

// part is bytes [x, y) of rank q's part of the chunk at off, as offsets
// into the chunk (empty where the part is shorter).
func (t *twoShot) part(off, q, x, y int) (lo, hi int) {
	plo, phi := span(min(t.chunk, t.total-off), t.b.n, q)
	return min(plo+x, phi), min(plo+y, phi)
}

// stage publishes the peers' parts of the chunk at off in half p.
func (t *twoShot) stage(off, p, x, y int) {
	st := t.b.stage[p][t.b.rank]
	for q := 0; q < t.b.n; q++ {
		if q != t.b.rank {
			lo, hi := t.part(off, q, x, y)
			copyCached(st[lo:hi], t.send[off+lo:off+hi])
		}
	}
}

// reduce reduces this rank's part of the chunk at off from half p into
// the results region of half p^1 (never a source: send may be recv), and
// copies it out when this rank gathers.
func (t *twoShot) reduce(off, p, x, y int, gathers bool) {
	lo, hi := t.part(off, t.b.rank, x, y)
	if lo == hi {
		return
	}
	res := t.b.stage[p^1][t.b.rank][t.chunk+lo : t.chunk+hi]
	t.red(res, t.b.sources(t.send[off+lo:off+hi], p, lo, hi), t.b.n, &t.b.sc)
	if gathers {
		t.out(t.recv[off+lo:off+hi], res)
	}
}

// gather copies the peers' results of the chunk at off from half p.
func (t *twoShot) gather(off, p, x, y int) {
	for q := 0; q < t.b.n; q++ {
		if q != t.b.rank {
			lo, hi := t.part(off, q, x, y)
			t.out(t.recv[off+lo:off+hi], t.b.stage[p][q][t.chunk+lo:t.chunk+hi])
		}
	}
}

// Two-shot chunks and copies. A chunk is at most half a staging half (the
// inputs and the results regions) and at most twoShotChunkMax, so that a
// step's staging stays in the caches of the ranks that exchange it.
const (
	twoShotChunkMax = 1 << 20
	piece           = 64 << 10 // each job's share of a round, copied out while in L2
	ntMinBytes      = 4 << 20  // calls from here write recv around the caches
	cachedCopyMax   = 512 << 10
)

func (b *backend) twoShotChunk() int {
	return min(b.cfg.StagingBytes/2/lineBytes*lineBytes, twoShotChunkMax)
}

// copyCached copies src into dst with ordinary stores, in pieces small
// enough that Go's copy never switches to stores that bypass the caches
// (it does from 1 MiB): the destination is staging a peer reads next.
func copyCached(dst, src []byte) {
	for len(src) > cachedCopyMax {
		copy(dst[:cachedCopyMax], src[:cachedCopyMax])
		dst, src = dst[cachedCopyMax:], src[cachedCopyMax:]
	}
	copy(dst, src)
}

// broadcast pipelines the root's buffer through its staging.
func (b *backend) broadcast(ctx context.Context, a *collectives.Args) error {
	total := a.Count * a.Type.Size()
	root := b.rank == a.Root
	var send []byte
	if root {
		send = hostBytes(a.Send, total)
	}
	recv := hostBytes(a.Recv, total)
	first := true
	for off := 0; off < total; off += b.cfg.StagingBytes {
		m := min(b.cfg.StagingBytes, total-off)
		p := b.parity()
		area := b.area(p, total)
		if root {
			copyCached(area[b.rank][:m], send[off:off+m])
		}
		if err := b.sync(ctx, a, &first); err != nil {
			return err
		}
		if !root {
			copy(recv[off:off+m], area[a.Root][:m])
		}
	}
	if root && a.Send != a.Recv {
		copy(recv, send)
	}
	return nil
}

// allGather: every rank stages its chunk and copies out every peer's.
func (b *backend) allGather(ctx context.Context, a *collectives.Args) error {
	total := a.Count * a.Type.Size()
	send, recv := hostBytes(a.Send, total), hostBytes(a.Recv, total*b.n)
	if !a.InPlace(b.rank) {
		copy(recv[b.rank*total:(b.rank+1)*total], send)
	}
	first := true
	for off := 0; off < total; off += b.cfg.StagingBytes {
		m := min(b.cfg.StagingBytes, total-off)
		p := b.parity()
		area := b.area(p, total)
		copyCached(area[b.rank][:m], send[off:off+m])
		if err := b.sync(ctx, a, &first); err != nil {
			return err
		}
		for q := 0; q < b.n; q++ {
			if q != b.rank {
				copy(recv[q*total+off:q*total+off+m], area[q][:m])
			}
		}
	}
	return nil
}

// reduceScatter: staging holds one slot per destination rank; each rank
// stages its blocks for the others and reduces its own block from all.
func (b *backend) reduceScatter(ctx context.Context, a *collectives.Args) error {
	total := a.Count * a.Type.Size()
	send, recv := hostBytes(a.Send, total*b.n), hostBytes(a.Recv, total)
	slot := b.cfg.StagingBytes / b.n / lineBytes * lineBytes
	red := reducer(a.Type, a.Op)
	inPlace := a.InPlace(b.rank)
	first := true
	for off := 0; off < total; off += slot {
		m := min(slot, total-off)
		p := b.parity()
		st := b.stage[p][b.rank]
		for q := 0; q < b.n; q++ {
			if q != b.rank {
				copyCached(st[q*slot:q*slot+m], send[q*total+off:q*total+off+m])
			}
		}
		if err := b.sync(ctx, a, &first); err != nil {
			return err
		}
		mine := b.rank * slot
		srcs := b.sources(send[b.rank*total+off:b.rank*total+off+m], p, mine, mine+m)
		if inPlace && b.rank > 0 {
			// recv is this rank's source, not the first one: reduce into
			// this rank's own slot, which no peer reads, then copy.
			tmp := st[mine : mine+m]
			red(tmp, srcs, b.n, &b.sc)
			copy(recv[off:off+m], tmp)
		} else {
			red(recv[off:off+m], srcs, b.n, &b.sc)
		}
	}
	return nil
}

package host

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/goccl/goccl/collectives"
)

// The direct path: a call whose send and receive buffers lie, on every
// rank, inside allocations from Alloc (alloc.go) runs on the buffers
// themselves, through every rank's mappings of every peer's memory, with
// no staging: AllReduce has each rank reduce its part (span's) reading all
// n inputs and write the reduced chunk, while it is in cache, into all n
// receive buffers (prefetching the next chunk's inputs meanwhile); AllGather has each rank write its input into every
// rank's receive buffer; Broadcast has each rank copy the root's input;
// ReduceScatter has each rank reduce its block from all n inputs. Each
// rank reads and writes as many bytes as a memcpy of the call would.
//
// The ranks decide at the call, all alike, without a round trip of its
// own: each publishes, in a cache line of its control words, where its
// buffers lie (an allocation's number and the offset in it, or none), and
// reads its peers' after the call's first barrier; if any rank's buffer
// is not in an allocation, every rank goes on to the ordinary path (whose
// own first barrier then costs one more). The call's first barrier is
// also what keeps a rank from writing a peer's receive buffer before that
// peer has entered the call (its previous call may still read it), and
// the last one what keeps a rank from returning while peers still read
// its input or write its output.
//
// Reduce is AllReduce's reduction written to the root's output only.
//
// PreMulSum publishes each rank's scalar with its buffers, and the ranks
// that reduce scale every rank's chunk with that rank's scalar into
// private memory before summing it (the ordinary path scales each rank's
// whole input first): the products and the sums are the same.
//
// Calls probe only while allocations are live, from directMin bytes, and
// only for the five collectives above; allocations are
// collective, so every rank probes alike, and the descriptor's flag byte
// makes ranks that do not fail the call rather than misread each other.

const (
	// offDirect is where a rank publishes its call's buffer places: send
	// tag and offset, receive tag and offset (a tag is an allocation's
	// number plus one, tagNone, or tagUnused), then PreMulSum's scalar.
	offDirect   = 384
	directWords = 5

	tagNone   = 0
	tagUnused = ^uint64(0) // a buffer the call does not touch (Broadcast's send, Reduce's receive, off the root)

	descDirect = 1 // the descriptor's flag byte of a call that probes

	// directChunk is what a rank reduces before writing it out: it stays
	// in L2 while it goes to every rank.
	directChunk = 64 << 10

	// gr_reduce_out's flags (reduce_simd.h's GR_OUT_*).
	grOutNT       = 1 // outputs written around the caches
	grOutPrefetch = 2 // the next chunk's sources prefetched meanwhile
)

// directMin is the smallest call (count × element size) that probes the
// direct path: below it the probe's second barrier costs more than the
// staging copy saves (0.46 against 0.24 us at 8-256 B, even at 4 KiB,
// ahead from 8 KiB between two processes: docs/perf.md). A variable for
// the tests, which take every count there.
var directMin = 8 << 10

// directHook, when set, runs as a call starts moving data on the direct
// path (tests: a rank that dies there).
var directHook func()

// directProbes reports whether a probes the direct path.
func (b *backend) directProbes(a *collectives.Args) bool {
	if len(b.allocs) == 0 || a.Count*a.Type.Size() < directMin {
		return false
	}
	switch a.Coll {
	case collectives.AllReduce, collectives.AllGather, collectives.Broadcast, collectives.ReduceScatter, collectives.Reduce:
		return true
	}
	return false
}

// tagOf is where [p, p+n) lies: its allocation's tag and offset.
func (b *backend) tagOf(p uintptr, n int) (tag, off uint64) {
	if al, o := b.findAlloc(p, n); al != nil {
		return al.id + 1, uint64(o)
	}
	return tagNone, 0
}

// runDirect publishes this rank's buffer places, meets the peers at the
// call's first barrier and, when every rank's buffers are allocations',
// runs a on the direct path (took true). Otherwise it returns took false
// having changed nothing but the step: the caller runs the ordinary path.
func (b *backend) runDirect(ctx context.Context, a *collectives.Args) (took bool, err error) {
	sendTag, sendOff := b.tagOf(a.Send, a.SendBytes(b.n))
	if a.Coll == collectives.Broadcast && b.rank != a.Root {
		sendTag, sendOff = tagUnused, 0
	}
	recvTag, recvOff := b.tagOf(a.Recv, a.RecvBytes(b.n))
	if a.Coll == collectives.Reduce && b.rank != a.Root {
		recvTag, recvOff = tagUnused, 0
	}
	w := b.dwords[b.rank]
	atomic.StoreUint64(&w[0], sendTag)
	atomic.StoreUint64(&w[1], sendOff)
	atomic.StoreUint64(&w[2], recvTag)
	atomic.StoreUint64(&w[3], recvOff)
	if a.Op == collectives.PreMulSum {
		atomic.StoreUint64(&w[4], scalarBits(a))
	}
	b.descFlag = descDirect
	first := true
	err = b.sync(ctx, a, &first)
	b.descFlag = 0
	if err != nil {
		return true, err
	}
	// Peers' words stay as read until they pass the call's next barrier,
	// which both paths have.
	for q := 0; q < b.n; q++ {
		if atomic.LoadUint64(&b.dwords[q][0]) == tagNone || atomic.LoadUint64(&b.dwords[q][2]) == tagNone {
			return false, nil
		}
	}
	for q := 0; q < b.n; q++ {
		s, err := b.placeOf(q, atomic.LoadUint64(&b.dwords[q][0]), atomic.LoadUint64(&b.dwords[q][1]))
		if err != nil {
			return true, b.fail(err)
		}
		r, err := b.placeOf(q, atomic.LoadUint64(&b.dwords[q][2]), atomic.LoadUint64(&b.dwords[q][3]))
		if err != nil {
			return true, b.fail(err)
		}
		b.dsend[q], b.drecv[q] = s, r
	}
	if a.Op == collectives.PreMulSum && a.Coll.Reduces() {
		if len(b.dmul) < b.n {
			b.dmul = make([]premul, b.n) // once per backend
		}
		for q := 0; q < b.n; q++ {
			b.dmul[q].set(atomic.LoadUint64(&b.dwords[q][4]), a.Type)
		}
	}
	b.last = collectives.Path{Transport: "shm-direct"}
	if directHook != nil {
		directHook()
	}
	switch a.Coll {
	case collectives.AllReduce:
		b.directAllReduce(a)
	case collectives.AllGather:
		b.directAllGather(a)
	case collectives.Broadcast:
		b.directBroadcast(a)
	case collectives.ReduceScatter:
		b.directReduceScatter(a)
	case collectives.Reduce:
		b.directReduceRoot(a)
	}
	return true, b.barrier(ctx)
}

// placeOf is the address, in this process, of rank q's buffer at (tag,
// off); 0 for a buffer not read.
func (b *backend) placeOf(q int, tag, off uint64) (uintptr, error) {
	if tag == tagUnused {
		return 0, nil
	}
	al := b.allocByID(tag - 1)
	if al == nil {
		return 0, &collectives.PeerError{Rank: q, Cause: fmt.Errorf(
			"%w: host: rank %d's buffer lies in allocation #%d, which rank %d has not (closed on one rank only?)",
			collectives.ErrInvalidArgument, q, tag-1, b.rank)}
	}
	return addrOf(al.seg.Peer(q)) + uintptr(off), nil
}

// outFor is how results of a call of total bytes are written: around the
// caches when the call is large (they are not read again here).
func outFor(total int) func(dst, src []byte) {
	if total >= ntMinBytes {
		return copyNT
	}
	return copyBytes
}

func copyBytes(dst, src []byte) { copy(dst, src) }

// directAllReduce: this rank's part, chunk by chunk, reduced from every
// rank's input (in rank order, so every rank's results are alike) and
// written to every rank's output. In place is safe: only this rank reads
// or writes its part of any buffer, and a chunk is reduced whole before
// it is written.
func (b *backend) directAllReduce(a *collectives.Args) {
	total := a.Count * a.Type.Size()
	lo, hi := span(total, b.n, b.rank)
	if hi <= lo {
		return
	}
	// Peers first, starting after this rank: ranks spread their writes
	// over the buffers rather than all writing one.
	outs, srcs := b.directPtrs()
	for i := 1; i <= b.n; i++ {
		outs[i-1] = b.drecv[(b.rank+i)%b.n] + uintptr(lo)
	}
	for q := 0; q < b.n; q++ {
		srcs[q] = b.dsend[q] + uintptr(lo)
	}
	b.directReduce(a, outs, srcs, hi-lo, total)
}

// directPtrs is the reused lists of a call's outputs and sources.
func (b *backend) directPtrs() (outs, srcs []uintptr) {
	if len(b.dptrs) < 2*b.n {
		b.dptrs = make([]uintptr, 2*b.n) // once per backend
	}
	return b.dptrs[:b.n], b.dptrs[b.n : 2*b.n]
}

// directReduce reduces n bytes of every source into every output, chunk by
// chunk through b.dtmp (a chunk is reduced whole before it is written, so
// an output may be a source), around the caches for calls of total bytes
// from ntMinBytes: in C where (type, op) has a vector kernel, with the next
// chunk's sources prefetched while the reduced one goes out
// (reduce_out.c), else in Go.
func (b *backend) directReduce(a *collectives.Args, outs, srcs []uintptr, n, total int) {
	flags := grOutPrefetch
	if total >= ntMinBytes {
		flags |= grOutNT
	}
	premul := a.Op == collectives.PreMulSum
	if !premul && reduceOut(a.Type, a.Op, outs, srcs, n, b.n, b.dtmp, directChunk, flags) {
		return
	}
	red, out := reducer(a.Type, a.Op), outFor(total)
	if premul {
		red = reducer(a.Type, collectives.Sum)
		if len(b.dscaled) < b.n*directChunk {
			b.dscaled = make([]byte, b.n*directChunk) // once per backend
		}
	}
	for x := 0; x < n; x += directChunk {
		m := min(directChunk, n-x)
		in := b.srcs[:0]
		for q, s := range srcs {
			v := hostBytes(s+uintptr(x), m)
			if premul {
				d := b.dscaled[q*directChunk : q*directChunk+m]
				scalers[a.Type](d, v, &b.dmul[q])
				v = d
			}
			in = append(in, v)
		}
		b.srcs = in
		tmp := b.dtmp[:m]
		red(tmp, in, b.n, &b.sc)
		for _, o := range outs {
			out(hostBytes(o+uintptr(x), m), tmp)
		}
	}
}

// directReduceRoot is Reduce: this rank's part, as in directAllReduce,
// written to the root's output only.
func (b *backend) directReduceRoot(a *collectives.Args) {
	total := a.Count * a.Type.Size()
	lo, hi := span(total, b.n, b.rank)
	if hi <= lo {
		return
	}
	outs, srcs := b.directPtrs()
	outs[0] = b.drecv[a.Root] + uintptr(lo)
	for q := 0; q < b.n; q++ {
		srcs[q] = b.dsend[q] + uintptr(lo)
	}
	b.directReduce(a, outs[:1], srcs, hi-lo, total)
}

// directAllGather: this rank's input, chunk by chunk, into its block of
// every rank's output (its own too, unless in place).
func (b *backend) directAllGather(a *collectives.Args) {
	total := a.Count * a.Type.Size()
	own := hostBytes(a.Send, total)
	out := outFor(total * b.n)
	at := uintptr(b.rank * total)
	for x := 0; x < total; x += directChunk {
		m := min(directChunk, total-x)
		src := own[x : x+m]
		for i := 1; i <= b.n; i++ {
			q := (b.rank + i) % b.n
			if q == b.rank && a.InPlace(b.rank) {
				continue
			}
			out(hostBytes(b.drecv[q]+at+uintptr(x), m), src)
		}
	}
}

// directBroadcast: every rank copies the root's input into its output.
func (b *backend) directBroadcast(a *collectives.Args) {
	total := a.Count * a.Type.Size()
	if b.rank == a.Root && a.Send == a.Recv {
		return
	}
	outFor(total)(hostBytes(a.Recv, total), hostBytes(b.dsend[a.Root], total))
}

// directReduceScatter: this rank's block, chunk by chunk, reduced from
// every rank's input into its output (through the chunk buffer: in place,
// the output is this rank's block of its input).
func (b *backend) directReduceScatter(a *collectives.Args) {
	total := a.Count * a.Type.Size()
	if total == 0 {
		return
	}
	at := uintptr(b.rank * total)
	outs, srcs := b.directPtrs()
	outs[0] = a.Recv
	for q := 0; q < b.n; q++ {
		srcs[q] = b.dsend[q] + at
	}
	b.directReduce(a, outs[:1], srcs, total, total)
}

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

// A call's descriptor: collective, type, op, root, count, and the call's
// number (Args.Seq, counted alike on every rank).
const descBytes = 32

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
	if err := b.barrier(ctx); err != nil {
		return err
	}
	mine := b.desc[p][b.rank]
	for q := 0; q < b.n; q++ {
		theirs := b.desc[p][q]
		if string(theirs) == string(mine) {
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
	binary.LittleEndian.PutUint32(d[0:], uint32(a.Coll))
	binary.LittleEndian.PutUint32(d[4:], uint32(a.Type))
	binary.LittleEndian.PutUint32(d[8:], uint32(op))
	binary.LittleEndian.PutUint32(d[12:], uint32(root))
	binary.LittleEndian.PutUint64(d[16:], uint64(a.Count))
	binary.LittleEndian.PutUint64(d[24:], a.Seq)
}

func descSeq(d []byte) uint64 { return binary.LittleEndian.Uint64(d[24:]) }

func describeDesc(d []byte) string {
	le := binary.LittleEndian
	c := collectives.Collective(le.Uint32(d[0:]))
	s := fmt.Sprintf("%s of %d %s", c, le.Uint64(d[16:]), collectives.DataType(le.Uint32(d[4:])))
	if c.Reduces() {
		s += " " + collectives.Op(le.Uint32(d[8:])).String()
	}
	if c.Rooted() {
		s += fmt.Sprintf(" root %d", le.Uint32(d[12:]))
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
	s := b.srcs[:0]
	for q := 0; q < b.n; q++ {
		if q == b.rank {
			s = append(s, own)
		} else {
			s = append(s, b.stage[p][q][lo:hi])
		}
	}
	return s
}

// allReduceOneShot: every rank stages its chunk; every rank reduces all.
// With all false it is Reduce: only the root reduces.
func (b *backend) allReduceOneShot(ctx context.Context, a *collectives.Args, all bool) error {
	total := a.Count * a.Type.Size()
	send, recv := hostBytes(a.Send, total), hostBytes(a.Recv, total)
	red := reducer(a.Type, a.Op)
	reduces := all || b.rank == a.Root
	first := true
	for off := 0; off < total; off += b.cfg.StagingBytes {
		m := min(b.cfg.StagingBytes, total-off)
		p := b.parity()
		mine := b.stage[p][b.rank][:m]
		copy(mine, send[off:off+m])
		if err := b.sync(ctx, a, &first); err != nil {
			return err
		}
		// The staged copy, not send, is this rank's source: send may be
		// recv, and the reduction visits ranks in order.
		if reduces {
			red(recv[off:off+m], b.sources(mine, p, 0, m), b.n, &b.sc)
		}
	}
	return nil
}

// allReduceTwoShot is a reduce-scatter then all-gather per chunk: each
// rank stages the parts its peers reduce, reduces its own part from every
// rank's staging, publishes the result, and gathers the others'. With all
// false it is Reduce: only the root gathers.
func (b *backend) allReduceTwoShot(ctx context.Context, a *collectives.Args, all bool) error {
	total := a.Count * a.Type.Size()
	send, recv := hostBytes(a.Send, total), hostBytes(a.Recv, total)
	red := reducer(a.Type, a.Op)
	gathers := all || b.rank == a.Root
	first := true
	for off := 0; off < total; off += b.cfg.StagingBytes {
		m := min(b.cfg.StagingBytes, total-off)
		lo, hi := span(m, b.n, b.rank)
		p := b.parity()
		st := b.stage[p][b.rank]
		copy(st[:lo], send[off:off+lo])
		copy(st[hi:m], send[off+hi:off+m])
		if err := b.sync(ctx, a, &first); err != nil {
			return err
		}
		// Reduce into staging (never a source), then copy out: send may
		// be recv.
		res := b.stage[p^1][b.rank][lo:hi]
		red(res, b.sources(send[off+lo:off+hi], p, lo, hi), b.n, &b.sc)
		if gathers {
			copy(recv[off+lo:off+hi], res)
		}
		if err := b.barrier(ctx); err != nil {
			return err
		}
		if gathers {
			for q := 0; q < b.n; q++ {
				if q != b.rank {
					qlo, qhi := span(m, b.n, q)
					copy(recv[off+qlo:off+qhi], b.stage[p^1][q][qlo:qhi])
				}
			}
		}
	}
	return nil
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
		if root {
			copy(b.stage[p][b.rank][:m], send[off:off+m])
		}
		if err := b.sync(ctx, a, &first); err != nil {
			return err
		}
		if !root {
			copy(recv[off:off+m], b.stage[p][a.Root][:m])
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
		copy(b.stage[p][b.rank][:m], send[off:off+m])
		if err := b.sync(ctx, a, &first); err != nil {
			return err
		}
		for q := 0; q < b.n; q++ {
			if q != b.rank {
				copy(recv[q*total+off:q*total+off+m], b.stage[p][q][:m])
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
				copy(st[q*slot:q*slot+m], send[q*total+off:q*total+off+m])
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

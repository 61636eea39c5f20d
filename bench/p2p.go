package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/check"
)

// P2PTest names the benchmarks of the point-to-point calls, nccl-tests'
// sendrecv, alltoall, gather and scatter tests.
type P2PTest int

const (
	NoP2P    P2PTest = iota // a collective (Config.Coll)
	SendRecv                // each rank sends to rank+1 and receives from rank-1, in one group
	AllToAll                // AllToAll
	Gather                  // Gather to the root
	Scatter                 // Scatter from the root
)

var p2pTestNames = [...]string{"", "sendrecv", "alltoall", "gather", "scatter"}

// String gives the nccl-tests-style name ("sendrecv", "alltoall", ...).
func (t P2PTest) String() string {
	if t > NoP2P && int(t) < len(p2pTestNames) {
		return p2pTestNames[t]
	}
	return fmt.Sprintf("P2PTest(%d)", int(t))
}

// parseP2PTest accepts nccl-tests' names (with or without "_perf" and
// underscores: send_recv, all_to_all); NoP2P when s names none of them.
func parseP2PTest(s string) P2PTest {
	k := strings.ReplaceAll(strings.TrimSuffix(strings.ToLower(s), "_perf"), "_", "")
	for i, n := range p2pTestNames[1:] {
		if n == k {
			return P2PTest(i + 1)
		}
	}
	return NoP2P
}

// Rooted reports whether the test has a root (-r applies).
func (t P2PTest) Rooted() bool { return t == Gather || t == Scatter }

// P2PShapeOf maps a swept size to the call's shape, as nccl-tests does:
// sendrecv moves the whole size to one peer; alltoall, gather and scatter
// cut it into one block per rank, rounded down to 16 bytes, and Count is
// the per-block count the call takes. Bytes (printed, and algbw's) is the
// larger buffer.
func P2PShapeOf(t P2PTest, size int64, dt collectives.DataType, nranks int) Shape {
	ts := int64(dt.Size())
	total := size / ts
	if t == SendRecv {
		return Shape{Count: int(total), Bytes: total * ts, SendBytes: total * ts, RecvBytes: total * ts}
	}
	align := max(16/ts, 1)
	per := total / int64(nranks) / align * align
	all, one := per*ts*int64(nranks), per*ts
	sh := Shape{Count: int(per), Bytes: all, SendBytes: all, RecvBytes: all}
	switch t {
	case Gather:
		sh.SendBytes = one
	case Scatter:
		sh.RecvBytes = one
	}
	return sh
}

// P2PBusFactor is nccl-tests' correction from algbw to busbw: 1 for
// sendrecv, (n-1)/n for alltoall, gather and scatter (each rank's own
// block does not cross the bus).
func P2PBusFactor(t P2PTest, nranks int) float64 {
	if t == SendRecv {
		return 1
	}
	n := float64(nranks)
	return (n - 1) / n
}

// p2pOps is what measure needs of one shape and placement: the call, and
// its check. In place follows nccl-tests: sendrecv and alltoall read and
// write the receive buffer (timed, never checked: neither defines the
// result), gather sends from the root's own block of the receive buffer,
// scatter receives into the root's own block of the send buffer.
func (r *runner) p2pOps(ctx context.Context, sh Shape, t collectives.DataType, root int, inPlace bool) (do func() error, chk func(rep int) (int64, error), err error) {
	pc, ok := r.rk.Comm.(PointToPoint)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s: this communicator has no point-to-point calls", ErrUsage, r.cfg.P2P)
	}
	test, n, me := r.cfg.P2P, r.n, r.me
	st := r.rk.Space.Stream()
	send, recv := r.send.Ptr, r.recv.Ptr
	one := int(sh.Count) * t.Size()
	if inPlace {
		switch test {
		case SendRecv, AllToAll:
			send = recv
		case Gather:
			send = r.recv.At(me * one)
		case Scatter:
			recv = r.send.At(me * one)
		}
	}
	switch test {
	case SendRecv:
		ops := []collectives.P2P{
			{Kind: collectives.SendOp, Peer: (me + 1) % n, Buf: send, Count: sh.Count, Type: t, Stream: st},
			{Kind: collectives.RecvOp, Peer: (me + n - 1) % n, Buf: recv, Count: sh.Count, Type: t, Stream: st},
		}
		do = func() error { return pc.Group(ctx, ops) }
	case AllToAll:
		do = func() error { return pc.AllToAll(ctx, send, recv, sh.Count, t, st) }
	case Gather:
		do = func() error { return pc.Gather(ctx, send, recv, sh.Count, t, root, st) }
	case Scatter:
		do = func() error { return pc.Scatter(ctx, send, recv, sh.Count, t, root, st) }
	}
	if inPlace && (test == SendRecv || test == AllToAll) {
		return do, nil, nil
	}
	chk = func(rep int) (int64, error) { return r.p2pCheck(ctx, do, sh, t, root, send, recv, inPlace, rep) }
	return do, chk, nil
}

// p2pCheck runs the call once on fresh blocks (check.FillBlock) with a
// poisoned output and returns this rank's wrong element count.
func (r *runner) p2pCheck(ctx context.Context, do func() error, sh Shape, t collectives.DataType, root int, send, recv uintptr, inPlace bool, rep int) (int64, error) {
	sp := r.rk.Space
	test, n, me := r.cfg.P2P, r.n, r.me
	one := sh.Count * t.Size()
	seed := check.Seed(r.cfg.Seed, uint64(test), uint64(sh.Bytes), uint64(t), uint64(root+1), boolU(inPlace), uint64(rep))
	poison := check.PoisonByte(rep)
	if err := sp.Fill(r.recv, 0, int(sh.RecvBytes), poison); err != nil {
		return 0, err
	}
	if inPlace && test == Scatter {
		// The output lies in the send buffer: this rank's block.
		if err := sp.Fill(r.send, me*one, one, poison); err != nil {
			return 0, err
		}
	}
	// Blocks this rank sends: to whom, at which offset of the send side.
	type block struct{ peer, off int }
	var sends, recvs []block
	switch test {
	case SendRecv:
		sends, recvs = []block{{(me + 1) % n, 0}}, []block{{(me + n - 1) % n, 0}}
	case AllToAll:
		for q := 0; q < n; q++ {
			sends, recvs = append(sends, block{q, q * one}), append(recvs, block{q, q * one})
		}
	case Gather:
		sends = []block{{root, 0}}
		if me == root {
			for q := 0; q < n; q++ {
				recvs = append(recvs, block{q, q * one})
			}
		}
	case Scatter:
		recvs = []block{{root, 0}}
		if me == root {
			for q := 0; q < n; q++ {
				sends = append(sends, block{q, q * one})
			}
		}
	}
	in := r.input[:one]
	for _, b := range sends {
		if err := check.FillBlock(t, n, me, b.peer, seed, in); err != nil {
			return 0, err
		}
		buf, base := r.send, send-r.send.Ptr
		if send >= r.recv.Ptr && send < r.recv.Ptr+uintptr(r.recv.Size) {
			buf, base = r.recv, send-r.recv.Ptr
		}
		if err := sp.CopyIn(buf, int(base)+b.off, in); err != nil {
			return 0, err
		}
	}
	if err := do(); err != nil {
		return 0, fmt.Errorf("bench: check %s: %w", test, err)
	}
	if err := sp.Sync(ctx); err != nil {
		return 0, err
	}
	var wrong int64
	got := r.output[:one]
	for _, b := range recvs {
		buf, base := r.recv, recv-r.recv.Ptr
		if recv >= r.send.Ptr && recv < r.send.Ptr+uintptr(r.send.Size) {
			buf, base = r.send, recv-r.send.Ptr
		}
		if err := sp.CopyOut(got, buf, int(base)+b.off); err != nil {
			return 0, err
		}
		res, err := check.VerifyBlock(t, n, b.peer, me, seed, got, r.input[:one])
		if err != nil {
			return 0, err
		}
		wrong += int64(res.Wrong)
	}
	return wrong, nil
}

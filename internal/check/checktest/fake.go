package checktest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/fp8"
	"github.com/goccl/goccl/internal/half"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// Group is one fake job of N ranks.
type Group struct {
	n    int
	boot *transporttest.Group

	mu      sync.Mutex
	cond    *sync.Cond
	gen     int
	arrived int
	args    []collectives.Args
	err     error
	calls   int

	queues   map[pairKey][][]byte // point-to-point messages in flight
	received int                  // non-empty messages received, job-wide

	// CorruptRecv, when > 0, flips the last byte of the CorruptRecv-th
	// non-empty point-to-point message received (1-based, job-wide).
	CorruptRecv int

	// CorruptCall, when > 0, makes the CorruptCall-th collective (1-based,
	// counted once per job-wide call) write one wrong element on rank
	// CorruptRank.
	CorruptCall, CorruptRank int
}

// NewGroup returns a fake job of n ranks.
func NewGroup(n int) *Group {
	g := &Group{n: n, boot: transporttest.NewGroup(n), args: make([]collectives.Args, n)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// Comm is one rank of a Group.
type Comm struct {
	g    *Group
	rank int
	boot transport.Bootstrap
}

// Rank returns rank r's communicator.
func (g *Group) Rank(r int) *Comm { return &Comm{g: g, rank: r, boot: g.boot.Rank(r)} }

// Rank is c's rank in the group.
func (c *Comm) Rank() int { return c.rank }

// Size is the group's number of ranks.
func (c *Comm) Size() int { return c.g.n }

// Bootstrap is rank c's bootstrap.
func (c *Comm) Bootstrap() transport.Bootstrap { return c.boot }

// ErrMismatch is returned when ranks call different collectives.
var ErrMismatch = errors.New("checktest: ranks called different collectives")

// Run executes one collective: every rank blocks until all have called,
// then the last one computes every rank's output.
func (c *Comm) Run(ctx context.Context, a *collectives.Args) error {
	if err := a.Validate(c.rank, c.g.n); err != nil {
		return err
	}
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	my := g.gen
	g.args[c.rank] = *a
	g.arrived++
	if g.arrived == g.n {
		g.calls++
		g.err = g.execute()
		g.arrived = 0
		g.gen++
		g.cond.Broadcast()
		return g.err
	}
	for g.gen == my {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		g.cond.Wait()
	}
	return g.err
}

// mem views size bytes at address p (host memory the caller owns).
func mem(p uintptr, size int) []byte {
	if size == 0 {
		return nil
	}
	return unsafe.Slice(*(**byte)(unsafe.Pointer(&p)), size)
}

func (g *Group) execute() error {
	a0 := g.args[0]
	for r, a := range g.args {
		if a.Coll != a0.Coll || a.Count != a0.Count || a.Type != a0.Type || (a.Coll.Reduces() && a.Op != a0.Op) || (a.Coll.Rooted() && a.Root != a0.Root) {
			return fmt.Errorf("%w: rank 0 %v/%v count %d, rank %d %v/%v count %d", ErrMismatch, a0.Coll, a0.Type, a0.Count, r, a.Coll, a.Type, a.Count)
		}
	}
	n, cnt := g.n, a0.Count
	// Snapshot inputs first: in-place outputs overwrite them.
	in := make([][]byte, n)
	for r, a := range g.args {
		if a.Coll == collectives.Broadcast && r != a.Root {
			continue
		}
		in[r] = append([]byte(nil), mem(a.Send, a.SendBytes(n))...)
		if a.Coll.Reduces() && a.Op == collectives.PreMulSum {
			in[r] = scaled(a, in[r])
		}
	}
	for r, a := range g.args {
		if a.Coll.Reduces() && a.Op == collectives.PreMulSum {
			a.Op = collectives.Sum // of the scaled inputs
		}
		var out []byte
		switch a.Coll {
		case collectives.AllReduce:
			out = reduce(a.Type, a.Op, in, 0, cnt)
		case collectives.Reduce:
			if r != a.Root {
				continue
			}
			out = reduce(a.Type, a.Op, in, 0, cnt)
		case collectives.ReduceScatter:
			out = reduce(a.Type, a.Op, in, r*cnt, cnt)
		case collectives.Broadcast:
			out = in[a.Root]
		case collectives.AllGather:
			for q := 0; q < n; q++ {
				out = append(out, in[q]...)
			}
		}
		if g.CorruptCall == g.calls && g.CorruptRank == r && len(out) > 0 {
			out = append([]byte(nil), out...)
			out[len(out)-1] ^= 0x55
		}
		copy(mem(a.Recv, a.RecvBytes(n)), out)
	}
	return nil
}

// scaled is a rank's PreMulSum input times its scalar, each product in
// the type's arithmetic and rounded to it (a two-input Prod with a buffer
// of the scalar).
func scaled(a collectives.Args, in []byte) []byte {
	ts := a.Type.Size()
	var sb [8]byte
	binary.LittleEndian.PutUint64(sb[:], a.Scalar.Bits)
	if a.Scalar.Ptr != 0 {
		copy(sb[:], mem(a.Scalar.Ptr, ts))
	}
	rep := make([]byte, len(in))
	for i := 0; i < len(in); i += ts {
		copy(rep[i:], sb[:ts])
	}
	return reduce(a.Type, collectives.Prod, [][]byte{in, rep}, 0, len(in)/ts)
}

// reduce combines elements [first, first+cnt) of every input natively.
func reduce(t collectives.DataType, op collectives.Op, in [][]byte, first, cnt int) []byte {
	ts := t.Size()
	out := make([]byte, cnt*ts)
	le := binary.LittleEndian
	for i := 0; i < cnt; i++ {
		off := (first + i) * ts
		switch t {
		case collectives.Int8:
			out[i] = byte(fold(op, in, func(b []byte) int8 { return int8(b[off]) }))
		case collectives.Uint8:
			out[i] = fold(op, in, func(b []byte) uint8 { return b[off] })
		case collectives.Int32:
			le.PutUint32(out[4*i:], uint32(fold(op, in, func(b []byte) int32 { return int32(le.Uint32(b[off:])) })))
		case collectives.Uint32:
			le.PutUint32(out[4*i:], fold(op, in, func(b []byte) uint32 { return le.Uint32(b[off:]) }))
		case collectives.Int64:
			le.PutUint64(out[8*i:], uint64(fold(op, in, func(b []byte) int64 { return int64(le.Uint64(b[off:])) })))
		case collectives.Uint64:
			le.PutUint64(out[8*i:], fold(op, in, func(b []byte) uint64 { return le.Uint64(b[off:]) }))
		case collectives.Float32:
			le.PutUint32(out[4*i:], float32bits(fold(op, in, func(b []byte) float32 { return float32frombits(le.Uint32(b[off:])) })))
		case collectives.Float64:
			le.PutUint64(out[8*i:], float64bits(fold(op, in, func(b []byte) float64 { return float64frombits(le.Uint64(b[off:])) })))
		case collectives.Float16:
			le.PutUint16(out[2*i:], half.Float32ToFloat16(fold(op, in, func(b []byte) float32 { return half.Float16ToFloat32(le.Uint16(b[off:])) })))
		case collectives.BFloat16:
			le.PutUint16(out[2*i:], half.Float32ToBFloat16(fold(op, in, func(b []byte) float32 { return half.BFloat16ToFloat32(le.Uint16(b[off:])) })))
		case collectives.Float8E4M3:
			out[i] = fp8.Float32ToE4M3(fold(op, in, func(b []byte) float32 { return fp8.E4M3ToFloat32(b[off]) }))
		case collectives.Float8E5M2:
			out[i] = fp8.Float32ToE5M2(fold(op, in, func(b []byte) float32 { return fp8.E5M2ToFloat32(b[off]) }))
		}
	}
	return out
}

type number interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

func fold[T number](op collectives.Op, in [][]byte, get func([]byte) T) T {
	acc := get(in[0])
	for _, b := range in[1:] {
		v := get(b)
		switch op {
		case collectives.Sum, collectives.Avg:
			acc += v
		case collectives.Prod:
			acc *= v
		case collectives.Min:
			acc = min(acc, v)
		case collectives.Max:
			acc = max(acc, v)
		}
	}
	if op == collectives.Avg {
		acc /= T(len(in))
	}
	return acc
}

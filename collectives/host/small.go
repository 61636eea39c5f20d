package host

import (
	"context"
	"unsafe"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/fadd"
)

// Small calls. A call whose data fits in a box takes one step: each rank
// copies its data into its box, arrives, waits, and reduces the boxes.
// At 8-256 bytes a call's cost is mostly its way through the layers, so
// the two-rank sums, the common case, skip the kernel table's closures
// (a vector kernel's size check, the block loop, a call per block) for a
// plain loop over the two boxes (for floats, SSE2's lanes): the same
// additions, so the same bits (but for which of two NaNs a sum gives,
// which Go's loops leave to the compiler's operand order as well).

// twoSums are the two-source sums of the types whose Sum is the plain
// element loop (sum2); nil elsewhere.
var twoSums [collectives.NumDataTypes]func(d, x, y []byte)

func init() {
	twoSums[collectives.Int32] = sumTwo[int32]
	twoSums[collectives.Uint32] = sumTwo[uint32]
	twoSums[collectives.Int64] = sumTwo[int64]
	twoSums[collectives.Uint64] = sumTwo[uint64]
	twoSums[collectives.Float32] = sumTwoF32
	twoSums[collectives.Float64] = sumTwoF64
}

// sumTwoF32 and sumTwoF64 are sumTwo of floats, several lanes at a time
// (internal/fadd).
func sumTwoF32(d, x, y []byte) { fadd.F32(floats[float32](d), floats[float32](x), floats[float32](y)) }

func sumTwoF64(d, x, y []byte) { fadd.F64(floats[float64](d), floats[float64](x), floats[float64](y)) }

// floats is as, for the float types, small enough to be inlined.
func floats[T float32 | float64](b []byte) []T {
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

// sumTwo sets d = x + y elementwise (x, y at least d's length), as sum2.
func sumTwo[T native](d, x, y []byte) {
	var z T
	n := len(d) / int(unsafe.Sizeof(z))
	if n == 0 || len(x) < len(d) || len(y) < len(d) {
		return
	}
	dd := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(d))), n)
	xx := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(x))), n)
	yy := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(y))), n)
	for i := range dd {
		dd[i] = xx[i] + yy[i]
	}
}

// allReduceBox is allReduceOneShot for a call of total <= boxData bytes:
// one step through the boxes.
func (b *backend) allReduceBox(ctx context.Context, a *collectives.Args, total int, all bool) error {
	send, recv := hostBytes(a.Send, total), hostBytes(a.Recv, total)
	p := b.parity()
	area := b.box[p]
	mine := area[b.rank][:total]
	// The lines after the counter's first, the counter's line (its data,
	// then the descriptor and the counter) last: its stores then go out
	// together, where a first store into it would take the line from the
	// peer polling it, and the next ones take it again.
	head := min(total, lineBytes-boxHead)
	copy(mine[head:], send[head:])
	copy(mine[:head], send[:head])
	b.boxLines = boxLinesOf(total)
	first := true
	err := b.sync(ctx, a, &first)
	b.boxLines = 0
	if err != nil || !(all || b.rank == a.Root) {
		return err
	}
	// The staged copy, not send, is this rank's source: send may be recv,
	// and the reduction visits ranks in order.
	if f := twoSums[a.Type]; f != nil && b.n == 2 && a.Op == collectives.Sum {
		f(recv, area[0][:total], area[1][:total])
		return nil
	}
	reducer(a.Type, a.Op)(recv, b.sourcesIn(area, mine, 0, total), b.n, &b.sc)
	return nil
}

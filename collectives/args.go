package collectives

import (
	"fmt"
	"math"
	"math/bits"
)

// Args describes one collective call. Counts follow NCCL: Count is the
// number of elements in each rank's input for AllReduce, Broadcast, Reduce
// and AllGather (sendcount), and in each rank's output for ReduceScatter
// (recvcount).
type Args struct {
	Coll  Collective
	Send  uintptr // device (GPU backend) or host (host backend) address
	Recv  uintptr
	Count int
	Type  DataType
	Op    Op // ignored by Broadcast and AllGather
	// Scalar is PreMulSum's factor (ignored by every other op); ranks may
	// pass different ones, as NCCL allows.
	Scalar Scalar
	Root   int
	Stream uintptr // CUstream; ignored by the host backend
	// Seq is the call's number on its communicator, counted alike on every
	// rank (from 1; count-0 calls take theirs too), so that backends can
	// tell ranks that meet in different calls.
	Seq uint64
}

// InPlace reports whether the call reads and writes one buffer in NCCL's
// sense: Send == Recv for AllReduce/Broadcast/Reduce, Send at this rank's
// slot of Recv for AllGather, Recv at this rank's slot of Send for
// ReduceScatter.
func (a *Args) InPlace(rank int) bool {
	bytes := uintptr(a.Count) * uintptr(a.Type.Size())
	switch a.Coll {
	case AllGather:
		return a.Send == a.Recv+uintptr(rank)*bytes
	case ReduceScatter:
		return a.Recv == a.Send+uintptr(rank)*bytes
	}
	return a.Send == a.Recv
}

// SendBytes and RecvBytes give each rank's buffer sizes for nranks ranks.
func (a *Args) SendBytes(nranks int) int {
	n := a.Count * a.Type.Size()
	if a.Coll == ReduceScatter {
		n *= nranks
	}
	return n
}

// RecvBytes is the size of the receive buffer; AllGather's holds nranks blocks.
func (a *Args) RecvBytes(nranks int) int {
	n := a.Count * a.Type.Size()
	if a.Coll == AllGather {
		n *= nranks
	}
	return n
}

// Validate checks everything that can be checked locally; it names the
// argument at fault and wraps a sentinel error. rank and nranks are the
// caller's communicator's. Pointers are checked for nil only when
// count > 0; the send buffer of a non-root Broadcast rank may be nil, as
// may the receive buffer of a non-root Reduce rank.
func (a *Args) Validate(rank, nranks int) error {
	if !a.Coll.Valid() {
		return fmt.Errorf("collective %d: %w", a.Coll, ErrUnknownCollective)
	}
	if !a.Type.Valid() {
		return fmt.Errorf("%s: datatype %d: %w", a.Coll, a.Type, ErrUnknownDataType)
	}
	if a.Coll.Reduces() && !a.Op.Valid() {
		return fmt.Errorf("%s: op %d: %w", a.Coll, a.Op, ErrUnknownOp)
	}
	if a.Count < 0 {
		return fmt.Errorf("%s: count %d: %w", a.Coll, a.Count, ErrInvalidCount)
	}
	if a.Coll.Reduces() && a.Op == PreMulSum && a.Scalar.Ptr%uintptr(a.Type.Size()) != 0 {
		return fmt.Errorf("%s: scalar address %#x not aligned to %d bytes for %s: %w", a.Coll, a.Scalar.Ptr, a.Type.Size(), a.Type, ErrMisaligned)
	}
	if a.Coll.Rooted() && (a.Root < 0 || a.Root >= nranks) {
		return fmt.Errorf("%s: root %d not in [0,%d): %w", a.Coll, a.Root, nranks, ErrInvalidRoot)
	}
	// The whole span of the larger buffer must be addressable.
	mult := 1
	if a.Coll == AllGather || a.Coll == ReduceScatter {
		mult = nranks
	}
	// Multiplied out, not divided: every call passes here (twice on the
	// host backend), and divisions cost more than the rest together.
	if hi, lo := bits.Mul64(uint64(a.Count), uint64(a.Type.Size())*uint64(mult)); hi != 0 || lo > math.MaxInt64 {
		return fmt.Errorf("%s: count %d of %s times %d ranks overflows: %w", a.Coll, a.Count, a.Type, mult, ErrInvalidCount)
	}
	if a.Count == 0 {
		return nil
	}
	needSend := !(a.Coll == Broadcast && rank != a.Root)
	needRecv := !(a.Coll == Reduce && rank != a.Root)
	if needSend && a.Send == 0 {
		return fmt.Errorf("%s: send buffer is nil: %w", a.Coll, ErrNilPointer)
	}
	if needRecv && a.Recv == 0 {
		return fmt.Errorf("%s: recv buffer is nil: %w", a.Coll, ErrNilPointer)
	}
	mask := uintptr(a.Type.Size()) - 1 // sizes are powers of two
	align := mask + 1
	if needSend && a.Send&mask != 0 {
		return fmt.Errorf("%s: send buffer %#x not aligned to %d bytes for %s: %w", a.Coll, a.Send, align, a.Type, ErrMisaligned)
	}
	if needRecv && a.Recv&mask != 0 {
		return fmt.Errorf("%s: recv buffer %#x not aligned to %d bytes for %s: %w", a.Coll, a.Recv, align, a.Type, ErrMisaligned)
	}
	return nil
}

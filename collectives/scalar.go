package collectives

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/goccl/goccl/internal/fp8"
	"github.com/goccl/goccl/internal/half"
)

// Scalar is the factor of a PreMulSum: one element of the call's
// DataType, either carried by value or read from memory when the call
// runs (NCCL's ncclScalarDevice), so that it can change between the
// replays of a captured graph.
type Scalar struct {
	// Bits is the value as the DataType's little-endian bytes, in the low
	// Size() bytes; used when Ptr is 0.
	Bits uint64
	// Ptr, when not 0, is the address of the element: device memory on
	// the GPU backend, host memory on the host backend.
	Ptr uintptr
}

// ScalarAt is the factor at address p, read when each call runs.
func ScalarAt(p uintptr) Scalar { return Scalar{Ptr: p} }

// ScalarOf is v as an element of t: floats round to nearest even,
// integers take v truncated toward zero (and wrapped to t's width).
func ScalarOf(t DataType, v float64) (Scalar, error) {
	if !t.Valid() {
		return Scalar{}, fmt.Errorf("scalar: datatype %d: %w", t, ErrUnknownDataType)
	}
	var b uint64
	switch t {
	case Float16:
		b = uint64(half.Float32ToFloat16(float32(v)))
	case BFloat16:
		b = uint64(half.Float32ToBFloat16(float32(v)))
	case Float32:
		b = uint64(math.Float32bits(float32(v)))
	case Float64:
		b = math.Float64bits(v)
	case Float8E4M3:
		b = uint64(fp8.Float32ToE4M3(float32(v)))
	case Float8E5M2:
		b = uint64(fp8.Float32ToE5M2(float32(v)))
	case Uint64:
		b = uint64(v)
	default:
		b = uint64(int64(v))
	}
	return Scalar{Bits: b & sizeMask(t)}, nil
}

// ScalarFromBytes is the element of t in b (its first Size() bytes, as
// a C caller's pointer holds it).
func ScalarFromBytes(t DataType, b []byte) (Scalar, error) {
	if !t.Valid() {
		return Scalar{}, fmt.Errorf("scalar: datatype %d: %w", t, ErrUnknownDataType)
	}
	if len(b) < t.Size() {
		return Scalar{}, fmt.Errorf("scalar: %d bytes for a %s: %w", len(b), t, ErrInvalidArgument)
	}
	var w [8]byte
	copy(w[:], b[:t.Size()])
	return Scalar{Bits: binary.LittleEndian.Uint64(w[:])}, nil
}

func sizeMask(t DataType) uint64 {
	if t.Size() == 8 {
		return math.MaxUint64
	}
	return 1<<(8*t.Size()) - 1
}

// Float is the scalar's value widened to float64 (floats exactly,
// integers as their value); only for a by-value Scalar.
func (s Scalar) Float(t DataType) float64 {
	b := s.Bits & sizeMask(t)
	switch t {
	case Float16:
		return float64(half.Float16ToFloat32(uint16(b)))
	case BFloat16:
		return float64(half.BFloat16ToFloat32(uint16(b)))
	case Float32:
		return float64(math.Float32frombits(uint32(b)))
	case Float64:
		return math.Float64frombits(b)
	case Float8E4M3:
		return float64(fp8.E4M3ToFloat32(uint8(b)))
	case Float8E5M2:
		return float64(fp8.E5M2ToFloat32(uint8(b)))
	case Int8:
		return float64(int8(b))
	case Int32:
		return float64(int32(b))
	case Int64:
		return float64(int64(b))
	}
	return float64(b)
}

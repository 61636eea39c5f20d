package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
)

// ParamBuffer packs kernel arguments the way the C compiler lays out a
// kernel's parameter list: each value at the next offset aligned to its own
// size (pointers and 64-bit values to 8), padding bytes zero. The result
// goes to LaunchKernel as CU_LAUNCH_PARAM_BUFFER_POINTER; it holds no Go
// pointers, so it can cross cgo as is.
//
// A ParamBuffer is reusable: Reset keeps the storage, so a hot path that
// packs the same shape on every launch does not allocate. The appenders
// return the buffer so calls chain; a bad argument (Struct with an
// alignment that is not a power of two up to 16) is remembered and
// reported by Err, and Bytes returns nil while it stands.
type ParamBuffer struct {
	buf []byte
	err error
}

// NewParamBuffer returns a buffer with room for capacity bytes.
func NewParamBuffer(capacity int) *ParamBuffer {
	return &ParamBuffer{buf: make([]byte, 0, capacity)}
}

// Reset empties the buffer and clears any error, keeping its storage.
func (p *ParamBuffer) Reset() *ParamBuffer {
	p.buf = p.buf[:0]
	p.err = nil
	return p
}

// Bytes is the packed parameter block, or nil after a bad argument.
func (p *ParamBuffer) Bytes() []byte {
	if p.err != nil {
		return nil
	}
	return p.buf
}

// Len is the packed size so far.
func (p *ParamBuffer) Len() int { return len(p.buf) }

// Err reports the first bad argument since the last Reset.
func (p *ParamBuffer) Err() error { return p.err }

// grow appends zero padding up to the next multiple of align, then n zero
// bytes, and returns those n bytes for the caller to fill.
func (p *ParamBuffer) grow(align, n int) []byte {
	start := len(p.buf)
	off := (start + align - 1) &^ (align - 1)
	end := off + n
	if end > cap(p.buf) {
		nb := make([]byte, start, 2*end)
		copy(nb, p.buf)
		p.buf = nb
	}
	p.buf = p.buf[:end]
	clear(p.buf[start:end])
	return p.buf[off:end]
}

// U8 appends an 8-bit value (bool, char, uint8_t).
func (p *ParamBuffer) U8(v uint8) *ParamBuffer {
	p.grow(1, 1)[0] = v
	return p
}

// U16 appends a 16-bit value (uint16_t, __half as bits).
func (p *ParamBuffer) U16(v uint16) *ParamBuffer {
	binary.LittleEndian.PutUint16(p.grow(2, 2), v)
	return p
}

// U32 appends a 32-bit unsigned value.
func (p *ParamBuffer) U32(v uint32) *ParamBuffer {
	binary.LittleEndian.PutUint32(p.grow(4, 4), v)
	return p
}

// I32 appends a 32-bit signed value (int).
func (p *ParamBuffer) I32(v int32) *ParamBuffer { return p.U32(uint32(v)) }

// U64 appends a 64-bit unsigned value (size_t, uint64_t).
func (p *ParamBuffer) U64(v uint64) *ParamBuffer {
	binary.LittleEndian.PutUint64(p.grow(8, 8), v)
	return p
}

// I64 appends a 64-bit signed value.
func (p *ParamBuffer) I64(v int64) *ParamBuffer { return p.U64(uint64(v)) }

// F32 appends a float.
func (p *ParamBuffer) F32(v float32) *ParamBuffer { return p.U32(math.Float32bits(v)) }

// F64 appends a double.
func (p *ParamBuffer) F64(v float64) *ParamBuffer { return p.U64(math.Float64bits(v)) }

// Ptr appends a device pointer.
func (p *ParamBuffer) Ptr(v DevicePtr) *ParamBuffer { return p.U64(uint64(v)) }

// Struct appends a struct passed by value: b is its bytes exactly as the
// device code lays it out (trailing padding included) and align its
// alignment (the largest member alignment, or its __align__).
func (p *ParamBuffer) Struct(b []byte, align int) *ParamBuffer {
	if p.err != nil {
		return p
	}
	if align <= 0 || align > 16 || align&(align-1) != 0 {
		p.err = fmt.Errorf("cuda: ParamBuffer.Struct: alignment %d is not a power of two in [1,16]", align)
		return p
	}
	copy(p.grow(align, len(b)), b)
	return p
}

package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParamBufferPacking(t *testing.T) {
	// Each want is the byte image a C compiler gives the parameter list,
	// written out by hand: values little-endian at offsets aligned to their size.
	tests := []struct {
		name string
		fill func(p *ParamBuffer)
		want []byte
	}{
		{"u32 then u64 pads 4", func(p *ParamBuffer) { p.U32(0x11223344).U64(0x0102030405060708) }, []byte{
			0x44, 0x33, 0x22, 0x11, 0, 0, 0, 0,
			0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		}},
		{"ptr, i32, i32, ptr", func(p *ParamBuffer) { p.Ptr(0x7f0000001000).I32(-1).I32(7).Ptr(0x10) }, []byte{
			0x00, 0x10, 0, 0, 0, 0x7f, 0, 0,
			0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0,
			0x10, 0, 0, 0, 0, 0, 0, 0,
		}},
		{"u8, u16, f32, f64", func(p *ParamBuffer) { p.U8(1).U16(0xabcd).F32(1.0).F64(-2.0) }, []byte{
			1, 0, 0xcd, 0xab, 0x00, 0x00, 0x80, 0x3f, // u8@0, pad, u16@2, f32@4
			0, 0, 0, 0, 0, 0, 0, 0xc0, // f64@8
		}},
		{"u32, 12-byte struct aligned 4, u64", func(p *ParamBuffer) {
			p.U32(5).Struct([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 4).U64(9)
		}, []byte{
			5, 0, 0, 0,
			1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
			9, 0, 0, 0, 0, 0, 0, 0,
		}},
		{"u8 then 16-byte struct aligned 16", func(p *ParamBuffer) {
			p.U8(0xee).Struct([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 16)
		}, []byte{
			0xee, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
			1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
		}},
		{"i64 then u32 (no tail padding)", func(p *ParamBuffer) { p.I64(-2).U32(3) }, []byte{
			0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
			3, 0, 0, 0,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewParamBuffer(4) // small: exercise growth too
			tc.fill(p)
			require.NoError(t, p.Err())
			assert.Equal(t, tc.want, p.Bytes())
			assert.Equal(t, len(tc.want), p.Len())
		})
	}
}

func TestParamBufferResetZeroesPadding(t *testing.T) {
	p := NewParamBuffer(64)
	p.U64(^uint64(0)).U64(^uint64(0)) // dirty the storage
	p.Reset().U8(1).U32(2)
	assert.Equal(t, []byte{1, 0, 0, 0, 2, 0, 0, 0}, p.Bytes(), "padding must be zero after reuse")
}

func TestParamBufferReuseDoesNotAllocate(t *testing.T) {
	p := NewParamBuffer(64)
	allocs := testing.AllocsPerRun(100, func() {
		p.Reset().Ptr(0x1000).Ptr(0x2000).U64(1 << 20).U32(3).I32(-1)
	})
	assert.Zero(t, allocs)
}

func TestParamBufferBadStructAlignment(t *testing.T) {
	for _, align := range []int{0, -4, 3, 32} {
		p := NewParamBuffer(16)
		p.U32(1).Struct([]byte{1, 2}, align).U32(2)
		require.Error(t, p.Err(), "align %d", align)
		assert.Contains(t, p.Err().Error(), "alignment")
		assert.Nil(t, p.Bytes(), "no buffer is handed out after a bad argument")
		p.Reset()
		assert.NoError(t, p.Err())
	}
}

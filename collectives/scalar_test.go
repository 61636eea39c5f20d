package collectives

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFloat8TypesAndPreMulSum(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  DataType
	}{
		{[]string{"f8e4m3", "float8e4m3", "FP8E4M3", "e4m3"}, Float8E4M3},
		{[]string{"f8e5m2", "float8e5m2", "fp8e5m2", "e5m2"}, Float8E5M2},
	} {
		for _, n := range tc.names {
			got, err := ParseDataType(n)
			require.NoError(t, err, n)
			assert.Equal(t, tc.want, got, n)
		}
		assert.Equal(t, 1, tc.want.Size())
		assert.True(t, tc.want.IsFloat() && tc.want.IsFloat8())
		assert.Equal(t, tc.names[0], tc.want.String())
	}
	assert.Equal(t, DataType(10), Float8E4M3, "ncclFloat8e4m3")
	assert.Equal(t, DataType(11), Float8E5M2, "ncclFloat8e5m2")
	assert.Len(t, AllDataTypes(), 12)
	assert.False(t, DataType(12).Valid())

	for _, n := range []string{"mulsum", "PreMulSum"} {
		op, err := ParseOp(n)
		require.NoError(t, err, n)
		assert.Equal(t, PreMulSum, op)
	}
	assert.Equal(t, "mulsum", PreMulSum.String())
	assert.NotContains(t, AllOps(), PreMulSum, "AllOps are the ops that need no scalar")
	assert.True(t, PreMulSum.Valid())
	assert.False(t, Op(6).Valid())
}

func TestScalarOf(t *testing.T) {
	for _, tc := range []struct {
		t    DataType
		v    float64
		bits uint64
	}{
		{Float32, 0.5, uint64(math.Float32bits(0.5))},
		{Float64, -3, math.Float64bits(-3)},
		{Float16, 1.5, 0x3e00},
		{BFloat16, -2, 0xc000},
		{Float8E4M3, 0.75, 0x34}, // 1.1b x 2^-1: exponent 6, mantissa 4
		{Float8E5M2, 1e9, 0x7b},  // saturates to 57344
		{Int8, -2, 0xfe},
		{Int32, 7.9, 7}, // truncated toward zero
		{Uint64, 9, 9},
	} {
		s, err := ScalarOf(tc.t, tc.v)
		require.NoError(t, err)
		assert.Equal(t, tc.bits, s.Bits, "%s %g", tc.t, tc.v)
		assert.Zero(t, s.Ptr)
		b := make([]byte, 8)
		for i := range b {
			b[i] = byte(tc.bits >> (8 * i))
		}
		fb, err := ScalarFromBytes(tc.t, b)
		require.NoError(t, err)
		assert.Equal(t, s, fb, "%s: from the element's bytes", tc.t)
	}
	s, err := ScalarOf(Float8E4M3, 0.75)
	require.NoError(t, err)
	assert.Equal(t, 0.75, s.Float(Float8E4M3))
	s, err = ScalarOf(Int8, -2)
	require.NoError(t, err)
	assert.Equal(t, -2.0, s.Float(Int8))
	_, err = ScalarOf(DataType(99), 1)
	require.ErrorIs(t, err, ErrUnknownDataType)
	_, err = ScalarFromBytes(Float64, []byte{1, 2})
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.Equal(t, Scalar{Ptr: 0x1000}, ScalarAt(0x1000))
}

func TestValidateScalarAddress(t *testing.T) {
	a := Args{Coll: AllReduce, Send: 0x1000, Recv: 0x2000, Count: 4, Type: Float32, Op: PreMulSum, Scalar: ScalarAt(0x3002)}
	err := a.Validate(0, 2)
	require.ErrorIs(t, err, ErrMisaligned)
	assert.Contains(t, err.Error(), "scalar address 0x3002")
	a.Scalar = ScalarAt(0x3004)
	require.NoError(t, a.Validate(0, 2))
	a.Op, a.Scalar = Sum, ScalarAt(0x3002) // ignored by other ops
	require.NoError(t, a.Validate(0, 2))
}

package gpu

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// A PreMulSum launch carries its scalar at Params.reserved[1] (offset 192):
// the raw bits, or the address with kFlagScalarDevice; it never takes the
// copy engines, nor the stash.
func TestPreMulSumParams(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 2, Config{Algo: "ce"})
	be, drv := bes[0], drvs[0]
	for _, tc := range []struct {
		name      string
		scalar    collectives.Scalar
		count     int
		wantWord  uint64
		wantFlags uint32
	}{
		{"by value", collectives.Scalar{Bits: 0x3f000000}, 1000, 0x3f000000, 0},
		{"by address", collectives.ScalarAt(0xdead000), 1 << 20, 0xdead000, flagScalarDevice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drv.launches = nil
			a := collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x2000, Count: tc.count,
				Type: collectives.Float32, Op: collectives.PreMulSum, Scalar: tc.scalar}
			require.NoError(t, be.Run(context.Background(), &a))
			require.Len(t, drv.launches, 1)
			l := drv.launches[0]
			assert.True(t, strings.HasSuffix(l.name, "_f32_premulsum"), l.name)
			assert.NotContains(t, l.name, "cereduce")
			assert.Equal(t, tc.wantWord, u64at(l.params, 192))
			assert.Equal(t, tc.wantFlags, u32at(l.params, 252))
			assert.Zero(t, l.cfg.SharedMem)
		})
	}
}

// A fatbin without the 8-bit float and PreMulSum kernels still loads; only
// the calls that need them fail, naming the kernel, and launch nothing.
func TestMissingOptionalKernels(t *testing.T) {
	for _, algo := range []string{"", "ce"} { // (the copy engines' kernel is missing too)
		t.Run("algo="+algo, func(t *testing.T) { missingOptionalKernels(t, algo) })
	}
}

func missingOptionalKernels(t *testing.T, algo string) {
	bes, drvs, _ := newFakeBackendsWith(t, 2, Config{Algo: algo}, func(_ int, d *fakeDriver) {
		d.missing = func(n string) bool { return strings.Contains(n, "_f8e") || strings.HasSuffix(n, "_premulsum") }
	})
	be, drv := bes[0], drvs[0]
	drv.launches = nil
	for _, a := range []collectives.Args{
		{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x2000, Count: 9, Type: collectives.Float8E4M3, Op: collectives.Sum},
		{Coll: collectives.ReduceScatter, Send: 0x1000, Recv: 0x2000, Count: 9, Type: collectives.Int32, Op: collectives.PreMulSum},
	} {
		err := be.Run(context.Background(), &a)
		require.ErrorIs(t, err, collectives.ErrNotSupported)
		assert.Contains(t, err.Error(), "rebuild the kernels")
	}
	assert.Empty(t, drv.launches)
	a := collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x2000, Count: 9, Type: collectives.Float32, Op: collectives.Sum}
	require.NoError(t, be.Run(context.Background(), &a))
	assert.Len(t, drv.launches, 1)
}

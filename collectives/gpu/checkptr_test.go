package gpu

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda/cudatest"
)

func TestCheckPointers(t *testing.T) {
	fake := cudatest.New()
	ctx := cudatest.Ctx(0)
	buf, err := fake.MemAlloc(ctx, 4096)
	require.NoError(t, err)
	other, err := fake.MemAlloc(cudatest.Ctx(1), 4096)
	require.NoError(t, err)
	p := uintptr(buf)
	for _, tc := range []struct {
		name string
		a    collectives.Args
		rank int
		want string // "" for no error
	}{
		{"whole buffer", collectives.Args{Coll: collectives.AllReduce, Send: p, Recv: p, Count: 1024, Type: collectives.Float32}, 0, ""},
		{"inside", collectives.Args{Coll: collectives.AllReduce, Send: p + 1024, Recv: p + 2048, Count: 512, Type: collectives.Float32}, 0, ""},
		{"count beyond", collectives.Args{Coll: collectives.AllReduce, Send: p, Recv: p + 8, Count: 1024, Type: collectives.Float32}, 0,
			"all_reduce: recv buffer " + hex(p+8) + " + 4096 bytes runs 8 bytes past the end of its allocation"},
		{"allgather counts ranks", collectives.Args{Coll: collectives.AllGather, Send: p, Recv: p, Count: 1024, Type: collectives.Float32}, 0,
			"recv buffer " + hex(p) + " + 8192 bytes runs 4096 bytes past"},
		{"host pointer", collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: p, Count: 4, Type: collectives.Float32}, 0,
			"all_reduce: send buffer 0x1000 is not device memory of device 0"},
		{"another context's memory", collectives.Args{Coll: collectives.AllReduce, Send: p, Recv: uintptr(other), Count: 4, Type: collectives.Float32}, 0,
			"recv buffer " + hex(uintptr(other)) + " is not device memory"},
		{"broadcast non-root send unused", collectives.Args{Coll: collectives.Broadcast, Send: 0x1000, Recv: p, Count: 4, Type: collectives.Float32, Root: 1}, 0, ""},
		{"reduce non-root recv unused", collectives.Args{Coll: collectives.Reduce, Send: p, Recv: 0x1000, Count: 4, Type: collectives.Float32, Root: 1}, 0, ""},
		{"count 0", collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x1000, Type: collectives.Float32}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkPointers(fake, ctx, 0, tc.rank, 2, &tc.a)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, collectives.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	require.NoError(t, fake.MemFree(ctx, buf))
	a := collectives.Args{Coll: collectives.AllReduce, Send: p, Recv: p, Count: 4, Type: collectives.Float32}
	err = checkPointers(fake, ctx, 0, 0, 2, &a)
	require.ErrorIs(t, err, collectives.ErrInvalidArgument, "a freed buffer")
}

func hex(p uintptr) string { return fmt.Sprintf("%#x", p) }

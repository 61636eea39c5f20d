package gpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// TestProgrammaticLaunch: the collective kernels launch with programmatic
// stream serialization on compute capability 9.0 and later, unless
// GOCCL_TUNE turns it off; never on older GPUs, where the kernels cannot
// wait for their predecessor.
func TestProgrammaticLaunch(t *testing.T) {
	for _, tc := range []struct {
		name string
		cc   int
		tune string
		want bool
	}{
		{"hopper", 9, "", true},
		{"blackwell", 10, "", true},
		{"ampere", 8, "", false},
		{"hopper, turned off", 9, "pdl=0", false},
		{"hopper, turned on", 9, "pdl=1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvTune, tc.tune)
			bes, drvs, _ := newFakeBackendsWith(t, 2, Config{}, func(_ int, d *fakeDriver) { d.ccMajor = tc.cc })
			for _, a := range []collectives.Args{
				{Coll: collectives.AllReduce, Count: 5, Type: collectives.Float32, Op: collectives.Sum},
				{Coll: collectives.AllReduce, Count: 8 << 20, Type: collectives.BFloat16, Op: collectives.Max},
				{Coll: collectives.ReduceScatter, Count: 1 << 20, Type: collectives.Int32, Op: collectives.Sum},
				{Coll: collectives.Broadcast, Count: 100, Type: collectives.Uint8},
			} {
				a.Send, a.Recv = 0x1000, 0x2000
				drvs[0].launches = nil
				require.NoError(t, bes[0].Run(context.Background(), &a))
				require.Len(t, drvs[0].launches, 1, "%s", a.Coll)
				assert.Equal(t, tc.want, drvs[0].launches[0].cfg.Programmatic, "%s", drvs[0].launches[0].name)
			}
		})
	}
}

// TestProgrammaticLaunchSparesCopyEngineKernels: the copy-engine
// reduction's kernels follow stream waits, not a kernel, and launch the
// ordinary way even where the collective kernels launch programmatically.
func TestProgrammaticLaunchSparesCopyEngineKernels(t *testing.T) {
	ceDirectTune(t)
	bes, drvs, _ := newFakeBackendsWith(t, 2, Config{}, func(_ int, d *fakeDriver) { d.ccMajor = 9 })
	size := uint64(2*(40001+5)*4 + simGuard)
	recv, _ := allocAll(t, bes, size)
	send, _ := allocAll(t, bes, size)
	require.Equal(t, "ce", path(t, bes, drvs, func(r int) collectives.Args {
		return collectives.Args{Coll: collectives.AllReduce, Send: send[r], Recv: recv[r], Count: 40001,
			Type: collectives.Int32, Op: collectives.Sum, Stream: uintptr(userStream)}
	}))
	for r := range 2 {
		require.NotEmpty(t, drvs[r].launches)
		for _, l := range drvs[r].launches {
			assert.False(t, l.cfg.Programmatic, "rank %d %s", r, l.name)
		}
	}
}

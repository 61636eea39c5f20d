package comm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

func hostComms(t *testing.T, n int) []*Comm {
	t.Helper()
	devs := make([]int, n)
	comms, err := InitAll(context.Background(), devs, Options{Backend: BackendHost, Env: map[string]string{}, Logger: discardLogger(), Timeout: 30 * time.Second, HeartbeatInterval: testHeartbeat})
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, err := range eachRank(comms, func(c *Comm) error { return c.Close() }) {
			assert.NoError(t, err)
		}
	})
	return comms
}

func requireAll(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

type myInt32 int32

func TestDataTypeOf(t *testing.T) {
	assert.Equal(t, Int8, DataTypeOf[int8]())
	assert.Equal(t, Uint8, DataTypeOf[uint8]())
	assert.Equal(t, Int32, DataTypeOf[int32]())
	assert.Equal(t, Int32, DataTypeOf[myInt32]())
	assert.Equal(t, Uint32, DataTypeOf[uint32]())
	assert.Equal(t, Int64, DataTypeOf[int64]())
	assert.Equal(t, Uint64, DataTypeOf[uint64]())
	assert.Equal(t, Float32, DataTypeOf[float32]())
	assert.Equal(t, Float64, DataTypeOf[float64]())
	assert.Equal(t, Float16, DataTypeOf[Float16Bits]())
	assert.Equal(t, BFloat16, DataTypeOf[BFloat16Bits]())
}

// Every typed collective against a reference computed here, on random
// data, with poisoned outputs.
func TestSliceCollectives(t *testing.T) {
	const n, count = 3, 1000
	comms := hostComms(t, n)
	rng := rand.New(rand.NewPCG(7, 8))
	in := make([][]int64, n)
	for r := range in {
		in[r] = make([]int64, count*n)
		for i := range in[r] {
			in[r][i] = rng.Int64N(1 << 40)
		}
	}
	poison := func(k int) []int64 {
		s := make([]int64, k)
		for i := range s {
			s[i] = -7
		}
		return s
	}
	sum := func(i int) int64 { return in[0][i] + in[1][i] + in[2][i] }

	out := make([][]int64, n)
	requireAll(t, eachRank(comms, func(c *Comm) error {
		out[c.Rank()] = poison(count)
		return AllReduceSlice(context.Background(), c, in[c.Rank()][:count], out[c.Rank()], Sum)
	}))
	for r := range out {
		for i, v := range out[r] {
			require.Equal(t, sum(i), v, "AllReduce rank %d element %d", r, i)
		}
	}

	requireAll(t, eachRank(comms, func(c *Comm) error {
		out[c.Rank()] = poison(count)
		return BroadcastSlice(context.Background(), c, in[c.Rank()][:count], out[c.Rank()], 2)
	}))
	for r := range out {
		require.Equal(t, in[2][:count], out[r], "Broadcast rank %d", r)
	}

	requireAll(t, eachRank(comms, func(c *Comm) error {
		var recv []int64
		if c.Rank() == 1 {
			recv = poison(count)
			out[1] = recv
		}
		return ReduceSlice(context.Background(), c, in[c.Rank()][:count], recv, Max, 1)
	}))
	for i, v := range out[1] {
		require.Equal(t, max(in[0][i], in[1][i], in[2][i]), v, "Reduce element %d", i)
	}

	requireAll(t, eachRank(comms, func(c *Comm) error {
		out[c.Rank()] = poison(count * n)
		return AllGatherSlice(context.Background(), c, in[c.Rank()][:count], out[c.Rank()])
	}))
	for r := range out {
		for p := 0; p < n; p++ {
			require.Equal(t, in[p][:count], out[r][p*count:(p+1)*count], "AllGather rank %d block %d", r, p)
		}
	}

	requireAll(t, eachRank(comms, func(c *Comm) error {
		out[c.Rank()] = poison(count)
		return ReduceScatterSlice(context.Background(), c, in[c.Rank()], out[c.Rank()], Sum)
	}))
	for r := range out {
		for i, v := range out[r] {
			require.Equal(t, sum(r*count+i), v, "ReduceScatter rank %d element %d", r, i)
		}
	}

	// In place: one slice as both.
	bufs := make([][]float32, n)
	requireAll(t, eachRank(comms, func(c *Comm) error {
		b := make([]float32, 257)
		for i := range b {
			b[i] = float32(c.Rank()*1000 + i)
		}
		bufs[c.Rank()] = b
		return AllReduceSlice(context.Background(), c, b, b, Sum)
	}))
	for r := range bufs {
		for i, v := range bufs[r] {
			require.Equal(t, float32(3*i+3000), v, "in-place rank %d element %d", r, i)
		}
	}
}

// Wrong lengths and overlaps fail on the rank that made them, name the
// argument, and launch nothing: the next valid call still pairs up.
func TestSliceCallErrors(t *testing.T) {
	comms := hostComms(t, 2)
	c := comms[0]
	ctx := context.Background()
	buf := make([]float32, 64)
	for _, tc := range []struct {
		name string
		call func() error
		is   error
		text string
	}{
		{"allreduce lengths", func() error { return AllReduceSlice(ctx, c, buf[:10], buf[10:30], Sum) }, collectives.ErrInvalidCount, "AllReduceSlice: recv has 20 elements, want 10"},
		{"allgather recv", func() error { return AllGatherSlice(ctx, c, buf[:8], buf[8:20]) }, collectives.ErrInvalidCount, "recv has 12 elements, want 16"},
		{"reducescatter send", func() error { return ReduceScatterSlice(ctx, c, buf[:9], buf[10:14], Sum) }, collectives.ErrInvalidCount, "send has 9 elements, want 8"},
		{"broadcast root", func() error { return BroadcastSlice(ctx, c, buf[:3], buf[4:8], 0) }, collectives.ErrInvalidCount, "send has 3 elements, want 4"},
		{"reduce root", func() error { return ReduceSlice(ctx, c, buf[:3], buf[4:8], Sum, 0) }, collectives.ErrInvalidCount, "recv has 4 elements, want 3"},
		{"overlap", func() error { return AllReduceSlice(ctx, c, buf[:10], buf[5:15], Sum) }, collectives.ErrInvalidArgument, "overlap"},
		{"alltoall in place", func() error { return AllToAllSlice(ctx, c, buf[:4], buf[:4]) }, collectives.ErrInvalidArgument, "same slice"},
		{"alltoall multiple", func() error { return AllToAllSlice(ctx, c, buf[:3], buf[4:7]) }, collectives.ErrInvalidCount, "not a multiple"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, tc.is)
			assert.ErrorIs(t, err, collectives.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.text)
			assert.Contains(t, err.Error(), "rank 0")
		})
	}
	require.NoError(t, c.Err())
	// In-place AllGather (send is this rank's block of recv) is allowed.
	requireAll(t, eachRank(comms, func(c *Comm) error {
		recv := make([]int32, 8)
		for i := range recv {
			recv[i] = int32(100*c.Rank() + i)
		}
		mine := recv[c.Rank()*4 : (c.Rank()+1)*4]
		if err := AllGatherSlice(ctx, c, mine, recv); err != nil {
			return err
		}
		want := []int32{0, 1, 2, 3, 104, 105, 106, 107}
		if !assert.Equal(t, want, recv) {
			return assert.AnError
		}
		return nil
	}))

	gpu := &Comm{rank: 1, size: 2, backendName: BackendGPU}
	err := AllReduceSlice(ctx, gpu, buf[:4], buf[4:8], Sum)
	require.ErrorIs(t, err, collectives.ErrNotSupported)
	assert.Contains(t, err.Error(), "DeviceBuffer")
}

func TestSliceCallDoesNotAllocate(t *testing.T) {
	c := hostComms(t, 1)[0]
	send, recv := make([]float64, 512), make([]float64, 512)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		if err := AllReduceSlice(ctx, c, send, recv, Sum); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

func TestDeviceBufferChecks(t *testing.T) {
	comms := hostComms(t, 2)
	ctx := context.Background()
	mem := make([]float32, 64)
	whole := DeviceBuffer{Ptr: addr(mem), Bytes: 256}
	half, err := whole.Slice(128, 128)
	require.NoError(t, err)
	assert.Equal(t, whole.Ptr+128, half.Ptr)
	_, err = whole.Slice(200, 100)
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)

	c := comms[0]
	for _, tc := range []struct {
		name string
		call func() error
		text string
	}{
		{"allreduce recv", func() error { return c.AllReduceBuffer(ctx, whole, half, 40, Float32, Sum, 0) }, "all_reduce: recv buffer holds 128 bytes, the call needs 40 elements of float (4 B each)"},
		{"allgather send", func() error { return c.AllGatherBuffer(ctx, half, whole, 33, Float32, 0) }, "send buffer holds 128 bytes, the call needs 33 elements"},
		{"allgather ranks", func() error { return c.AllGatherBuffer(ctx, whole, half, 17, Float32, 0) }, "recv buffer holds 128 bytes, the call needs 17 x 2 ranks elements"},
		{"reducescatter send", func() error { return c.ReduceScatterBuffer(ctx, half, half, 32, Float32, Sum, 0) }, "send buffer holds 128 bytes"},
		{"send", func() error { return c.SendBuffer(ctx, half, 33, Float32, 1, 0) }, "Send: buf buffer holds 128 bytes"},
		{"overflow", func() error { return c.AllReduceBuffer(ctx, whole, whole, 1<<62, Float64, Sum, 0) }, "needs 4611686018427387904 elements"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, collectives.ErrInvalidCount)
			assert.Contains(t, err.Error(), tc.text)
		})
	}
	// Roles a rank does not use are not checked: a Broadcast's non-root send.
	bufs := make([][]float32, 2)
	requireAll(t, eachRank(comms, func(c *Comm) error {
		b := make([]float32, 16)
		for i := range b {
			b[i] = float32(c.Rank() + 1)
		}
		bufs[c.Rank()] = b
		buf := DeviceBuffer{Ptr: addr(b), Bytes: 64}
		send := buf
		if c.Rank() != 0 {
			send = DeviceBuffer{}
		}
		return c.BroadcastBuffer(ctx, send, buf, 16, Float32, 0, 0)
	}))
	for r := range bufs {
		for _, v := range bufs[r] {
			require.Equal(t, float32(1), v)
		}
	}
}

// Nobody leaves Barrier before everyone has entered it.
func TestBarrier(t *testing.T) {
	const n = 3
	comms := hostComms(t, n)
	var entered atomic.Int32
	for round := 1; round <= 20; round++ {
		requireAll(t, eachRank(comms, func(c *Comm) error {
			entered.Add(1)
			if err := c.Barrier(context.Background()); err != nil {
				return err
			}
			if got := entered.Load(); got < int32(round*n) {
				t.Errorf("rank %d left round %d's barrier with %d entries", c.Rank(), round, got)
			}
			return c.Barrier(context.Background()) // no rank starts the next round early
		}))
	}
}

// A context that has already ended returns ctx.Err(), launches nothing
// and leaves the communicator usable on every rank, for calls, groups and
// Barrier. The call still takes its number, so every rank makes the same
// cancelled calls here: a rank that made a call its peers did not would
// meet them in calls of different numbers.
func TestCancelledContextLaunchesNothing(t *testing.T) {
	comms := hostComms(t, 2)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	buf := make([]float32, 16)
	p := addr(buf)
	for r, c := range comms {
		for _, tc := range []struct {
			name string
			call func() error
		}{
			{"allreduce", func() error { return c.AllReduce(done, p, p, 16, Float32, Sum, 0) }},
			{"typed", func() error { return AllReduceSlice(done, c, buf, buf, Sum) }},
			{"barrier", func() error { return c.Barrier(done) }},
			{"send", func() error { return c.Send(done, p, 16, Float32, 1-r, 0) }},
		} {
			t.Run(fmt.Sprintf("rank%d/%s", r, tc.name), func(t *testing.T) {
				err := tc.call()
				assert.Equal(t, context.Canceled, err, "ctx.Err() itself")
				assert.NoError(t, c.Err())
			})
		}
	}
	t.Run("group", func(t *testing.T) {
		g := NewGroup()
		require.NoError(t, g.AllReduce(comms[0], p, p, 16, Float32, Sum, 0))
		require.NoError(t, g.AllReduce(comms[1], p, p, 16, Float32, Sum, 0))
		assert.ErrorIs(t, g.Run(done), context.Canceled)
		assert.NoError(t, comms[0].Err())
	})
	// Every rank is still in step: a real call pairs up and is right.
	bufs := make([][]int32, 2)
	requireAll(t, eachRank(comms, func(c *Comm) error {
		b := []int32{int32(c.Rank() + 1), 10}
		bufs[c.Rank()] = b
		return AllReduceSlice(context.Background(), c, b, b, Sum)
	}))
	assert.Equal(t, []int32{3, 20}, bufs[0])
	assert.Equal(t, []int32{3, 20}, bufs[1])
}

package gpu

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// launchCounter is the fake driver with a launch that only counts, so that
// the benchmark measures goccl's enqueue path and not the fake's log.
type launchCounter struct {
	*fakeDriver
	n atomic.Int64
}

func (l *launchCounter) LaunchKernel(cuda.Context, cuda.Function, cuda.LaunchConfig, []byte) error {
	l.n.Add(1)
	return nil
}

// BenchmarkEnqueueAllReduce measures the host CPU cost of one AllReduce
// call on the GPU backend up to the launch (argument checks, algorithm
// choice, parameter packing, kernel lookup): DESIGN §9 asks for ≤ 2 us.
//
//	go test -run XXX -bench Enqueue -benchmem ./collectives/gpu/
func BenchmarkEnqueueAllReduce(b *testing.B) {
	for _, size := range []int{8, 1 << 20, 256 << 20} {
		b.Run(byteSize(size), func(b *testing.B) {
			lc := &launchCounter{fakeDriver: newFakeDriver()}
			mk := func(_ context.Context, _ string, _ cuda.Driver, bs transport.Bootstrap, _ cuda.Device, _ cuda.Context) (transport.Mapper, error) {
				return &fakeMapper{b: bs}, nil
			}
			g := transporttest.NewGroup(1)
			be, err := newBackend(context.Background(), lc, g.Rank(0), Config{}, []byte("fatbin"), mk)
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			a := collectives.Args{Coll: collectives.AllReduce, Send: 0x10000000, Recv: 0x20000000,
				Count: size / 4, Type: collectives.Float32, Op: collectives.Sum, Stream: 0x55}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := a.Validate(0, 1); err != nil {
					b.Fatal(err)
				}
				if err := be.Run(ctx, &a); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if lc.n.Load() < int64(b.N) {
				b.Fatalf("%d launches for %d calls", lc.n.Load(), b.N)
			}
		})
	}
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// BenchmarkEnqueueCE measures the host CPU cost of one copy-engine call
// on the GPU backend, every stream operation and launch enqueued on a
// driver that records nothing: AllGather and Broadcast (one copy per peer
// between two handshakes) and AllReduce and ReduceScatter in direct mode
// (2 ranks, both buffers registered, a handful of chunks). Only rank 0
// enqueues; nothing runs.
//
//	go test -run XXX -bench EnqueueCE -benchmem ./collectives/gpu/
func BenchmarkEnqueueCE(b *testing.B) {
	const size = 256 << 20
	bes, drvs, _ := newFakeBackends(b, 2, Config{})
	recv, _ := allocAll(b, bes, 2*size)
	send, _ := allocAll(b, bes, 2*size)
	drvs[0].quiet = true
	for _, coll := range []collectives.Collective{collectives.AllGather, collectives.Broadcast, collectives.AllReduce, collectives.ReduceScatter} {
		b.Run(coll.String(), func(b *testing.B) {
			a := collectives.Args{Coll: coll, Send: send[0], Recv: recv[0], Count: size / 4, Type: collectives.Float32,
				Op: collectives.Sum, Stream: uintptr(userStream)}
			ctx := context.Background()
			seq := bes[0].ce.seq
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := bes[0].Run(ctx, &a); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if bes[0].ce.seq == seq {
				b.Fatalf("%s did not take the copy engines", coll)
			}
		})
	}
}

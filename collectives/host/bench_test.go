package host

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/goccl/goccl/collectives"
)

var benchSizes = []struct {
	name  string
	bytes int
}{{"8B", 8}, {"256B", 256}, {"4KiB", 4 << 10}, {"1MiB", 1 << 20}, {"64MiB", 64 << 20}}

// BenchmarkAllReduce runs float32 sum AllReduce on in-process ranks and
// reports nccl-tests' bus bandwidth, 2(n-1)/n * bytes / time.
func BenchmarkAllReduce(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, algo := range []collectives.Algorithm{"", collectives.OneShot, collectives.TwoShot} {
			for _, sz := range benchSizes {
				name := fmt.Sprintf("ranks=%d/algo=%s/%s", n, algo, sz.name)
				if algo == "" {
					name = fmt.Sprintf("ranks=%d/algo=auto/%s", n, sz.name)
				}
				b.Run(name, func(b *testing.B) {
					benchAllReduce(b, newJob(b, n, Config{Algo: string(algo)}), sz.bytes)
				})
			}
		}
	}
}

// BenchmarkAllReduceAlloc is BenchmarkAllReduce's automatic choice on
// buffers from Alloc: the direct path.
func BenchmarkAllReduceAlloc(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, sz := range benchSizes {
			b.Run(fmt.Sprintf("ranks=%d/%s", n, sz.name), func(b *testing.B) {
				j := newJob(b, n, Config{})
				size := 2*sz.bytes + 128
				j.arenas = make([]*arena, n)
				regs := make([]collectives.Registration, n)
				for r, err := range j.each(func(r int) error { // collective
					p, reg, err := j.bes[r].(collectives.Registrar).Alloc(context.Background(), uint64(size))
					if err == nil {
						j.arenas[r], regs[r] = &arena{mem: hostBytes(p, size)}, reg
					}
					return err
				}) {
					if err != nil {
						b.Fatalf("rank %d: %v", r, err)
					}
				}
				b.Cleanup(func() {
					for _, reg := range regs {
						_ = reg.Close(context.Background())
					}
				})
				benchAllReduce(b, j, sz.bytes)
			})
		}
	}
}

// benchAllReduce times float32 sum AllReduce of bytes on every rank of j
// (buffers from j.buf) and reports nccl-tests' bus bandwidth.
func benchAllReduce(b *testing.B, j *job, bytes int) {
	n := j.n
	args := make([]collectives.Args, n)
	bufs := make([][]byte, 0, 2*n) // args hold only addresses
	for r := range args {
		send, recv := j.buf(r, bytes), j.buf(r, bytes)
		bufs = append(bufs, send, recv)
		fill(j.rng, collectives.Float32, collectives.Sum, send)
		args[r] = collectives.Args{Coll: collectives.AllReduce, Send: addr(send), Recv: addr(recv),
			Count: bytes / 4, Type: collectives.Float32, Op: collectives.Sum}
	}
	b.SetBytes(int64(bytes))
	b.ResetTimer()
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			for i := 0; i < b.N; i++ {
				if err := j.bes[r].Run(context.Background(), &args[r]); err != nil {
					b.Error(err)
					return
				}
			}
		}(r)
	}
	wg.Wait()
	b.StopTimer()
	runtime.KeepAlive(bufs)
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(2*(n-1))/float64(n)*float64(bytes)/sec/1e9, "busbw-GB/s")
	b.ReportMetric(sec*1e6, "us/op")
}

// BenchmarkMemcpy is the yardstick: one core copying the same bytes.
func BenchmarkMemcpy(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			src, dst := alloc(sz.bytes), alloc(sz.bytes)
			b.SetBytes(int64(sz.bytes))
			for i := 0; i < b.N; i++ {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkReduceKernel measures one two-source reduction pass (no
// synchronization), per type.
func BenchmarkReduceKernel(b *testing.B) {
	const bytes = 1 << 20
	for _, dt := range collectives.AllDataTypes() {
		b.Run(dt.String(), func(b *testing.B) {
			x, y, d := alloc(bytes), alloc(bytes), alloc(bytes)
			var sc scratch
			red := reducer(dt, collectives.Sum)
			srcs := [][]byte{x, y}
			b.SetBytes(bytes)
			for i := 0; i < b.N; i++ {
				red(d, srcs, 2, &sc)
			}
		})
	}
}

package host

import (
	"fmt"
	"testing"

	"github.com/goccl/goccl/collectives"
)

// BenchmarkFP8Kernels: three sources into a fourth (a 3-rank reduction's
// pass), per instruction set, in ns per element; bfloat16 for scale.
func BenchmarkFP8Kernels(b *testing.B) {
	const count = 256 << 10
	types := []collectives.DataType{collectives.Float8E4M3, collectives.Float8E5M2, collectives.BFloat16}
	for _, dt := range types {
		for _, op := range []collectives.Op{collectives.Sum, collectives.Max, collectives.Avg} {
			for _, isa := range isas() {
				table := kernelsFor(isa)
				b.Run(fmt.Sprintf("%s/%s/%s", dt, op, isaName(isa)), func(b *testing.B) {
					n := count * dt.Size()
					srcs := [][]byte{alloc(n), alloc(n), alloc(n)}
					for k, s := range srcs {
						for i := range s {
							s[i] = byte(i*7 + k*13)
						}
					}
					dst := alloc(n)
					var sc scratch
					b.SetBytes(int64(n))
					for b.Loop() {
						table[dt][op](dst, srcs, len(srcs), &sc)
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/count, "ns/elem")
				})
			}
		}
	}
}

// BenchmarkFP8Scale: PreMulSum's scaling of one rank's input, per
// instruction set, in ns per element.
func BenchmarkFP8Scale(b *testing.B) {
	const count = 256 << 10
	for _, dt := range fp8Types {
		f := fp8FormatOf(dt)
		for _, isa := range isas() {
			b.Run(fmt.Sprintf("%s/%s", dt, isaName(isa)), func(b *testing.B) {
				src, dst := alloc(count), alloc(count)
				for i := range src {
					src[i] = byte(i * 7)
				}
				b.SetBytes(count)
				for b.Loop() {
					if !scaleFP8Vec(isa, f, dst, src, 0.75) {
						scaleFP8Go(dst, src, 0.75, f)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/count, "ns/elem")
			})
		}
	}
}

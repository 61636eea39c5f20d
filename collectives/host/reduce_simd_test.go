package host

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// specials are bit patterns worth meeting in every lane position: NaNs
// with several payloads and signs, infinities, zeros of both signs,
// denormals, extremes.
func specials(t collectives.DataType) [][]byte {
	var out [][]byte
	switch t {
	case collectives.Float32:
		for _, u := range []uint32{0x7fc00000, 0xffc00001, 0x7f800001, 0x7fa5a5a5, 0x7f800000, 0xff800000, 0, 0x80000000,
			1, 0x80000001, 0x007fffff, 0x7f7fffff, 0xff7fffff, 0x3f800000} {
			out = append(out, binary.LittleEndian.AppendUint32(nil, u))
		}
	case collectives.Float64:
		for _, u := range []uint64{0x7ff8000000000000, 0xfff8000000000001, 0x7ff0000000000001, 0x7ff0000000000000,
			0xfff0000000000000, 0, 1 << 63, 1, 1<<63 | 1, 0x000fffffffffffff, 0x7fefffffffffffff, 0x3ff0000000000000} {
			out = append(out, binary.LittleEndian.AppendUint64(nil, u))
		}
	default:
		n := t.Size()
		for _, fill := range []byte{0x00, 0xff, 0x7f, 0x80, 0x01} {
			b := bytes.Repeat([]byte{fill}, n)
			out = append(out, b)
			if n > 1 { // the signed extremes 0x7f.. and 0x80.. of wide lanes
				c := bytes.Repeat([]byte{0x00}, n)
				c[n-1] = fill
				out = append(out, c)
			}
		}
	}
	return out
}

func randomBuffer(rng *rand.Rand, t collectives.DataType, count int) []byte {
	es := t.Size()
	b := make([]byte, count*es)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	sp := specials(t)
	for i := 0; i < count; i++ {
		if rng.IntN(4) == 0 {
			copy(b[i*es:], sp[rng.IntN(len(sp))])
		}
	}
	return b
}

// The vector kernels give the Go kernels' bytes exactly, for every type
// and op, every instruction set this machine runs, lengths around every
// vector width and block edge, 2 to 5 sources, out of place and in place.
func TestVectorKernelsMatchScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	counts := []int{1, 7, 63, 64, 65, 127, 255, 256, 257, 1000, 2047, 2048, 2049, 4099, 9001}
	for _, isa := range isas()[1:] {
		table := kernelsFor(isa)
		for _, dt := range collectives.AllDataTypes() {
			for _, op := range collectives.AllOps() {
				name := fmt.Sprintf("%s/%s/%s", isaName(isa), dt, op)
				t.Run(name, func(t *testing.T) {
					var sc1, sc2 scratch
					for _, count := range counts {
						for nsrc := 2; nsrc <= 5; nsrc++ {
							srcs := make([][]byte, nsrc)
							for k := range srcs {
								srcs[k] = randomBuffer(rng, dt, count)
							}
							want := bytes.Repeat([]byte{0xa5}, count*dt.Size())
							scalarKernels[dt][op](want, srcs, nsrc, &sc1)
							got := bytes.Repeat([]byte{0x5a}, count*dt.Size())
							table[dt][op](got, srcs, nsrc, &sc2)
							requireSameBytes(t, dt, want, got, "count %d, %d sources", count, nsrc)

							inPlace := append([]byte(nil), srcs[0]...)
							srcs[0] = inPlace
							table[dt][op](inPlace, srcs, nsrc, &sc2)
							requireSameBytes(t, dt, want, inPlace, "in place, count %d, %d sources", count, nsrc)
						}
					}
				})
			}
		}
	}
}

func requireSameBytes(t *testing.T, dt collectives.DataType, want, got []byte, format string, args ...any) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	es := dt.Size()
	for i := 0; i < len(want); i += es {
		if !bytes.Equal(want[i:i+es], got[i:i+es]) {
			require.Failf(t, "results differ", "%s: element %d: want % x, got % x",
				fmt.Sprintf(format, args...), i/es, want[i:i+es], got[i:i+es])
		}
	}
}

// Sanity of the reference itself on the special values: min and max keep
// the first operand unless the second compares below (above) it.
func TestScalarMinMaxSemantics(t *testing.T) {
	nan := float32(math.NaN())
	d := make([]float32, 4)
	min2(d, []float32{nan, 1, 0, float32(math.Copysign(0, -1))}, []float32{1, nan, float32(math.Copysign(0, -1)), 0})
	require.True(t, math.IsNaN(float64(d[0])))
	require.Equal(t, float32(1), d[1])
	require.Equal(t, uint32(0), math.Float32bits(d[2]), "+0 kept against -0")
	require.Equal(t, uint32(0x80000000), math.Float32bits(d[3]), "-0 kept against +0")
}

// BenchmarkReduceKernels: two sources into a third, per instruction set,
// at a size that stays in L2 and one that streams from memory.
func BenchmarkReduceKernels(b *testing.B) {
	cases := []struct {
		dt collectives.DataType
		op collectives.Op
	}{
		{collectives.Float32, collectives.Sum}, {collectives.Float64, collectives.Sum}, {collectives.Int32, collectives.Sum},
		{collectives.BFloat16, collectives.Sum}, {collectives.Int8, collectives.Avg}, {collectives.Uint8, collectives.Avg},
		{collectives.Int32, collectives.Avg}, {collectives.Uint32, collectives.Avg},
	}
	for _, c := range cases {
		for _, size := range []int{256 << 10, 16 << 20} {
			for _, isa := range isas() {
				table := kernelsFor(isa)
				b.Run(fmt.Sprintf("%s/%s/%dKiB/%s", c.dt, c.op, size>>10, isaName(isa)), func(b *testing.B) {
					srcs := [][]byte{make([]byte, size), make([]byte, size)}
					dst := make([]byte, size)
					var sc scratch
					b.SetBytes(int64(size))
					for b.Loop() {
						table[c.dt][c.op](dst, srcs, 2, &sc)
					}
				})
			}
		}
	}
}

// The integer averages' vector kernels take the float or double path only
// where it is exact: divisors other than the source count (as a caller
// with more ranks than sources has), divisors a float does not hold, and
// more sources than the float path allows all give the Go kernels' bytes.
func TestVectorIntegerAverages(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		name         string
		nsrc, nranks int
	}{
		{"divisor below the source count", 5, 2},
		{"divisor 1", 3, 1},
		{"divisor above the source count", 3, 7},
		{"divisor no float holds", 3, 1<<24 + 1},
		{"largest divisor", 2, math.MaxInt32},
		{"most sources of the float path", 65536, 65536},
		{"more sources than the float path", 65537, 65537},
	}
	types := []collectives.DataType{collectives.Int8, collectives.Uint8, collectives.Int32, collectives.Uint32}
	for _, isa := range isas()[1:] {
		table := kernelsFor(isa)
		for _, dt := range types {
			// Few distinct buffers, repeated: many sources stay cheap.
			bufs := make([][]byte, 4)
			for k := range bufs {
				bufs[k] = randomBuffer(rng, dt, 1031)
			}
			for _, c := range cases {
				t.Run(fmt.Sprintf("%s/%s/%s", isaName(isa), dt, c.name), func(t *testing.T) {
					srcs := make([][]byte, c.nsrc)
					for k := range srcs {
						srcs[k] = bufs[(k*7+k/3)%len(bufs)]
					}
					var sc1, sc2 scratch
					want := bytes.Repeat([]byte{0xa5}, len(bufs[0]))
					scalarKernels[dt][collectives.Avg](want, srcs, c.nranks, &sc1)
					got := bytes.Repeat([]byte{0x5a}, len(bufs[0]))
					table[dt][collectives.Avg](got, srcs, c.nranks, &sc2)
					requireSameBytes(t, dt, want, got, "%d sources, divisor %d", c.nsrc, c.nranks)
				})
			}
		}
	}
}

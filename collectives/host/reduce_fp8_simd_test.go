package host

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/fp8"
)

// The 8-bit float vector kernels against the Go ones, byte for byte:
// every pair and every triple of codes under every op, the rounding alone
// on the float32 values around every rounding boundary, PreMulSum's
// products for every code and scalar, and long random vectors of odd
// lengths at misaligned addresses. Without the vector kernels (no cgo, or
// not x86-64) isas() has only the Go kernels and there is nothing to
// compare.

var fp8Types = []collectives.DataType{collectives.Float8E4M3, collectives.Float8E5M2}

// allCodeTuples returns nsrc sources of 256^nsrc elements holding every
// tuple of codes once: source k's element i is byte k of i.
func allCodeTuples(nsrc int) [][]byte {
	n := 1 << (8 * nsrc)
	srcs := make([][]byte, nsrc)
	for k := range srcs {
		srcs[k] = make([]byte, n)
		for i := range srcs[k] {
			srcs[k][i] = byte(i >> (8 * k))
		}
	}
	return srcs
}

func TestFP8VectorAllPairsAndTriples(t *testing.T) {
	for _, nsrc := range []int{2, 3} {
		srcs := allCodeTuples(nsrc)
		n := len(srcs[0])
		for _, dt := range fp8Types {
			for _, op := range collectives.AllOps() {
				// Avg's divisor: the source count, and one it is not.
				for _, nranks := range []int{nsrc, 5} {
					if op != collectives.Avg && nranks != nsrc {
						continue
					}
					want := bytes.Repeat([]byte{0xa5}, n)
					scalarKernels[dt][op](want, srcs, nranks, &scratch{})
					for _, isa := range isas()[1:] {
						t.Run(fmt.Sprintf("%d/%s/%s/%s/by%d", nsrc, isaName(isa), dt, op, nranks), func(t *testing.T) {
							table := kernelsFor(isa)
							got := bytes.Repeat([]byte{0x5a}, n)
							table[dt][op](got, srcs, nranks, &scratch{})
							requireSameBytes(t, dt, want, got, "%d sources", nsrc)
						})
					}
				}
			}
		}
	}
}

// narrowSamples are float32 values whose upper 16 bits take every value,
// each with low halves at and around the rounding boundaries of both
// formats' normals and subnormals (all at bit 16 or above) and a few
// others.
func narrowSamples() []float32 {
	lows := []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff, 0x1234, 0xedcb}
	out := make([]float32, 0, 1<<16*len(lows))
	for hi := uint32(0); hi < 1<<16; hi++ {
		for _, lo := range lows {
			out = append(out, math.Float32frombits(hi<<16|lo))
		}
	}
	return out
}

func TestFP8VectorNarrowing(t *testing.T) {
	src := narrowSamples()
	refs := map[collectives.DataType]func(float32) uint8{
		collectives.Float8E4M3: fp8.Float32ToE4M3,
		collectives.Float8E5M2: fp8.Float32ToE5M2,
	}
	for _, dt := range fp8Types {
		want := make([]byte, len(src))
		for i, v := range src {
			want[i] = refs[dt](v)
		}
		for _, isa := range isas() {
			t.Run(fmt.Sprintf("%s/%s", isaName(isa), dt), func(t *testing.T) {
				// Odd lengths and starts: the vector loops, then the tails.
				for _, off := range []int{0, 1, 3} {
					got := bytes.Repeat([]byte{0x5a}, len(src))
					narrowFP8Vec(isa, fp8FormatOf(dt), got[off:], src[off:])
					for i := off; i < len(src); i++ {
						if got[i] != want[i] {
							require.Failf(t, "codes differ", "%#08x (%g): want %#02x, got %#02x",
								math.Float32bits(src[i]), src[i], want[i], got[i])
						}
					}
				}
			})
		}
	}
}

// PreMulSum's products: every code times every code's value as the
// scalar, against the Go scaling and against internal/fp8 directly.
func TestFP8VectorScaling(t *testing.T) {
	src := make([]byte, 256*3+5) // every code, three times over, and a tail
	for i := range src {
		src[i] = byte(i)
	}
	for _, dt := range fp8Types {
		f := fp8FormatOf(dt)
		widen, narrow := fp8.E4M3ToFloat32, fp8.Float32ToE4M3
		if f.e5m2 {
			widen, narrow = fp8.E5M2ToFloat32, fp8.Float32ToE5M2
		}
		for c := 0; c < 256; c++ {
			scalar := widen(uint8(c))
			want := make([]byte, len(src))
			for i, b := range src {
				want[i] = narrow(float32(widen(b) * scalar))
			}
			goGot := bytes.Repeat([]byte{0x5a}, len(src))
			scaleFP8Go(goGot, src, scalar, f)
			require.Equal(t, want, goGot, "%s: Go scaling by code %#02x", dt, c)
			for _, isa := range isas()[1:] {
				for _, off := range []int{0, 1, 7} {
					got := bytes.Repeat([]byte{0x5a}, len(src))
					require.True(t, scaleFP8Vec(isa, f, got[off:], src[off:], scalar))
					require.Equal(t, bytes.Repeat([]byte{0x5a}, off), got[:off], "bytes before dst written")
					require.Equal(t, want[off:], got[off:], "%s %s: scaling by code %#02x at offset %d", isaName(isa), dt, c, off)
				}
			}
		}
	}
}

// Long random vectors, odd lengths, every source and dst starting at its
// own misalignment, 2 to 8 sources; bytes next to dst stay untouched.
func TestFP8VectorRandomVectors(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	counts := []int{63, 64, 97, 1023, blk - 1, blk + 1, 3*blk + 77, 100003}
	for _, isa := range isas()[1:] {
		table := kernelsFor(isa)
		for _, dt := range fp8Types {
			for _, op := range collectives.AllOps() {
				t.Run(fmt.Sprintf("%s/%s/%s", isaName(isa), dt, op), func(t *testing.T) {
					for _, count := range counts {
						nsrc := 2 + rng.IntN(7)
						srcs := make([][]byte, nsrc)
						for k := range srcs {
							off := rng.IntN(64)
							srcs[k] = fp8Specials(rng, dt, count+off)[off:]
						}
						want := bytes.Repeat([]byte{0xa5}, count)
						scalarKernels[dt][op](want, srcs, nsrc, &scratch{})
						off := 1 + rng.IntN(63)
						buf := bytes.Repeat([]byte{0x5a}, off+count+off)
						table[dt][op](buf[off:off+count], srcs, nsrc, &scratch{})
						requireSameBytes(t, dt, want, buf[off:off+count], "count %d, %d sources", count, nsrc)
						require.Equal(t, bytes.Repeat([]byte{0x5a}, off), buf[:off], "before dst")
						require.Equal(t, bytes.Repeat([]byte{0x5a}, off), buf[off+count:], "after dst")
					}
				})
			}
		}
	}
}

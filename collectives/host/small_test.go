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

// TestTwoSumsMatchKernels: the small calls' two-rank sums give the Go
// kernels' bits (the reference), at every size a box holds, specials
// (NaNs, infinities, signed zeros, extremes) included, into a poisoned
// destination that they must fill whole and not overrun.
func TestTwoSumsMatchKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 30))
	n := 0
	for dt, f := range twoSums {
		if f == nil {
			continue
		}
		n++
		dt := collectives.DataType(dt)
		es := dt.Size()
		sp := specials(dt)
		for _, bytesN := range []int{es, 2 * es, 24, 32, 56, 64, 128, 200, 256, boxData - boxData%es} {
			t.Run(fmt.Sprintf("%s/%dB", dt, bytesN), func(t *testing.T) {
				x, y := alloc(bytesN), alloc(bytesN)
				fill(rng, dt, collectives.Sum, x)
				fill(rng, dt, collectives.Sum, y)
				for i := 0; i+es <= bytesN && i/es < len(sp); i += es {
					copy(x[i:], sp[i/es])
					copy(y[i:], sp[(i/es+3)%len(sp)])
				}
				want := alloc(bytesN)
				scalarKernels[dt][collectives.Sum](want, [][]byte{x, y}, 2, &scratch{})
				got := bytes.Repeat([]byte{0xa5}, bytesN+8)
				f(got[:bytesN], x, y)
				for i := 0; i < bytesN; i += es {
					if bothNaN(dt, x[i:i+es], y[i:i+es]) {
						// Which NaN a sum of two gives depends on the operand
						// order Go's compiler picks (the race detector's
						// build picks another): either input's, quieted.
						g := got[i : i+es]
						require.True(t, bytes.Equal(g, quiet(dt, x[i:i+es])) || bytes.Equal(g, quiet(dt, y[i:i+es])),
							"element %d: % x + % x gave % x", i/es, x[i:i+es], y[i:i+es], g)
						copy(want[i:], g)
					}
				}
				require.Equal(t, want, got[:bytesN])
				require.Equal(t, bytes.Repeat([]byte{0xa5}, 8), got[bytesN:], "past the end")
			})
		}
	}
	require.Equal(t, 6, n, "the types with a two-rank sum")
}

func bothNaN(dt collectives.DataType, x, y []byte) bool {
	le := binary.LittleEndian
	switch dt {
	case collectives.Float32:
		return math.IsNaN(float64(math.Float32frombits(le.Uint32(x)))) && math.IsNaN(float64(math.Float32frombits(le.Uint32(y))))
	case collectives.Float64:
		return math.IsNaN(math.Float64frombits(le.Uint64(x))) && math.IsNaN(math.Float64frombits(le.Uint64(y)))
	}
	return false
}

// quiet is NaN x with its quiet bit set.
func quiet(dt collectives.DataType, x []byte) []byte {
	q := append([]byte(nil), x...)
	if dt == collectives.Float32 {
		q[2] |= 0x40
	} else {
		q[6] |= 0x08
	}
	return q
}

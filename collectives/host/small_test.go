package host

import (
	"bytes"
	"fmt"
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
				require.Equal(t, want, got[:bytesN])
				require.Equal(t, bytes.Repeat([]byte{0xa5}, 8), got[bytesN:], "past the end")
			})
		}
	}
	require.Equal(t, 6, n, "the types with a two-rank sum")
}

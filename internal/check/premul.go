package check

import "github.com/goccl/goccl/collectives"

// PreMulSum cases: each rank scales its input by its own scalar (NCCL
// lets ranks differ), the products are summed. The scalars are exact in
// every type (small integers, and for floats binary fractions that even
// E5M2 holds), so that the reference multiplies exactly; the products of
// float inputs are rounded to the type by the implementation, which the
// tolerance covers.

var (
	premulFloats   = [...]float64{0.5, 1.5, -2, 0.75, 3, -0.25, 1.25, 2.5}
	premulSigned   = [...]float64{3, -2, 5, 7, -1, 2, 9, -3}
	premulUnsigned = [...]float64{3, 2, 5, 7, 1, 2, 9, 3}
)

// premulMax bounds the scalars' magnitude (the integer domains leave room).
const premulMax = 9

// PremulScalar is rank's PreMulSum scalar in case c, as a value of c.Type.
func PremulScalar(c Case, rank int) float64 {
	i := int((c.Seed>>8)+uint64(rank)) % len(premulFloats)
	switch kindOf(c.Type) {
	case kindSigned:
		return premulSigned[i]
	case kindUnsigned:
		return premulUnsigned[i]
	}
	return premulFloats[i]
}

// PremulScalarOf is PremulScalar as the Scalar a call carries.
func PremulScalarOf(c Case, rank int) (collectives.Scalar, error) {
	return collectives.ScalarOf(c.Type, PremulScalar(c, rank))
}

func (v *verifier) premul() bool { return v.c.Op == collectives.PreMulSum }

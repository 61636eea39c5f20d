package check

import "github.com/goccl/goccl/collectives"

// epsilon is the type's machine epsilon (spacing of values at 1.0).
func epsilon(t collectives.DataType) float64 {
	switch t {
	case collectives.Float16:
		return 1.0 / (1 << 10)
	case collectives.BFloat16:
		return 1.0 / (1 << 7)
	case collectives.Float32:
		return 1.0 / (1 << 23)
	case collectives.Float64:
		return 1.0 / (1 << 52)
	case collectives.Float8E4M3:
		return 1.0 / (1 << 3)
	case collectives.Float8E5M2:
		return 1.0 / (1 << 2)
	}
	return 0
}

// Tolerance is the relative error a reduction of nranks values of type t
// may carry: relative to the sum of the inputs' magnitudes for sum and avg
// (so cancellation does not make it unbounded), to the result for prod.
// It covers every rounding order, including accumulating in the type
// itself (up to nranks roundings of half an epsilon each), and is 0 for
// integers, which must be exact.
func Tolerance(t collectives.DataType, nranks int) float64 {
	if !t.IsFloat() {
		return 0
	}
	return tolFactor(t, nranks)
}

func tolFactor(t collectives.DataType, nranks int) float64 {
	if t.IsFloat8() {
		// Reduced in float32 (exact for these inputs at a node's ranks)
		// and rounded once: half an epsilon of the result; a PreMulSum
		// also rounds each product to the type first, half an epsilon of
		// each. One epsilon of the inputs' magnitudes covers both. (Every
		// rounding in the type itself, as pairwise fp8 sums would do,
		// would not fit: the bound is what goccl's kernels promise.)
		return epsilon(t)
	}
	var base float64
	switch t {
	case collectives.Float16:
		base = 1e-2
	case collectives.BFloat16:
		base = 2e-2
	case collectives.Float32:
		base = 1e-5
	case collectives.Float64:
		base = 1e-12
	default:
		return 0
	}
	return max(base, float64(nranks+1)*epsilon(t))
}

// floorTol is the absolute error allowed besides the relative one: half
// the smallest step of the 8-bit floats for each of the nranks products
// and the result, where rounding into their subnormal range breaks the
// relative bound. 0 for the other types, whose inputs here stay normal.
func floorTol(t collectives.DataType, nranks int) float64 {
	switch t {
	case collectives.Float8E4M3:
		return float64(nranks+1) / (1 << 10)
	case collectives.Float8E5M2:
		return float64(nranks+1) / (1 << 17)
	}
	return 0
}

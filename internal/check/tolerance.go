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

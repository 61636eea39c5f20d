//go:build !amd64 || !cgo

package host

import "github.com/goccl/goccl/collectives"

// Without cgo on x86-64 the Go kernels run everywhere.

const isaScalar = 0

func bestISA() int           { return isaScalar }
func isas() []int            { return []int{isaScalar} }
func isaName(isa int) string { return "go" }

func vectorize(_ collectives.DataType, _ collectives.Op, _ int, scalar reduceFunc) reduceFunc {
	return scalar
}

// copyNT is a plain copy without the vector kernels.
func copyNT(dst, src []byte) { copy(dst, src) }

// fp8ISA is the instruction set of scaleFP8Vec's callers: none here.
const fp8ISA = isaScalar

func scaleFP8Vec(_ int, _ fp8Format, _, _ []byte, _ float32) bool { return false }

// narrowFP8Vec is the Go rounding here (tests call it on every build).
func narrowFP8Vec(_ int, f fp8Format, dst []byte, src []float32) { f.narrowTo(dst, src) }

// reduceOut leaves the direct path's reductions to Go here.
func reduceOut(_ collectives.DataType, _ collectives.Op, _, _ []uintptr, _, _ int, _ []byte, _ int, _ int) bool {
	return false
}

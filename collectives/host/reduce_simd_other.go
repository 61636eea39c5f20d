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

// Package fadd adds two float slices element by element, d[i] = x[i] +
// y[i], with the bits Go's own loop gives (the same IEEE additions; where
// both are NaNs, x's, quieted, which Go's loop gives too unless its
// compiler swaps the operands), four float32 or two float64 lanes at a
// time on x86-64. It exists for the host backend's small
// calls, where the element loop is a visible part of a call's time; a
// package that uses cgo cannot hold Go assembly.
package fadd

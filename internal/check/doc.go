// Package check is goccl's reference checker: it fills each rank's input
// deterministically from (seed, rank, dtype) so that any rank can
// regenerate every other rank's input without communication, computes the
// float64 (floats) or exact native-width (integers) reference for every
// collective and reduction op, and compares a rank's output against it,
// counting wrong elements and reporting the first few.
//
// Values are never zero, stay inside ranges where sums and products are
// defined for the type at the case's rank count, and are exactly
// representable in the type, so the only error a correct implementation may
// show is its own accumulation rounding (bounded by Tolerance).
package check

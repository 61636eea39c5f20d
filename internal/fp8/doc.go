// Package fp8 converts the two 8-bit floating-point formats GPUs reduce
// (OCP E4M3, E5M2) to and from float32. Narrowing rounds to nearest even
// and saturates to the largest finite value, infinities included, as the
// GPU's default conversions (satfinite) do; NaN stays NaN.
package fp8

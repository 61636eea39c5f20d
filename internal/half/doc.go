// Package half converts IEEE 754 binary16 (float16) and bfloat16 to and
// from float32, rounding to nearest even, as the GPU does.
package half

package fp8

import "math"

// Format constants. E4M3 (bias 7) has no infinity: 0x7f and 0xff are its
// NaNs and 448 its largest value. E5M2 (bias 15) is IEEE-like: 0x7c is
// infinity, 0x7d..0x7f NaN, 57344 the largest finite value.
const (
	E4M3Max  = 448.0
	E5M2Max  = 57344.0
	e4m3NaN  = 0x7f
	e5m2NaN  = 0x7f
	e4m3Top  = 0x7e // largest finite magnitude
	e5m2Top  = 0x7b
	e5m2Inf  = 0x7c
	f32NaN   = 0x7fc00000
	f32Inf   = 0x7f800000
	f32Magn  = 0x7fffffff
	f32Shift = 23
)

// Widening is a table: 256 values per format, exact in float32.
var e4m3Table, e5m2Table [256]float32

func init() {
	for b := 0; b < 256; b++ {
		e4m3Table[b] = decode(uint8(b), 3, 7, false)
		e5m2Table[b] = decode(uint8(b), 2, 15, true)
	}
}

// decode computes the value of code b with mant mantissa bits and the
// given bias; ieee says the top exponent holds infinity and NaNs (E5M2),
// otherwise only the all-ones code is NaN (E4M3).
func decode(b uint8, mant, bias int, ieee bool) float32 {
	neg := b&0x80 != 0
	e := int(b&0x7f) >> mant
	m := int(b) & (1<<mant - 1)
	top := 1<<(7-mant) - 1
	var v float64
	switch {
	case ieee && e == top && m == 0:
		v = math.Inf(1)
	case (ieee && e == top) || (!ieee && b&0x7f == 0x7f):
		return math.Float32frombits(f32NaN)
	case e == 0:
		v = math.Ldexp(float64(m), 1-bias-mant)
	default:
		v = math.Ldexp(float64(1<<mant+m), e-bias-mant)
	}
	if neg {
		v = -v
	}
	return float32(v)
}

// E4M3ToFloat32 widens an E4M3 code exactly.
func E4M3ToFloat32(b uint8) float32 { return e4m3Table[b] }

// E5M2ToFloat32 widens an E5M2 code exactly.
func E5M2ToFloat32(b uint8) float32 { return e5m2Table[b] }

// Float32ToE4M3 narrows f to E4M3: nearest, ties to even; magnitudes
// beyond 448 (infinities too) give ±448; NaN gives NaN.
func Float32ToE4M3(f float32) uint8 {
	// The normal, finite case inline: rebias 127 -> 7 and round the
	// mantissa to 3 bits (adding half an ulp less one, plus the kept
	// bit, rounds to nearest even); the rest goes the general way.
	u := math.Float32bits(f)
	if a := u & f32Magn; a-(121<<f32Shift) < f32Inf-(121<<f32Shift) {
		v := a - (127-7)<<f32Shift
		r := (v + 1<<19 - 1 + (v>>20)&1) >> 20
		return uint8(u>>24)&0x80 | uint8(min(r, e4m3Top))
	}
	return narrow(f, 3, 7, e4m3Top, e4m3NaN)
}

// Float32ToE5M2 narrows f to E5M2: nearest, ties to even; magnitudes
// beyond 57344 (infinities too) give ±57344; NaN gives NaN.
func Float32ToE5M2(f float32) uint8 {
	u := math.Float32bits(f) // as Float32ToE4M3, with bias 15 and 2 bits
	if a := u & f32Magn; a-(113<<f32Shift) < f32Inf-(113<<f32Shift) {
		v := a - (127-15)<<f32Shift
		r := (v + 1<<20 - 1 + (v>>21)&1) >> 21
		return uint8(u>>24)&0x80 | uint8(min(r, e5m2Top))
	}
	return narrow(f, 2, 15, e5m2Top, e5m2NaN)
}

func narrow(f float32, mant, bias uint32, top, nan uint8) uint8 {
	u := math.Float32bits(f)
	sign := uint8(u>>24) & 0x80
	a := u & f32Magn
	if a > f32Inf {
		return sign | nan
	}
	minNormal := (127 - bias + 1) << f32Shift
	var r uint32
	if a < minNormal {
		// Subnormal (or zero): multiples of the smallest step, 2^(1-bias-mant).
		// The scaling by a power of two is exact, RoundToEven the rounding;
		// the step count may round up to the smallest normal's code.
		scaled := math.Ldexp(float64(math.Float32frombits(a)), int(bias+mant-1))
		r = uint32(math.RoundToEven(scaled))
	} else {
		// Rebias the exponent in place and round the mantissa to mant bits;
		// a carry out of the mantissa steps the exponent, as it should.
		v := a - (127-bias)<<f32Shift
		sh := f32Shift - mant
		r = v >> sh
		rem := v & (1<<sh - 1)
		half := uint32(1) << (sh - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
	}
	if r > uint32(top) {
		r = uint32(top)
	}
	return sign | uint8(r)
}

// IsNaNE4M3 and IsNaNE5M2 report NaN codes.
func IsNaNE4M3(b uint8) bool { return b&0x7f == e4m3NaN }

// IsNaNE5M2 reports whether b is one of E5M2's NaN codes.
func IsNaNE5M2(b uint8) bool { return b&0x7f > e5m2Inf }

// E4M3Table and E5M2Table are the widening tables, for loops that index
// them directly (read only).
func E4M3Table() *[256]float32 { return &e4m3Table }

// E5M2Table is E5M2's widening table (read only).
func E5M2Table() *[256]float32 { return &e5m2Table }

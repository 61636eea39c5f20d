package fadd

// F32 sets d[i] = x[i] + y[i] for every i < len(d); x and y must be at
// least as long as d (shorter ones leave d untouched).
func F32(d, x, y []float32) {
	if len(d) > 0 && len(x) >= len(d) && len(y) >= len(d) {
		f32(&d[0], &x[0], &y[0], len(d))
	}
}

// F64 is F32 for float64.
func F64(d, x, y []float64) {
	if len(d) > 0 && len(x) >= len(d) && len(y) >= len(d) {
		f64(&d[0], &x[0], &y[0], len(d))
	}
}

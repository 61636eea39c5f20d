//go:build amd64

package fadd

//go:noescape
func f32(d, x, y *float32, n int)

//go:noescape
func f64(d, x, y *float64, n int)

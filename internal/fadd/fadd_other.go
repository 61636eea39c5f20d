//go:build !amd64

package fadd

import "unsafe"

func f32(d, x, y *float32, n int) {
	dd, xx, yy := unsafe.Slice(d, n), unsafe.Slice(x, n), unsafe.Slice(y, n)
	for i := range dd {
		dd[i] = xx[i] + yy[i]
	}
}

func f64(d, x, y *float64, n int) {
	dd, xx, yy := unsafe.Slice(d, n), unsafe.Slice(x, n), unsafe.Slice(y, n)
	for i := range dd {
		dd[i] = xx[i] + yy[i]
	}
}

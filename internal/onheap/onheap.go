package onheap

import "unsafe"

// sink is never written (on is always false), but escape analysis cannot
// know that, so every slice passed to Slice or Addr lives on the heap.
var sink struct {
	on bool
	s  any
}

// Slice returns s, its backing array kept on the heap.
func Slice[T any](s []T) []T {
	if sink.on {
		sink.s = s
	}
	return s
}

// Addr is the address of s's first element (0 for an empty slice), its
// backing array kept on the heap. The caller still keeps s alive until the
// memory is no longer used (runtime.KeepAlive): the garbage collector does
// not see a uintptr.
func Addr[T any](s []T) uintptr {
	if len(s) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(Slice(s))))
}

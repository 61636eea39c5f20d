package comm

import (
	"context"
	"fmt"
	"math"
	"unsafe"

	"github.com/goccl/goccl/collectives"
)

// AllocSlice allocates n elements of T in memory every rank of c maps
// (Comm.Alloc; collective: every rank asks for the same n) and returns it
// as a slice, zeroed, with its registration. Typed calls whose slices lie
// inside such allocations on every rank take the host backend's direct
// path: the ranks read each other's inputs and write each other's outputs
// in place, with no staging copy (sub-slices count too; a call where any
// rank's slice is elsewhere falls back, on every rank, to the ordinary
// path). The slice is valid until reg.Close (collective) or c.Close, and
// must not be used after either. Host backend only: the gpu backend's
// Alloc gives device memory, which a Go slice cannot reach (use Alloc and
// DeviceBuffer calls there).
func AllocSlice[T Element](ctx context.Context, c *Comm, n int) ([]T, Registration, error) {
	if c.backendName == BackendGPU {
		return nil, nil, fmt.Errorf("goccl: rank %d: AllocSlice: Go slices are host memory and the gpu backend allocates device memory; use Alloc: %w",
			c.rank, collectives.ErrNotSupported)
	}
	var z T
	es := int(unsafe.Sizeof(z))
	size := uint64(0) // a bad n still takes part in Alloc, which fails every rank alike
	if n > 0 && n <= math.MaxInt/es {
		size = uint64(n * es)
	}
	p, reg, err := c.alloc(ctx, size)
	if err == nil && size == 0 {
		err = reg.Close(ctx)
	}
	if size == 0 {
		return nil, nil, fmt.Errorf("goccl: rank %d: AllocSlice: n is %d, want a positive count: %w (%w)", c.rank, n, collectives.ErrInvalidArgument, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("goccl: rank %d: AllocSlice of %d elements: %w", c.rank, n, err)
	}
	// Reading the uintptr's bits as a pointer, rather than converting
	// it, keeps go vet's unsafeptr check meaningful elsewhere: the memory
	// is a mapping outside Go's heap, which the garbage collector ignores.
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	return unsafe.Slice((*T)(ptr), n), c.apiReg(reg), nil
}

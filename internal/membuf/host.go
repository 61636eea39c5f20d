package membuf

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Host is a Space of anonymous mmap'd host memory. Collectives on it run
// synchronously, so Sync has nothing to wait for.
type Host struct{}

// NewHost returns a host Space.
func NewHost() *Host { return &Host{} }

// Alloc maps size bytes of anonymous private memory; a 0-byte buffer has
// none.
func (*Host) Alloc(size int) (Buffer, error) {
	if size < 0 {
		return Buffer{}, fmt.Errorf("membuf: alloc of %d bytes: %w", size, ErrRange)
	}
	if size == 0 {
		return Buffer{}, nil
	}
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return Buffer{}, fmt.Errorf("membuf: mmap %d bytes: %w", size, err)
	}
	return Buffer{Ptr: uintptr(unsafe.Pointer(&m[0])), Size: size, host: m}, nil
}

// Adopt is host memory mapped by someone else (a communicator's Alloc)
// as a Buffer of this space, for CopyIn, CopyOut and Fill; it must not be
// given to Free, as the memory goes back where it came from.
func (*Host) Adopt(ptr uintptr, size int) Buffer {
	if ptr == 0 || size <= 0 {
		return Buffer{}
	}
	// Reading the uintptr's bits as a pointer keeps vet's unsafeptr check
	// meaningful elsewhere: the memory lies outside Go's heap.
	p := *(*unsafe.Pointer)(unsafe.Pointer(&ptr))
	return Buffer{Ptr: ptr, Size: size, host: unsafe.Slice((*byte)(p), size)}
}

// Free unmaps b's memory.
func (*Host) Free(b Buffer) error {
	if b.host == nil {
		return nil
	}
	if err := unix.Munmap(b.host); err != nil {
		return fmt.Errorf("membuf: munmap: %w", err)
	}
	return nil
}

func check(b Buffer, off, n int) error {
	if off < 0 || n < 0 || off+n > b.Size {
		return fmt.Errorf("membuf: [%d,%d) of a %d-byte buffer: %w", off, off+n, b.Size, ErrRange)
	}
	return nil
}

// CopyIn copies src into b at off.
func (*Host) CopyIn(b Buffer, off int, src []byte) error {
	if err := check(b, off, len(src)); err != nil {
		return err
	}
	copy(b.host[off:], src)
	return nil
}

// CopyOut copies b[off:off+len(dst)] into dst.
func (*Host) CopyOut(dst []byte, b Buffer, off int) error {
	if err := check(b, off, len(dst)); err != nil {
		return err
	}
	copy(dst, b.host[off:off+len(dst)])
	return nil
}

// Fill sets b[off:off+n] to v.
func (*Host) Fill(b Buffer, off, n int, v byte) error {
	if err := check(b, off, n); err != nil {
		return err
	}
	s := b.host[off : off+n]
	for i := range s {
		s[i] = v
	}
	return nil
}

// Stream is 0: host collectives run on no stream.
func (*Host) Stream() uintptr { return 0 }

// Sync has nothing to wait for; it gives ctx's error.
func (*Host) Sync(ctx context.Context) error { return ctx.Err() }

// Close has nothing to release.
func (*Host) Close() error { return nil }

// Describe names host memory (ordinal -1).
func (*Host) Describe() Device { return Device{Ordinal: -1, Name: "host"} }

// NewTimer measures wall time: host work is done when the call returns.
func (*Host) NewTimer() (Timer, error) { return &wallTimer{}, nil }

// HostBytes exposes a host buffer's memory (tests, and checks that avoid a
// copy); nil for device buffers.
func HostBytes(b Buffer) []byte { return b.host }

type wallTimer struct{ t0 time.Time }

func (w *wallTimer) Start() error                 { w.t0 = time.Now(); return nil }
func (w *wallTimer) Stop() (time.Duration, error) { return time.Since(w.t0), nil }
func (w *wallTimer) Close() error                 { return nil }

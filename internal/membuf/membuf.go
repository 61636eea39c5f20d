package membuf

import (
	"context"
	"errors"
	"time"
)

// Buffer is one allocation of a Space.
type Buffer struct {
	Ptr  uintptr // host or device address; 0 when Size is 0
	Size int
	host []byte // host spaces: the mapping itself
}

// At returns the address off bytes into b (0 for an empty buffer).
func (b Buffer) At(off int) uintptr {
	if b.Ptr == 0 {
		return 0
	}
	return b.Ptr + uintptr(off)
}

// Space allocates buffers of one kind and moves bytes in and out of them.
// A device Space is bound to one device and one stream.
type Space interface {
	// Alloc returns a buffer of size bytes (size may be 0).
	Alloc(size int) (Buffer, error)
	Free(b Buffer) error
	// CopyIn writes src at b[off:]; CopyOut reads b[off:off+len(dst)].
	// Both complete before returning (device spaces synchronize the
	// stream first, so results of enqueued collectives are visible).
	CopyIn(b Buffer, off int, src []byte) error
	CopyOut(dst []byte, b Buffer, off int) error
	// Fill sets b[off:off+n] to v; enqueued in stream order on devices.
	Fill(b Buffer, off, n int, v byte) error
	// Stream is the CUstream collectives run on (0 for host spaces).
	Stream() uintptr
	// Sync waits until everything enqueued on Stream is done.
	Sync(ctx context.Context) error
	// NewTimer measures the time of work enqueued between Start and Stop.
	NewTimer() (Timer, error)
	// Describe names where the buffers live, for the bench's device lines.
	Describe() Device
	Close() error
}

// Device describes a Space's memory for reports.
type Device struct {
	Ordinal int    // CUDA ordinal; -1 for host memory
	BusID   string // PCI bus id, "" for host
	Name    string // "NVIDIA H200", or "host"
}

// Timer measures elapsed time of enqueued work.
type Timer interface {
	Start() error
	// Stop waits for the work to finish and returns the elapsed time.
	Stop() (time.Duration, error)
	Close() error
}

// Grapher is implemented by spaces whose stream can be captured into a
// CUDA graph and replayed.
type Grapher interface {
	BeginCapture() error
	// EndCapture returns the instantiated graph.
	EndCapture() (Graph, error)
}

// Graph is an instantiated, replayable capture.
type Graph interface {
	Launch() error // enqueue one replay on the stream it was captured on
	Close() error
}

// ErrNoGraphs is returned where graph capture is asked of a host space.
var ErrNoGraphs = errors.New("membuf: CUDA graphs need a device space")

// ErrRange is wrapped when an offset or length falls outside a buffer.
var ErrRange = errors.New("membuf: out of range")

package membuf

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/goccl/goccl/internal/cuda"
)

// DeviceSpace is a Space of device memory on one GPU with its own stream.
type DeviceSpace struct {
	drv    cuda.Driver
	dev    cuda.Device
	ord    int
	ctx    cuda.Context
	stream cuda.Stream
	desc   Device
}

// NewDevice retains ordinal's primary context and creates a non-blocking
// stream on it. Close releases both.
func NewDevice(drv cuda.Driver, ordinal int) (*DeviceSpace, error) {
	dev, err := drv.DeviceGet(ordinal)
	if err != nil {
		return nil, fmt.Errorf("membuf: device %d: %w", ordinal, err)
	}
	ctx, err := drv.PrimaryCtxRetain(dev)
	if err != nil {
		return nil, fmt.Errorf("membuf: retain context of device %d: %w", ordinal, err)
	}
	s, err := drv.StreamCreate(ctx, true)
	if err != nil {
		_ = drv.PrimaryCtxRelease(dev)
		return nil, fmt.Errorf("membuf: stream on device %d: %w", ordinal, err)
	}
	d := &DeviceSpace{drv: drv, dev: dev, ord: ordinal, ctx: ctx, stream: s}
	d.desc = Device{Ordinal: ordinal, Name: "unknown"}
	if name, err := drv.DeviceName(dev); err == nil {
		d.desc.Name = name
	}
	if bus, err := drv.DevicePCIBusID(dev); err == nil {
		d.desc.BusID = bus
	}
	return d, nil
}

// Driver exposes the binding for callers that need more (events, comm
// init on this device).
func (d *DeviceSpace) Driver() cuda.Driver { return d.drv }

// Context is the device's primary context, retained by NewDevice.
func (d *DeviceSpace) Context() cuda.Context { return d.ctx }

// Ordinal is the device's CUDA ordinal.
func (d *DeviceSpace) Ordinal() int { return d.ord }

// Alloc allocates with cuMemAlloc; a 0-byte buffer has no memory.
func (d *DeviceSpace) Alloc(size int) (Buffer, error) {
	if size < 0 {
		return Buffer{}, fmt.Errorf("membuf: alloc of %d bytes: %w", size, ErrRange)
	}
	if size == 0 {
		return Buffer{}, nil
	}
	p, err := d.drv.MemAlloc(d.ctx, uint64(size))
	if err != nil {
		return Buffer{}, fmt.Errorf("membuf: cuMemAlloc %d bytes on device %d: %w", size, d.ord, err)
	}
	return Buffer{Ptr: uintptr(p), Size: size}, nil
}

// Free releases b with cuMemFree; a 0-byte buffer is a no-op.
func (d *DeviceSpace) Free(b Buffer) error {
	if b.Ptr == 0 {
		return nil
	}
	if err := d.drv.MemFree(d.ctx, cuda.DevicePtr(b.Ptr)); err != nil {
		return fmt.Errorf("membuf: cuMemFree: %w", err)
	}
	return nil
}

// CopyIn waits for the stream, then copies src to the device and waits
// for the copy to land.
func (d *DeviceSpace) CopyIn(b Buffer, off int, src []byte) error {
	if err := check(b, off, len(src)); err != nil || len(src) == 0 {
		return err
	}
	if err := d.drv.StreamSynchronize(d.ctx, d.stream); err != nil {
		return fmt.Errorf("membuf: stream sync: %w", err)
	}
	if err := d.drv.MemcpyHtoD(d.ctx, cuda.DevicePtr(b.At(off)), unsafe.Pointer(&src[0]), uint64(len(src))); err != nil {
		return fmt.Errorf("membuf: copy %d bytes to device %d: %w", len(src), d.ord, err)
	}
	// From pageable memory cuMemcpyHtoD may return before the DMA lands,
	// and our stream does not wait for the legacy stream: wait here.
	if err := d.drv.CtxSynchronize(d.ctx); err != nil {
		return fmt.Errorf("membuf: sync after copy to device %d: %w", d.ord, err)
	}
	return nil
}

// CopyOut waits for the stream, then copies from the device into dst.
func (d *DeviceSpace) CopyOut(dst []byte, b Buffer, off int) error {
	if err := check(b, off, len(dst)); err != nil || len(dst) == 0 {
		return err
	}
	if err := d.drv.StreamSynchronize(d.ctx, d.stream); err != nil {
		return fmt.Errorf("membuf: stream sync: %w", err)
	}
	if err := d.drv.MemcpyDtoH(d.ctx, unsafe.Pointer(&dst[0]), cuda.DevicePtr(b.At(off)), uint64(len(dst))); err != nil {
		return fmt.Errorf("membuf: copy %d bytes from device %d: %w", len(dst), d.ord, err)
	}
	return nil
}

// Fill enqueues a memset on the stream.
func (d *DeviceSpace) Fill(b Buffer, off, n int, v byte) error {
	if err := check(b, off, n); err != nil || n == 0 {
		return err
	}
	if err := d.drv.MemsetD8Async(d.ctx, cuda.DevicePtr(b.At(off)), v, uint64(n), d.stream); err != nil {
		return fmt.Errorf("membuf: memset on device %d: %w", d.ord, err)
	}
	return nil
}

// Stream is the space's non-blocking stream.
func (d *DeviceSpace) Stream() uintptr { return uintptr(d.stream) }

// Describe gives the device's ordinal, name and PCI bus id.
func (d *DeviceSpace) Describe() Device { return d.desc }

// Sync waits for the stream, polling so that ctx can end the wait.
func (d *DeviceSpace) Sync(ctx context.Context) error {
	if ctx.Done() == nil {
		return d.drv.StreamSynchronize(d.ctx, d.stream)
	}
	wait := time.Microsecond
	for {
		done, err := d.drv.StreamQuery(d.ctx, d.stream)
		if err != nil {
			return fmt.Errorf("membuf: stream query: %w", err)
		}
		if done {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("membuf: waiting for device %d: %w", d.ord, err)
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Millisecond)
	}
}

// Close destroys the stream and releases the primary context.
func (d *DeviceSpace) Close() error {
	err := d.drv.StreamDestroy(d.ctx, d.stream)
	if e := d.drv.PrimaryCtxRelease(d.dev); err == nil {
		err = e
	}
	return err
}

// NewTimer records a pair of CUDA events around the measured work.
func (d *DeviceSpace) NewTimer() (Timer, error) {
	a, err := d.drv.EventCreate(d.ctx, true)
	if err != nil {
		return nil, fmt.Errorf("membuf: event: %w", err)
	}
	b, err := d.drv.EventCreate(d.ctx, true)
	if err != nil {
		_ = d.drv.EventDestroy(d.ctx, a)
		return nil, fmt.Errorf("membuf: event: %w", err)
	}
	return &eventTimer{d: d, start: a, stop: b}, nil
}

type eventTimer struct {
	d           *DeviceSpace
	start, stop cuda.Event
}

func (t *eventTimer) Start() error {
	return t.d.drv.EventRecord(t.d.ctx, t.start, t.d.stream)
}

func (t *eventTimer) Stop() (time.Duration, error) {
	if err := t.d.drv.EventRecord(t.d.ctx, t.stop, t.d.stream); err != nil {
		return 0, err
	}
	if err := t.d.drv.EventSynchronize(t.d.ctx, t.stop); err != nil {
		return 0, err
	}
	ms, err := t.d.drv.EventElapsed(t.start, t.stop)
	if err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

func (t *eventTimer) Close() error {
	err := t.d.drv.EventDestroy(t.d.ctx, t.start)
	if e := t.d.drv.EventDestroy(t.d.ctx, t.stop); err == nil {
		err = e
	}
	return err
}

// BeginCapture starts capturing the stream in relaxed mode: goroutines
// migrate between OS threads, so a thread-local or global mode would
// reject unrelated synchronous calls that happen to share the thread.
func (d *DeviceSpace) BeginCapture() error {
	return d.drv.StreamBeginCapture(d.ctx, d.stream, cuda.CaptureRelaxed)
}

// EndCapture ends the stream's capture and instantiates the graph.
func (d *DeviceSpace) EndCapture() (Graph, error) {
	g, err := d.drv.StreamEndCapture(d.ctx, d.stream)
	if err != nil {
		return nil, fmt.Errorf("membuf: end capture: %w", err)
	}
	ge, err := d.drv.GraphInstantiate(d.ctx, g)
	if err != nil {
		_ = d.drv.GraphDestroy(d.ctx, g)
		return nil, fmt.Errorf("membuf: instantiate graph: %w", err)
	}
	return &graph{d: d, g: g, ge: ge}, nil
}

type graph struct {
	d  *DeviceSpace
	g  cuda.Graph
	ge cuda.GraphExec
}

func (g *graph) Launch() error { return g.d.drv.GraphLaunch(g.d.ctx, g.ge, g.d.stream) }

func (g *graph) Close() error {
	err := g.d.drv.GraphExecDestroy(g.d.ctx, g.ge)
	if e := g.d.drv.GraphDestroy(g.d.ctx, g.g); err == nil {
		err = e
	}
	return err
}

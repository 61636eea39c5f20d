package membuf

import (
	"context"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/cuda"
)

func TestHostSpace(t *testing.T) {
	h := NewHost()
	b, err := h.Alloc(64)
	require.NoError(t, err)
	require.NotZero(t, b.Ptr)
	require.NoError(t, h.Fill(b, 0, 64, 0xAB))
	require.NoError(t, h.CopyIn(b, 8, []byte{1, 2, 3}))
	out := make([]byte, 5)
	require.NoError(t, h.CopyOut(out, b, 7))
	assert.Equal(t, []byte{0xAB, 1, 2, 3, 0xAB}, out)
	// The address is the memory itself.
	assert.Equal(t, b.Ptr, uintptr(unsafe.Pointer(&HostBytes(b)[0])))
	assert.Equal(t, byte(2), HostBytes(b)[9])
	assert.ErrorIs(t, h.CopyIn(b, 62, []byte{1, 2, 3}), ErrRange)
	assert.ErrorIs(t, h.CopyOut(make([]byte, 1), b, 64), ErrRange)
	assert.ErrorIs(t, h.Fill(b, -1, 2, 0), ErrRange)
	_, err = h.Alloc(-1)
	assert.ErrorIs(t, err, ErrRange)
	z, err := h.Alloc(0)
	require.NoError(t, err)
	assert.Zero(t, z.Ptr)
	require.NoError(t, h.Free(z))
	require.NoError(t, h.Free(b))

	tm, err := h.NewTimer()
	require.NoError(t, err)
	require.NoError(t, tm.Start())
	time.Sleep(2 * time.Millisecond)
	d, err := tm.Stop()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, d, 2*time.Millisecond)
	assert.Equal(t, -1, h.Describe().Ordinal)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, h.Sync(ctx), context.Canceled)
}

// fakeDriver keeps "device memory" in Go maps of host slices.
type fakeDriver struct {
	cuda.Driver
	mem     map[cuda.DevicePtr][]byte
	next    cuda.DevicePtr
	syncs   int
	events  int
	capture []cuda.CaptureMode
	failMem bool
}

func newFake() *fakeDriver {
	return &fakeDriver{mem: map[cuda.DevicePtr][]byte{}, next: 0x7f0000000000}
}

func (f *fakeDriver) DeviceGet(o int) (cuda.Device, error)               { return cuda.Device(o), nil }
func (f *fakeDriver) DeviceName(cuda.Device) (string, error)             { return "NVIDIA H200", nil }
func (f *fakeDriver) DevicePCIBusID(cuda.Device) (string, error)         { return "0000:18:00.0", nil }
func (f *fakeDriver) PrimaryCtxRetain(cuda.Device) (cuda.Context, error) { return 1, nil }
func (f *fakeDriver) PrimaryCtxRelease(cuda.Device) error                { return nil }
func (f *fakeDriver) StreamCreate(cuda.Context, bool) (cuda.Stream, error) {
	return 7, nil
}
func (f *fakeDriver) StreamDestroy(cuda.Context, cuda.Stream) error { return nil }
func (f *fakeDriver) StreamSynchronize(cuda.Context, cuda.Stream) error {
	f.syncs++
	return nil
}
func (f *fakeDriver) StreamQuery(cuda.Context, cuda.Stream) (bool, error) { return true, nil }
func (f *fakeDriver) CtxSynchronize(cuda.Context) error                   { return nil }
func (f *fakeDriver) MemAlloc(_ cuda.Context, n uint64) (cuda.DevicePtr, error) {
	if f.failMem {
		return 0, errors.New("CUDA_ERROR_OUT_OF_MEMORY")
	}
	p := f.next
	f.mem[p] = make([]byte, n)
	f.next += cuda.DevicePtr(n+255) &^ 255
	return p, nil
}
func (f *fakeDriver) MemFree(_ cuda.Context, p cuda.DevicePtr) error {
	delete(f.mem, p)
	return nil
}

// find maps an address inside an allocation to its bytes.
func (f *fakeDriver) find(p cuda.DevicePtr) []byte {
	for base, m := range f.mem {
		if p >= base && p < base+cuda.DevicePtr(len(m)) {
			return m[p-base:]
		}
	}
	panic("bad device pointer")
}
func (f *fakeDriver) MemcpyHtoD(_ cuda.Context, dst cuda.DevicePtr, src unsafe.Pointer, n uint64) error {
	copy(f.find(dst), unsafe.Slice((*byte)(src), n))
	return nil
}
func (f *fakeDriver) MemcpyDtoH(_ cuda.Context, dst unsafe.Pointer, src cuda.DevicePtr, n uint64) error {
	copy(unsafe.Slice((*byte)(dst), n), f.find(src))
	return nil
}
func (f *fakeDriver) MemsetD8Async(_ cuda.Context, dst cuda.DevicePtr, v uint8, n uint64, _ cuda.Stream) error {
	m := f.find(dst)[:n]
	for i := range m {
		m[i] = v
	}
	return nil
}
func (f *fakeDriver) EventCreate(cuda.Context, bool) (cuda.Event, error) {
	f.events++
	return cuda.Event(f.events), nil
}
func (f *fakeDriver) EventDestroy(cuda.Context, cuda.Event) error             { f.events--; return nil }
func (f *fakeDriver) EventRecord(cuda.Context, cuda.Event, cuda.Stream) error { return nil }
func (f *fakeDriver) EventSynchronize(cuda.Context, cuda.Event) error         { return nil }
func (f *fakeDriver) EventElapsed(_, _ cuda.Event) (float32, error)           { return 1.5, nil }
func (f *fakeDriver) StreamBeginCapture(_ cuda.Context, _ cuda.Stream, m cuda.CaptureMode) error {
	f.capture = append(f.capture, m)
	return nil
}
func (f *fakeDriver) StreamEndCapture(cuda.Context, cuda.Stream) (cuda.Graph, error) { return 3, nil }
func (f *fakeDriver) GraphInstantiate(cuda.Context, cuda.Graph) (cuda.GraphExec, error) {
	return 4, nil
}
func (f *fakeDriver) GraphLaunch(cuda.Context, cuda.GraphExec, cuda.Stream) error { return nil }
func (f *fakeDriver) GraphExecDestroy(cuda.Context, cuda.GraphExec) error         { return nil }
func (f *fakeDriver) GraphDestroy(cuda.Context, cuda.Graph) error                 { return nil }

func TestDeviceSpaceWithFakeDriver(t *testing.T) {
	f := newFake()
	d, err := NewDevice(f, 1)
	require.NoError(t, err)
	assert.Equal(t, Device{Ordinal: 1, BusID: "0000:18:00.0", Name: "NVIDIA H200"}, d.Describe())
	assert.Equal(t, uintptr(7), d.Stream())

	b, err := d.Alloc(32)
	require.NoError(t, err)
	require.NoError(t, d.Fill(b, 0, 32, 0xFF))
	require.NoError(t, d.CopyIn(b, 4, []byte{9, 8}))
	out := make([]byte, 4)
	require.NoError(t, d.CopyOut(out, b, 3))
	assert.Equal(t, []byte{0xFF, 9, 8, 0xFF}, out)
	assert.Equal(t, 2, f.syncs, "copies wait for the stream first")
	assert.ErrorIs(t, d.CopyOut(make([]byte, 40), b, 0), ErrRange)
	require.NoError(t, d.Sync(context.Background()))

	tm, err := d.NewTimer()
	require.NoError(t, err)
	require.NoError(t, tm.Start())
	el, err := tm.Stop()
	require.NoError(t, err)
	assert.Equal(t, 1500*time.Microsecond, el)
	require.NoError(t, tm.Close())
	assert.Equal(t, 0, f.events, "timer events destroyed")

	require.NoError(t, d.BeginCapture())
	g, err := d.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Launch())
	require.NoError(t, g.Close())
	assert.Equal(t, []cuda.CaptureMode{cuda.CaptureRelaxed}, f.capture)

	require.NoError(t, d.Free(b))
	assert.Empty(t, f.mem)
	f.failMem = true
	_, err = d.Alloc(8)
	require.ErrorContains(t, err, "OUT_OF_MEMORY")
	require.NoError(t, d.Close())
}

package gpu

import (
	"context"
	"sync"
	"unsafe"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
)

// fakeDriver records what the backend asks of the driver. Methods the
// backend must not use are left to the embedded nil interface (a call
// panics, failing the test).
type fakeDriver struct {
	cuda.Driver
	mu       sync.Mutex
	names    map[cuda.Function]string
	launches []fakeLaunch
	hostMem  []*[16]uint32
	released int
	unloaded int
	freed    int
}

type fakeLaunch struct {
	name   string
	cfg    cuda.LaunchConfig
	params []byte
}

func newFakeDriver() *fakeDriver { return &fakeDriver{names: map[cuda.Function]string{}} }

func (f *fakeDriver) DeviceGet(ordinal int) (cuda.Device, error) { return cuda.Device(ordinal), nil }
func (f *fakeDriver) PrimaryCtxRetain(dev cuda.Device) (cuda.Context, error) {
	return cuda.Context(0x1000 + int(dev)), nil
}
func (f *fakeDriver) PrimaryCtxRelease(cuda.Device) error { f.released++; return nil }
func (f *fakeDriver) MemsetD32Async(cuda.Context, cuda.DevicePtr, uint32, uint64, cuda.Stream) error {
	return nil
}
func (f *fakeDriver) CtxSynchronize(cuda.Context) error { return nil }
func (f *fakeDriver) MemAllocHost(cuda.Context, uint64) (unsafe.Pointer, error) {
	m := new([16]uint32)
	f.hostMem = append(f.hostMem, m)
	return unsafe.Pointer(m), nil
}
func (f *fakeDriver) MemFreeHost(cuda.Context, unsafe.Pointer) error { f.freed++; return nil }
func (f *fakeDriver) MemHostGetDevicePointer(cuda.Context, unsafe.Pointer) (cuda.DevicePtr, error) {
	return 0xabc000, nil
}
func (f *fakeDriver) ModuleLoadData(cuda.Context, []byte) (cuda.Module, error) { return 0x77, nil }
func (f *fakeDriver) ModuleUnload(cuda.Context, cuda.Module) error             { f.unloaded++; return nil }
func (f *fakeDriver) ModuleGetFunction(_ cuda.Context, _ cuda.Module, name string) (cuda.Function, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn := cuda.Function(len(f.names) + 1)
	f.names[fn] = name
	return fn, nil
}
func (f *fakeDriver) LaunchKernel(_ cuda.Context, fn cuda.Function, cfg cuda.LaunchConfig, params []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.launches = append(f.launches, fakeLaunch{name: f.names[fn], cfg: cfg, params: append([]byte(nil), params...)})
	return nil
}

// fakeMapper hands out made-up addresses: rank r's copy of a region at
// base + r*0x1_0000_0000.
type fakeMapper struct {
	b     transport.Bootstrap
	next  uintptr
	freed []*transport.Region
}

func (m *fakeMapper) Name() string { return "fake" }
func (m *fakeMapper) Alloc(_ context.Context, size uint64) (*transport.Region, error) {
	m.next += 0x10000000
	return m.region(m.next, size), nil
}
func (m *fakeMapper) Register(_ context.Context, ptr uintptr, size uint64) (*transport.Region, error) {
	return m.region(ptr, size), nil
}
func (m *fakeMapper) region(base uintptr, size uint64) *transport.Region {
	r := &transport.Region{Size: size, Peers: make([]uintptr, m.b.Size())}
	for i := range r.Peers {
		r.Peers[i] = base + uintptr(i)<<32
	}
	r.Local = r.Peers[m.b.Rank()]
	return r
}
func (m *fakeMapper) Free(_ context.Context, r *transport.Region) error {
	m.freed = append(m.freed, r)
	return nil
}
func (m *fakeMapper) Close() error { return nil }

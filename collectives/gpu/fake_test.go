package gpu

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
)

// fakeDriver records what the backend asks of the driver. Methods the
// backend must not use are left to the embedded nil interface (a call
// panics, failing the test).
type fakeDriver struct {
	missing func(name string) bool // kernels the fake fatbin lacks
	cuda.Driver
	mu       sync.Mutex
	names    map[cuda.Function]string
	launches []fakeLaunch
	hostMem  []*[16]uint32 // host allocations (of hostSize bytes), in order
	hostSize []uint64
	// keepSlots: fused launches never mark their descriptor slot read.
	keepSlots bool
	noFunc    string // ModuleGetFunction fails for names with this prefix
	released  int
	unloaded  int
	freed     int
	syncGate  chan struct{} // when set, CtxSynchronize waits for it to close

	// Stream-ordered work, in enqueue order, for the exact-sequence tests
	// and the simulator (sim_test.go).
	ops        []fakeOp
	nextHandle uintptr
	records    map[cuda.Event]uint64 // latest record of each event
	capturing  map[cuda.Stream]bool
	failOn     string // an op kind that fails (after failAfter successes)
	failAfter  int
	streams    int // created minus destroyed
	events     int
	syncs      int  // CtxSynchronize calls
	devAllocs  int  // MemAlloc minus MemFree
	quiet      bool // record nothing (allocation tests)
	ccMajor    int  // compute capability major (DeviceAttribute); 0 reads as 1
	smemOptin  int  // shared memory a block may opt in to; 0 reads as an H200's
	// dynSmem is each kernel's opt-in dynamic shared memory, by name.
	dynSmem map[string]int
}

// h200SmemOptin is CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN on
// an H200 (227 KiB).
const h200SmemOptin = 232448

// fakeOp is one stream-ordered operation.
type fakeOp struct {
	kind   string // launch copy write wait record waitEvent memset8 memset32 htod dtoh
	stream cuda.Stream
	dst    uintptr
	src    uintptr
	n      uint64
	val    uint32
	geq    bool
	event  cuda.Event
	rec    uint64 // record: its id; waitEvent: the record it waits for
	data   []byte // htod: the bytes; launch: the parameters (n: the grid)
	host   []byte // dtoh: where the bytes land
	name   string // launch: the kernel
	// run is a step of a modelled kernel (sim_test.go), never recorded.
	run func(*simMem) error
}

var errFake = errors.New("fake driver failure")

// op appends o unless the failure injection says otherwise; f.mu is held.
func (f *fakeDriver) op(o fakeOp) error {
	if f.failOn == o.kind {
		if f.failAfter == 0 {
			return errFake
		}
		f.failAfter--
	}
	if !f.quiet {
		f.ops = append(f.ops, o)
	}
	return nil
}

func (f *fakeDriver) handle() uintptr { f.nextHandle++; return 0x5000 + f.nextHandle }

func (f *fakeDriver) DeviceAttribute(_ cuda.Device, a cuda.DeviceAttribute) (int, error) {
	switch {
	case a == cuda.AttrComputeCapabilityMajor && f.ccMajor != 0:
		return f.ccMajor, nil
	case a == cuda.AttrMaxSharedMemPerBlockOptin && f.smemOptin != 0:
		return f.smemOptin, nil
	case a == cuda.AttrMaxSharedMemPerBlockOptin:
		return h200SmemOptin, nil
	}
	return 1, nil
}
func (f *fakeDriver) FuncSetMaxDynamicSharedMem(_ cuda.Context, fn cuda.Function, bytes int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dynSmem == nil {
		f.dynSmem = map[string]int{}
	}
	f.dynSmem[f.names[fn]] = bytes
	return nil
}
func (f *fakeDriver) StreamCreate(cuda.Context, bool) (cuda.Stream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failOn == "streamCreate" {
		return 0, errFake
	}
	f.streams++
	return cuda.Stream(f.handle()), nil
}
func (f *fakeDriver) StreamDestroy(cuda.Context, cuda.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.streams--
	return nil
}
func (f *fakeDriver) EventCreate(cuda.Context, bool) (cuda.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events++
	return cuda.Event(f.handle()), nil
}
func (f *fakeDriver) EventDestroy(cuda.Context, cuda.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events--
	return nil
}
func (f *fakeDriver) StreamSynchronize(cuda.Context, cuda.Stream) error { return nil }
func (f *fakeDriver) StreamIsCapturing(_ cuda.Context, s cuda.Stream) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failOn == "isCapturing" {
		return false, errFake
	}
	return f.capturing[s], nil
}
func (f *fakeDriver) EventRecord(_ cuda.Context, e cuda.Event, s cuda.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.records == nil {
		f.records = map[cuda.Event]uint64{}
	}
	id := f.records[e] + 1
	if err := f.op(fakeOp{kind: "record", stream: s, event: e, rec: id}); err != nil {
		return err
	}
	f.records[e] = id
	return nil
}
func (f *fakeDriver) StreamWaitEvent(_ cuda.Context, s cuda.Stream, e cuda.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.op(fakeOp{kind: "waitEvent", stream: s, event: e, rec: f.records[e]})
}
func (f *fakeDriver) MemcpyAsync(_ cuda.Context, dst, src cuda.DevicePtr, n uint64, s cuda.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.op(fakeOp{kind: "copy", stream: s, dst: uintptr(dst), src: uintptr(src), n: n})
}
func (f *fakeDriver) StreamWriteValue32(_ cuda.Context, s cuda.Stream, addr cuda.DevicePtr, v uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.op(fakeOp{kind: "write", stream: s, dst: uintptr(addr), val: v})
}
func (f *fakeDriver) StreamWaitValue32(_ cuda.Context, s cuda.Stream, addr cuda.DevicePtr, v uint32, geq bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.op(fakeOp{kind: "wait", stream: s, dst: uintptr(addr), val: v, geq: geq})
}
func (f *fakeDriver) MemsetD8Async(_ cuda.Context, dst cuda.DevicePtr, v uint8, n uint64, s cuda.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.op(fakeOp{kind: "memset8", stream: s, dst: uintptr(dst), val: uint32(v), n: n})
}
func (f *fakeDriver) MemcpyHtoDAsync(_ cuda.Context, dst cuda.DevicePtr, src unsafe.Pointer, n uint64, s cuda.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	data := append([]byte(nil), unsafe.Slice((*byte)(src), n)...)
	return f.op(fakeOp{kind: "htod", stream: s, dst: uintptr(dst), n: n, data: data})
}
func (f *fakeDriver) MemcpyDtoHAsync(_ cuda.Context, dst unsafe.Pointer, src cuda.DevicePtr, n uint64, s cuda.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.op(fakeOp{kind: "dtoh", stream: s, src: uintptr(src), n: n, host: unsafe.Slice((*byte)(dst), n)})
}

// opsOf returns the ops of kinds (all when none given).
func (f *fakeDriver) opsOf(kinds ...string) []fakeOp {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeOp
	for _, o := range f.ops {
		if len(kinds) == 0 {
			out = append(out, o)
			continue
		}
		for _, k := range kinds {
			if o.kind == k {
				out = append(out, o)
				break
			}
		}
	}
	return out
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
func (f *fakeDriver) MemsetD32Async(_ cuda.Context, dst cuda.DevicePtr, v uint32, n uint64, s cuda.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.op(fakeOp{kind: "memset32", stream: s, dst: uintptr(dst), val: v, n: n})
}
func (f *fakeDriver) CtxSynchronize(cuda.Context) error {
	f.mu.Lock()
	f.syncs++
	gate := f.syncGate
	f.mu.Unlock()
	if gate != nil {
		<-gate // work that does not finish until the test says so
	}
	return nil
}
func (f *fakeDriver) MemAllocHost(_ cuda.Context, n uint64) (unsafe.Pointer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failOn == "allocHost" && len(f.hostMem) > 0 { // (the abort flag is always had)
		return nil, errFake
	}
	m := (*[16]uint32)(make([]uint32, max(16, (n+3)/4)))
	f.hostMem = append(f.hostMem, m)
	f.hostSize = append(f.hostSize, n)
	return unsafe.Pointer(m), nil
}
func (f *fakeDriver) MemFreeHost(cuda.Context, unsafe.Pointer) error { f.freed++; return nil }

// MemAlloc hands out addresses far from the handles; devAllocs counts
// allocations not yet freed.
func (f *fakeDriver) MemAlloc(_ cuda.Context, n uint64) (cuda.DevicePtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failOn == "memAlloc" {
		return 0, errFake
	}
	f.devAllocs++
	return cuda.DevicePtr(f.handle() << 32), nil
}
func (f *fakeDriver) MemFree(cuda.Context, cuda.DevicePtr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.devAllocs--
	return nil
}

// MemHostGetDevicePointer: the first allocation (the abort flag) maps to
// 0xabc000, the k-th to hostDevBase + k<<24.
func (f *fakeDriver) MemHostGetDevicePointer(_ cuda.Context, p unsafe.Pointer) (cuda.DevicePtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, m := range f.hostMem {
		if unsafe.Pointer(m) == p && k > 0 {
			return hostDevBase + cuda.DevicePtr(k)<<24, nil
		}
	}
	return 0xabc000, nil
}

const hostDevBase = 0x7f0000000000

// hostAt is the host address of device address d in mapped host memory
// (nil: none); f.mu is held.
func (f *fakeDriver) hostAt(d uint64) unsafe.Pointer {
	for k, m := range f.hostMem {
		lo := uint64(hostDevBase) + uint64(k)<<24
		if k > 0 && d >= lo && d < lo+f.hostSize[k] {
			return unsafe.Add(unsafe.Pointer(m), d-lo)
		}
	}
	return nil
}

// consumeDescs plays a fused launch's part for the host: its ticket lands
// in the slot's done word (fuse.go) unless keepSlots; f.mu is held.
func (f *fakeDriver) consumeDescs(params []byte) {
	if f.keepSlots || len(params) < offFuseCount+8 {
		return
	}
	ticket := uint32(u64at(params, offFuseCount) >> 32)
	if ticket == 0 {
		return
	}
	if h := f.hostAt(u64at(params, offFuseDescs) - fuseDoneBack); h != nil {
		atomic.StoreUint32((*uint32)(h), ticket)
	}
}
func (f *fakeDriver) ModuleLoadData(cuda.Context, []byte) (cuda.Module, error) { return 0x77, nil }
func (f *fakeDriver) ModuleUnload(cuda.Context, cuda.Module) error             { f.unloaded++; return nil }
func (f *fakeDriver) ModuleGetFunction(_ cuda.Context, _ cuda.Module, name string) (cuda.Function, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noFunc != "" && strings.HasPrefix(name, f.noFunc) {
		return 0, errFake
	}
	if f.missing != nil && f.missing(name) {
		return 0, errors.New("fake: no kernel " + name)
	}
	fn := cuda.Function(len(f.names) + 1)
	f.names[fn] = name
	return fn, nil
}
func (f *fakeDriver) LaunchKernel(_ cuda.Context, fn cuda.Function, cfg cuda.LaunchConfig, params []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.consumeDescs(params)
	if f.quiet {
		return nil
	}
	p := append([]byte(nil), params...)
	f.launches = append(f.launches, fakeLaunch{name: f.names[fn], cfg: cfg, params: p})
	// The parameters and grid ride along for the simulator (sim_test.go).
	return f.op(fakeOp{kind: "launch", stream: cfg.Stream, name: f.names[fn], data: p, n: uint64(cfg.Grid.X)})
}

// fakeMapper hands out made-up addresses in one address space: rank r's
// copy of a region at base + r*0x1_0000_0000 (Alloc: bases 0x1000_0000,
// 0x2000_0000, ... in call order; Register(ptr) on rank r: base ptr - r<<32).
type fakeMapper struct {
	b      transport.Bootstrap
	next   uintptr
	allocs int
	regs   int
	freed  []*transport.Region
}

func (m *fakeMapper) Name() string { return "fake" }
func (m *fakeMapper) Alloc(_ context.Context, size uint64) (*transport.Region, error) {
	m.next += 0x10000000
	m.allocs++
	return m.region(m.next, size), nil
}
func (m *fakeMapper) Register(_ context.Context, ptr uintptr, size uint64) (*transport.Region, error) {
	m.regs++
	return m.region(ptr-uintptr(m.b.Rank())<<32, size), nil
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

package cudatest

import (
	"encoding/binary"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/internal/cuda"
)

// Ctx is the context of rank (and device) r.
func Ctx(r int) cuda.Context { return cuda.Context(0xC0000 + r) }

// Call is one logged driver call. Obj identifies the memory it concerned
// (the allocation or physical handle id) where there is one.
type Call struct {
	Seq int
	Op  string
	Ctx cuda.Context
	Obj uint64
}

// Outstanding counts what is still allocated, open, mapped or retained.
type Outstanding struct {
	Allocs, IpcOpens, Handles, Reservations, Mappings, Retained int
}

// Fake is a cuda.Driver over bookkeeping. Methods it does not fake are
// those of the embedded nil Driver and panic when called.
type Fake struct {
	cuda.Driver

	// Granularity is what MemGetAllocationGranularity answers (default 2 MiB).
	Granularity uint64
	// Hook, when set, runs before each faked operation; a non-nil result is
	// returned instead of performing it. It may be called concurrently.
	Hook func(op string, ctx cuda.Context) error

	mu         sync.Mutex
	calls      []Call
	violations []string
	nextVA     uint64
	nextID     uint64
	allocs     map[cuda.DevicePtr]*alloc
	opens      map[openKey]*open
	phys       map[uint64]*phys
	handles    map[cuda.MemHandle]*handle
	resv       map[cuda.DevicePtr]*reservation
	maps       map[cuda.DevicePtr]*mapping
	retained   map[cuda.Device]int
	peerAccess map[[2]cuda.Context]bool
}

type alloc struct {
	ctx  cuda.Context
	size uint64
	id   uint64
}

type openKey struct {
	ctx  cuda.Context
	base cuda.DevicePtr // the exporter's allocation
}

type open struct {
	mapped cuda.DevicePtr
	size   uint64
}

type phys struct {
	id    uint64
	owner cuda.Context
	size  uint64
	refs  int // handles + mappings
}

type handle struct {
	ctx  cuda.Context
	phys *phys
}

type reservation struct {
	ctx  cuda.Context
	size uint64
}

type mapping struct {
	ctx  cuda.Context
	size uint64
	phys *phys
}

// New returns an empty Fake with a 2 MiB granularity.
func New() *Fake {
	return &Fake{
		Granularity: 2 << 20,
		nextVA:      0x7f00_0000_0000,
		allocs:      map[cuda.DevicePtr]*alloc{},
		opens:       map[openKey]*open{},
		phys:        map[uint64]*phys{},
		handles:     map[cuda.MemHandle]*handle{},
		resv:        map[cuda.DevicePtr]*reservation{},
		maps:        map[cuda.DevicePtr]*mapping{},
		retained:    map[cuda.Device]int{},
		peerAccess:  map[[2]cuda.Context]bool{},
	}
}

// enter runs the hook and, if it lets the call through, takes the lock and
// logs the call. On a nil error the caller must unlock.
func (f *Fake) enter(op string, ctx cuda.Context) error {
	if f.Hook != nil {
		if err := f.Hook(op, ctx); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.calls = append(f.calls, Call{Seq: len(f.calls), Op: op, Ctx: ctx})
	return nil
}

// obj sets the object of the call just logged.
func (f *Fake) obj(id uint64) { f.calls[len(f.calls)-1].Obj = id }

func (f *Fake) va(size, align uint64) cuda.DevicePtr {
	if align == 0 {
		align = 1 << 21
	}
	f.nextVA = (f.nextVA + align - 1) &^ (align - 1)
	p := f.nextVA
	f.nextVA += size + align // leave a gap so overruns do not alias
	return cuda.DevicePtr(p)
}

func (f *Fake) id() uint64 { f.nextID++; return f.nextID }

func fail(op string, r cuda.Result, format string, a ...any) error {
	return fmt.Errorf("fake %s: %s: %w", op, fmt.Sprintf(format, a...), r)
}

// Calls returns a copy of the call log.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Violations lists ordering rules broken so far (empty when all is well).
func (f *Fake) Violations() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.violations...)
}

// Outstanding counts the live objects.
func (f *Fake) Outstanding() Outstanding {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := Outstanding{Allocs: len(f.allocs), IpcOpens: len(f.opens), Handles: len(f.handles),
		Reservations: len(f.resv), Mappings: len(f.maps)}
	for _, n := range f.retained {
		o.Retained += n
	}
	return o
}

// PeerAccessEnabled reports whether ctx was given access to peer's memory.
func (f *Fake) PeerAccessEnabled(ctx, peer cuda.Context) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peerAccess[[2]cuda.Context{ctx, peer}]
}

// Contexts.

// PrimaryCtxRetain is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) PrimaryCtxRetain(dev cuda.Device) (cuda.Context, error) {
	if err := f.enter("PrimaryCtxRetain", Ctx(int(dev))); err != nil {
		return 0, err
	}
	defer f.mu.Unlock()
	f.retained[dev]++
	return Ctx(int(dev)), nil
}

// PrimaryCtxRelease is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) PrimaryCtxRelease(dev cuda.Device) error {
	if err := f.enter("PrimaryCtxRelease", Ctx(int(dev))); err != nil {
		return err
	}
	defer f.mu.Unlock()
	if f.retained[dev] == 0 {
		return fail("PrimaryCtxRelease", cuda.ErrorInvalidContext, "device %d not retained", dev)
	}
	f.retained[dev]--
	if f.retained[dev] == 0 {
		delete(f.retained, dev)
	}
	return nil
}

// CtxEnablePeerAccess is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) CtxEnablePeerAccess(ctx, peer cuda.Context) error {
	if err := f.enter("CtxEnablePeerAccess", ctx); err != nil {
		return err
	}
	defer f.mu.Unlock()
	k := [2]cuda.Context{ctx, peer}
	if f.peerAccess[k] {
		return fail("CtxEnablePeerAccess", cuda.ErrorPeerAccessAlreadyEnabled, "%#x -> %#x", ctx, peer)
	}
	f.peerAccess[k] = true
	return nil
}

// cuMemAlloc memory and IPC.

// MemAlloc is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) MemAlloc(ctx cuda.Context, size uint64) (cuda.DevicePtr, error) {
	if err := f.enter("MemAlloc", ctx); err != nil {
		return 0, err
	}
	defer f.mu.Unlock()
	if size == 0 {
		return 0, fail("MemAlloc", cuda.ErrorInvalidValue, "size 0")
	}
	p := f.va(size, 1<<21)
	a := &alloc{ctx: ctx, size: size, id: f.id()}
	f.allocs[p] = a
	f.obj(a.id)
	return p, nil
}

// MemFree is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) MemFree(ctx cuda.Context, p cuda.DevicePtr) error {
	if err := f.enter("MemFree", ctx); err != nil {
		return err
	}
	defer f.mu.Unlock()
	a, ok := f.allocs[p]
	if !ok || a.ctx != ctx {
		return fail("MemFree", cuda.ErrorInvalidValue, "%#x is not an allocation of context %#x", p, ctx)
	}
	f.obj(a.id)
	for k := range f.opens {
		if k.base == p {
			f.violations = append(f.violations, fmt.Sprintf(
				"context %#x freed %#x while context %#x still had it open", ctx, p, k.ctx))
		}
	}
	delete(f.allocs, p)
	return nil
}

// MemGetAddressRange is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) MemGetAddressRange(ctx cuda.Context, p cuda.DevicePtr) (cuda.DevicePtr, uint64, error) {
	if err := f.enter("MemGetAddressRange", ctx); err != nil {
		return 0, 0, err
	}
	defer f.mu.Unlock()
	for base, a := range f.allocs {
		if a.ctx == ctx && p >= base && uint64(p-base) < a.size {
			return base, a.size, nil
		}
	}
	return 0, 0, fail("MemGetAddressRange", cuda.ErrorNotFound, "%#x is in no allocation of context %#x", p, ctx)
}

var ipcMagic = [8]byte{'F', 'A', 'K', 'E', 'I', 'P', 'C', 0}

// IpcGetMemHandle is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) IpcGetMemHandle(ctx cuda.Context, p cuda.DevicePtr) (cuda.IpcMemHandle, error) {
	var h cuda.IpcMemHandle
	if err := f.enter("IpcGetMemHandle", ctx); err != nil {
		return h, err
	}
	defer f.mu.Unlock()
	a, ok := f.allocs[p]
	if !ok || a.ctx != ctx {
		return h, fail("IpcGetMemHandle", cuda.ErrorInvalidValue, "%#x is not an allocation base of context %#x", p, ctx)
	}
	f.obj(a.id)
	copy(h[:], ipcMagic[:])
	binary.LittleEndian.PutUint64(h[8:], uint64(p))
	return h, nil
}

// IpcOpenMemHandle is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) IpcOpenMemHandle(ctx cuda.Context, h cuda.IpcMemHandle) (cuda.DevicePtr, error) {
	if err := f.enter("IpcOpenMemHandle", ctx); err != nil {
		return 0, err
	}
	defer f.mu.Unlock()
	if [8]byte(h[:8]) != ipcMagic {
		return 0, fail("IpcOpenMemHandle", cuda.ErrorInvalidValue, "not a handle")
	}
	base := cuda.DevicePtr(binary.LittleEndian.Uint64(h[8:]))
	a, ok := f.allocs[base]
	if !ok {
		return 0, fail("IpcOpenMemHandle", cuda.ErrorInvalidValue, "allocation %#x is gone", base)
	}
	f.obj(a.id)
	if a.ctx == ctx {
		return 0, fail("IpcOpenMemHandle", cuda.ErrorInvalidContext, "own allocation %#x", base)
	}
	k := openKey{ctx, base}
	if _, dup := f.opens[k]; dup {
		return 0, fail("IpcOpenMemHandle", cuda.ErrorAlreadyMapped, "%#x already open in %#x", base, ctx)
	}
	m := f.va(a.size, 1<<21)
	f.opens[k] = &open{mapped: m, size: a.size}
	return m, nil
}

// IpcCloseMemHandle is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) IpcCloseMemHandle(ctx cuda.Context, p cuda.DevicePtr) error {
	if err := f.enter("IpcCloseMemHandle", ctx); err != nil {
		return err
	}
	defer f.mu.Unlock()
	for k, o := range f.opens {
		if k.ctx == ctx && o.mapped == p {
			if a, ok := f.allocs[k.base]; ok {
				f.obj(a.id)
			}
			delete(f.opens, k)
			return nil
		}
	}
	return fail("IpcCloseMemHandle", cuda.ErrorInvalidValue, "%#x is not open in %#x", p, ctx)
}

// VMM.

// MemGetAllocationGranularity is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) MemGetAllocationGranularity(prop *cuda.AllocProp, recommended bool) (uint64, error) {
	if err := f.enter("MemGetAllocationGranularity", Ctx(int(prop.Device))); err != nil {
		return 0, err
	}
	defer f.mu.Unlock()
	return f.Granularity, nil
}

func (f *Fake) aligned(op string, size uint64) error {
	if size == 0 || size%f.Granularity != 0 {
		return fail(op, cuda.ErrorInvalidValue, "size %d is not a multiple of the granularity %d", size, f.Granularity)
	}
	return nil
}

// MemCreate is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) MemCreate(ctx cuda.Context, size uint64, prop *cuda.AllocProp) (cuda.MemHandle, error) {
	if err := f.enter("MemCreate", ctx); err != nil {
		return 0, err
	}
	defer f.mu.Unlock()
	if err := f.aligned("MemCreate", size); err != nil {
		return 0, err
	}
	if prop.HandleTypes&cuda.HandlePosixFD == 0 {
		return 0, fail("MemCreate", cuda.ErrorInvalidValue, "not exportable as a POSIX fd")
	}
	p := &phys{id: f.id(), owner: ctx, size: size, refs: 1}
	f.phys[p.id] = p
	h := cuda.MemHandle(f.id())
	f.handles[h] = &handle{ctx: ctx, phys: p}
	f.obj(p.id)
	return h, nil
}

func (f *Fake) unref(p *phys) {
	p.refs--
	if p.refs == 0 {
		delete(f.phys, p.id)
	}
}

// MemRelease is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) MemRelease(ctx cuda.Context, h cuda.MemHandle) error {
	if err := f.enter("MemRelease", ctx); err != nil {
		return err
	}
	defer f.mu.Unlock()
	hd, ok := f.handles[h]
	if !ok || hd.ctx != ctx {
		return fail("MemRelease", cuda.ErrorInvalidValue, "handle %d not held by %#x", h, ctx)
	}
	f.obj(hd.phys.id)
	if hd.phys.owner == ctx {
		for va, m := range f.maps {
			if m.phys == hd.phys && m.ctx != ctx {
				f.violations = append(f.violations, fmt.Sprintf(
					"exporter %#x released its memory while %#x still mapped it at %#x", ctx, m.ctx, va))
			}
		}
	}
	delete(f.handles, h)
	f.unref(hd.phys)
	return nil
}

// MemExportToFD is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) MemExportToFD(ctx cuda.Context, h cuda.MemHandle) (int, error) {
	if err := f.enter("MemExportToFD", ctx); err != nil {
		return -1, err
	}
	defer f.mu.Unlock()
	hd, ok := f.handles[h]
	if !ok || hd.ctx != ctx {
		return -1, fail("MemExportToFD", cuda.ErrorInvalidValue, "handle %d not held by %#x", h, ctx)
	}
	f.obj(hd.phys.id)
	fd, err := unix.MemfdCreate("goccl-fake-vmm", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fake MemExportToFD: memfd: %w", err)
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], hd.phys.id)
	if _, err := unix.Pwrite(fd, b[:], 0); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("fake MemExportToFD: write: %w", err)
	}
	return fd, nil
}

// MemImportFromFD is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) MemImportFromFD(ctx cuda.Context, fd int) (cuda.MemHandle, error) {
	if err := f.enter("MemImportFromFD", ctx); err != nil {
		return 0, err
	}
	defer f.mu.Unlock()
	var b [8]byte
	if n, err := unix.Pread(fd, b[:], 0); err != nil || n != 8 {
		return 0, fail("MemImportFromFD", cuda.ErrorInvalidValue, "fd %d is not an exported handle (%v)", fd, err)
	}
	p, ok := f.phys[binary.LittleEndian.Uint64(b[:])]
	if !ok {
		return 0, fail("MemImportFromFD", cuda.ErrorInvalidValue, "exported memory is gone")
	}
	f.obj(p.id)
	p.refs++
	h := cuda.MemHandle(f.id())
	f.handles[h] = &handle{ctx: ctx, phys: p}
	return h, nil
}

// MemAddressReserve is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) MemAddressReserve(ctx cuda.Context, size, align uint64) (cuda.DevicePtr, error) {
	if err := f.enter("MemAddressReserve", ctx); err != nil {
		return 0, err
	}
	defer f.mu.Unlock()
	if err := f.aligned("MemAddressReserve", size); err != nil {
		return 0, err
	}
	va := f.va(size, max(align, f.Granularity))
	f.resv[va] = &reservation{ctx: ctx, size: size}
	return va, nil
}

// MemAddressFree is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) MemAddressFree(ctx cuda.Context, p cuda.DevicePtr, size uint64) error {
	if err := f.enter("MemAddressFree", ctx); err != nil {
		return err
	}
	defer f.mu.Unlock()
	r, ok := f.resv[p]
	if !ok || r.ctx != ctx || r.size != size {
		return fail("MemAddressFree", cuda.ErrorInvalidValue, "no reservation [%#x,+%d) in %#x", p, size, ctx)
	}
	if _, mapped := f.maps[p]; mapped {
		return fail("MemAddressFree", cuda.ErrorInvalidValue, "%#x is still mapped", p)
	}
	delete(f.resv, p)
	return nil
}

// MemMap is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) MemMap(ctx cuda.Context, p cuda.DevicePtr, size uint64, h cuda.MemHandle) error {
	if err := f.enter("MemMap", ctx); err != nil {
		return err
	}
	defer f.mu.Unlock()
	r, ok := f.resv[p]
	if !ok || r.ctx != ctx || r.size != size {
		return fail("MemMap", cuda.ErrorInvalidValue, "no reservation [%#x,+%d) in %#x", p, size, ctx)
	}
	hd, ok := f.handles[h]
	if !ok || hd.ctx != ctx {
		return fail("MemMap", cuda.ErrorInvalidValue, "handle %d not held by %#x", h, ctx)
	}
	if hd.phys.size != size {
		return fail("MemMap", cuda.ErrorInvalidValue, "size %d != allocation size %d", size, hd.phys.size)
	}
	if _, dup := f.maps[p]; dup {
		return fail("MemMap", cuda.ErrorAlreadyMapped, "%#x", p)
	}
	f.obj(hd.phys.id)
	hd.phys.refs++
	f.maps[p] = &mapping{ctx: ctx, size: size, phys: hd.phys}
	return nil
}

// MemUnmap is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) MemUnmap(ctx cuda.Context, p cuda.DevicePtr, size uint64) error {
	if err := f.enter("MemUnmap", ctx); err != nil {
		return err
	}
	defer f.mu.Unlock()
	m, ok := f.maps[p]
	if !ok || m.ctx != ctx || m.size != size {
		return fail("MemUnmap", cuda.ErrorInvalidValue, "no mapping [%#x,+%d) in %#x", p, size, ctx)
	}
	f.obj(m.phys.id)
	delete(f.maps, p)
	f.unref(m.phys)
	return nil
}

// MemSetAccess is cuda.Driver's, over the Fake's bookkeeping.
func (f *Fake) MemSetAccess(ctx cuda.Context, p cuda.DevicePtr, size uint64, devices []cuda.Device) error {
	if err := f.enter("MemSetAccess", ctx); err != nil {
		return err
	}
	defer f.mu.Unlock()
	m, ok := f.maps[p]
	if !ok || m.ctx != ctx || m.size != size || len(devices) == 0 {
		return fail("MemSetAccess", cuda.ErrorInvalidValue, "no mapping [%#x,+%d) in %#x", p, size, ctx)
	}
	f.obj(m.phys.id)
	return nil
}

// Location is where an address points in device memory, independent of
// the context that holds the address: the object (allocation or physical
// handle id), its owner, and the offset into it.
type Location struct {
	Owner cuda.Context
	Obj   uint64
	Off   uint64
}

// Target resolves address p as seen by ctx: its own cuMemAlloc memory, an
// IPC mapping it opened, or a VMM mapping it made. Tests compare a peer
// address with the owner's local address through it.
func (f *Fake) Target(ctx cuda.Context, p cuda.DevicePtr) (Location, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for base, a := range f.allocs {
		if a.ctx == ctx && p >= base && uint64(p-base) < a.size {
			return Location{a.ctx, a.id, uint64(p - base)}, true
		}
	}
	for k, o := range f.opens {
		if k.ctx == ctx && p >= o.mapped && uint64(p-o.mapped) < o.size {
			a := f.allocs[k.base]
			return Location{a.ctx, a.id, uint64(p - o.mapped)}, true
		}
	}
	for va, m := range f.maps {
		if m.ctx == ctx && p >= va && uint64(p-va) < m.size {
			return Location{m.phys.owner, m.phys.id, uint64(p - va)}, true
		}
	}
	return Location{}, false
}

package nvls

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/internal/cuda"
)

// fakeSystem is one node's worth of fake driver state shared by every
// rank's fakeDriver: multicast objects, memory, reservations. It checks the
// rules the real driver enforces (or that we rely on), so that a wrong
// order in Setup fails a test instead of passing silently.
type fakeSystem struct {
	mu      sync.Mutex
	mcGran  uint64 // recommended multicast granularity
	vmmGran uint64 // minimum allocation granularity
	next    uint64
	handles map[cuda.MemHandle]*fakeObj // live handles
	byInode map[uint64]*fakeObj         // exported objects, by the fd's inode
	res     map[cuda.DevicePtr]*fakeRes // live reservations
	created []*fakeObj                  // every multicast object made
}

type fakeObj struct {
	mc       bool
	size     uint64
	devices  map[cuda.Device]bool // multicast: added devices
	want     uint32               // multicast: NumDevices
	bindings map[cuda.Device]uint64
	dev      cuda.Device // memory: its device
	bound    bool        // memory: bound to a multicast object
	mapped   int
}

type fakeRes struct {
	size   uint64
	align  uint64
	mapped *fakeObj
	access []cuda.Device
}

func newFakeSystem(mcGran, vmmGran uint64) *fakeSystem {
	return &fakeSystem{
		mcGran: mcGran, vmmGran: vmmGran, next: 1 << 40,
		handles: map[cuda.MemHandle]*fakeObj{},
		byInode: map[uint64]*fakeObj{},
		res:     map[cuda.DevicePtr]*fakeRes{},
	}
}

// live counts what is still allocated: handles, reservations, mappings,
// bindings. All must be zero after every test.
func (s *fakeSystem) live() (handles, reservations, mappings, bindings int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.res {
		if r.mapped != nil {
			mappings++
		}
	}
	for _, o := range s.created {
		bindings += len(o.bindings)
	}
	return len(s.handles), len(s.res), mappings, bindings
}

func (s *fakeSystem) newHandle(o *fakeObj) cuda.MemHandle {
	s.next++
	h := cuda.MemHandle(s.next)
	s.handles[h] = o
	return h
}

var errInjected = errors.New("injected failure")

// fakeDriver is one rank's view: it records its calls and can be told to
// fail the n-th call of a method. Methods goccl's NVLS path must not use
// fall through to the nil embedded Driver and panic.
type fakeDriver struct {
	cuda.Driver
	sys   *fakeSystem
	rank  int
	ctx   cuda.Context
	dev   cuda.Device
	calls []string

	failCall string // recorded call name to fail
	failNth  int    // 1-based occurrence of failCall
	seen     map[string]int
	mcGran   uint64 // when set, this rank's multicast granularity
}

func newFakeDriver(sys *fakeSystem, rank int) *fakeDriver {
	return &fakeDriver{sys: sys, rank: rank, ctx: cuda.Context(0x1000 + rank), dev: cuda.Device(rank), seen: map[string]int{}}
}

// call records name and reports whether it is the one to fail.
func (d *fakeDriver) call(name string) error {
	d.calls = append(d.calls, name)
	d.seen[name]++
	if name == d.failCall && d.seen[name] == d.failNth {
		return fmt.Errorf("%s on rank %d: %w", name, d.rank, errInjected)
	}
	return nil
}

func (d *fakeDriver) checkCtx(ctx cuda.Context) error {
	if ctx != d.ctx {
		return fmt.Errorf("fake: rank %d used context %#x, want %#x", d.rank, ctx, d.ctx)
	}
	return nil
}

func (d *fakeDriver) kind(h cuda.MemHandle) string {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	if o, ok := d.sys.handles[h]; ok && o.mc {
		return "mc"
	}
	return "mem"
}

func (d *fakeDriver) MulticastGetGranularity(p *cuda.MulticastProp, recommended bool) (uint64, error) {
	if err := d.call("MulticastGetGranularity"); err != nil {
		return 0, err
	}
	if !recommended || p.HandleTypes != cuda.HandlePosixFD || p.NumDevices == 0 {
		return 0, fmt.Errorf("fake: unexpected granularity query %+v recommended=%v", *p, recommended)
	}
	if d.mcGran != 0 {
		return d.mcGran, nil
	}
	return d.sys.mcGran, nil
}

func (d *fakeDriver) MemGetAllocationGranularity(p *cuda.AllocProp, recommended bool) (uint64, error) {
	if err := d.call("MemGetAllocationGranularity"); err != nil {
		return 0, err
	}
	if p.Device != d.dev {
		return 0, fmt.Errorf("fake: granularity for device %d on rank %d", p.Device, d.rank)
	}
	return d.sys.vmmGran, nil
}

func (d *fakeDriver) MulticastCreate(p *cuda.MulticastProp) (cuda.MemHandle, error) {
	if err := d.call("MulticastCreate"); err != nil {
		return 0, err
	}
	s := d.sys
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.Size == 0 || p.Size%s.mcGran != 0 || p.HandleTypes&cuda.HandlePosixFD == 0 {
		return 0, fmt.Errorf("fake: bad multicast prop %+v", *p)
	}
	o := &fakeObj{mc: true, size: p.Size, want: p.NumDevices, devices: map[cuda.Device]bool{}, bindings: map[cuda.Device]uint64{}}
	s.created = append(s.created, o)
	return s.newHandle(o), nil
}

func (d *fakeDriver) MemExportToFD(ctx cuda.Context, h cuda.MemHandle) (int, error) {
	if err := d.call("MemExportToFD"); err != nil {
		return -1, err
	}
	if err := d.checkCtx(ctx); err != nil {
		return -1, err
	}
	s := d.sys
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.handles[h]
	if !ok {
		return -1, fmt.Errorf("fake: export of unknown handle %#x", h)
	}
	// A real descriptor, so that passing it over the bootstrap and closing
	// it are exercised; its inode names the object.
	fd, err := unix.MemfdCreate("goccl-fake-mc", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	s.byInode[st.Ino] = o
	return fd, nil
}

func (d *fakeDriver) MemImportFromFD(ctx cuda.Context, fd int) (cuda.MemHandle, error) {
	if err := d.call("MemImportFromFD"); err != nil {
		return 0, err
	}
	if err := d.checkCtx(ctx); err != nil {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("fake: import of a bad fd %d: %w", fd, err)
	}
	s := d.sys
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.byInode[st.Ino]
	if !ok {
		return 0, fmt.Errorf("fake: fd %d was not exported", fd)
	}
	return s.newHandle(o), nil
}

func (d *fakeDriver) MulticastAddDevice(mc cuda.MemHandle, dev cuda.Device) error {
	if err := d.call("MulticastAddDevice"); err != nil {
		return err
	}
	s := d.sys
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.handles[mc]
	if !ok || !o.mc {
		return fmt.Errorf("fake: add device to non-multicast handle %#x", mc)
	}
	if o.devices[dev] || uint32(len(o.devices)) >= o.want {
		return fmt.Errorf("fake: device %d added twice or team full", dev)
	}
	o.devices[dev] = true
	return nil
}

func (d *fakeDriver) MemCreate(ctx cuda.Context, size uint64, p *cuda.AllocProp) (cuda.MemHandle, error) {
	if err := d.call("MemCreate"); err != nil {
		return 0, err
	}
	if err := d.checkCtx(ctx); err != nil {
		return 0, err
	}
	s := d.sys
	s.mu.Lock()
	defer s.mu.Unlock()
	if size == 0 || size%s.vmmGran != 0 || p.Device != d.dev {
		return 0, fmt.Errorf("fake: bad MemCreate size %d prop %+v", size, *p)
	}
	return s.newHandle(&fakeObj{size: size, dev: p.Device}), nil
}

func (d *fakeDriver) MulticastBindMem(mc cuda.MemHandle, mcOff uint64, mem cuda.MemHandle, memOff, size uint64) error {
	if err := d.call("MulticastBindMem"); err != nil {
		return err
	}
	s := d.sys
	s.mu.Lock()
	defer s.mu.Unlock()
	m, okm := s.handles[mc]
	o, oko := s.handles[mem]
	switch {
	case !okm || !m.mc || !oko || o.mc:
		return fmt.Errorf("fake: bind of bad handles %#x %#x", mc, mem)
	case uint32(len(m.devices)) != m.want:
		// The real driver needs every device added before binding; that
		// is why Setup has a barrier here.
		return fmt.Errorf("fake: bind with %d of %d devices added", len(m.devices), m.want)
	case !m.devices[o.dev]:
		return fmt.Errorf("fake: bind of device %d not in the team", o.dev)
	case mcOff != 0 || memOff != 0 || size != m.size || size > o.size || size%s.mcGran != 0:
		return fmt.Errorf("fake: bad bind range mc+%d mem+%d size %d", mcOff, memOff, size)
	case m.bindings[o.dev] != 0:
		return fmt.Errorf("fake: device %d bound twice", o.dev)
	}
	m.bindings[o.dev] = size
	o.bound = true
	return nil
}

func (d *fakeDriver) MulticastUnbind(mc cuda.MemHandle, dev cuda.Device, mcOff, size uint64) error {
	if err := d.call("MulticastUnbind"); err != nil {
		return err
	}
	s := d.sys
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.handles[mc]
	if !ok || !m.mc || m.bindings[dev] != size || mcOff != 0 {
		return fmt.Errorf("fake: unbind of device %d that is not bound so", dev)
	}
	delete(m.bindings, dev)
	for _, o := range s.handles {
		if !o.mc && o.dev == dev && o.bound {
			o.bound = false
		}
	}
	return nil
}

func (d *fakeDriver) MemAddressReserve(ctx cuda.Context, size, align uint64) (cuda.DevicePtr, error) {
	if err := d.call("MemAddressReserve"); err != nil {
		return 0, err
	}
	if err := d.checkCtx(ctx); err != nil {
		return 0, err
	}
	s := d.sys
	s.mu.Lock()
	defer s.mu.Unlock()
	if align == 0 || size%s.vmmGran != 0 || size%s.mcGran != 0 {
		return 0, fmt.Errorf("fake: bad reserve size %d align %d", size, align)
	}
	s.next += size + align
	va := (s.next + align - 1) / align * align
	s.next = va + size
	s.res[cuda.DevicePtr(va)] = &fakeRes{size: size, align: align}
	return cuda.DevicePtr(va), nil
}

func (d *fakeDriver) MemAddressFree(ctx cuda.Context, p cuda.DevicePtr, size uint64) error {
	if err := d.call("MemAddressFree"); err != nil {
		return err
	}
	s := d.sys
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.res[p]
	if !ok || r.size != size || r.mapped != nil {
		return fmt.Errorf("fake: free of %#x (reserved %v, mapped %v)", p, ok, ok && r.mapped != nil)
	}
	delete(s.res, p)
	return nil
}

func (d *fakeDriver) MemMap(ctx cuda.Context, p cuda.DevicePtr, size uint64, h cuda.MemHandle) error {
	if err := d.call("MemMap " + d.kind(h)); err != nil {
		return err
	}
	if err := d.checkCtx(ctx); err != nil {
		return err
	}
	s := d.sys
	s.mu.Lock()
	defer s.mu.Unlock()
	r, okr := s.res[p]
	o, oko := s.handles[h]
	if !okr || !oko || r.mapped != nil || size != r.size || size > o.size {
		return fmt.Errorf("fake: bad map of %#x size %d", p, size)
	}
	if o.mc && len(o.bindings) == 0 {
		return fmt.Errorf("fake: mapping a multicast handle with nothing bound")
	}
	r.mapped = o
	o.mapped++
	return nil
}

func (d *fakeDriver) MemUnmap(ctx cuda.Context, p cuda.DevicePtr, size uint64) error {
	s := d.sys
	s.mu.Lock()
	kind := "mem"
	if r, ok := s.res[p]; ok && r.mapped != nil && r.mapped.mc {
		kind = "mc"
	}
	s.mu.Unlock()
	if err := d.call("MemUnmap " + kind); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.res[p]
	if !ok || r.mapped == nil || r.size != size {
		return fmt.Errorf("fake: unmap of %#x that is not mapped", p)
	}
	r.mapped.mapped--
	r.mapped = nil
	r.access = nil
	return nil
}

func (d *fakeDriver) MemSetAccess(ctx cuda.Context, p cuda.DevicePtr, size uint64, devs []cuda.Device) error {
	if err := d.call("MemSetAccess"); err != nil {
		return err
	}
	s := d.sys
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.res[p]
	if !ok || r.mapped == nil || r.size != size || len(devs) != 1 || devs[0] != d.dev {
		return fmt.Errorf("fake: bad set access on %#x for %v", p, devs)
	}
	r.access = devs
	return nil
}

func (d *fakeDriver) MemRelease(ctx cuda.Context, h cuda.MemHandle) error {
	if err := d.call("MemRelease " + d.kind(h)); err != nil {
		return err
	}
	s := d.sys
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.handles[h]
	if !ok {
		return fmt.Errorf("fake: release of unknown handle %#x", h)
	}
	// Our teardown order, stricter than the driver: nothing released while
	// this rank still maps or binds it.
	if !o.mc && (o.bound || o.mapped > 0) {
		return fmt.Errorf("fake: release of memory still bound or mapped")
	}
	delete(s.handles, h)
	return nil
}

// countFDs returns how many descriptors this process holds.
func countFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

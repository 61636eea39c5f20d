package nvlstest

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/internal/cuda"
)

// ErrInjected is what a call told to fail (Driver.FailCall) wraps.
var ErrInjected = errors.New("injected failure")

// Driver is one rank's view of a Node: the VMM and multicast methods of
// cuda.Driver, recording each call and failing the one it is told to. It
// does not embed cuda.Driver, so that a test's own driver can embed it
// next to whatever serves the other methods (a nil cuda.Driver, which
// panics on a call goccl's NVLS path must not make, or a backend fake).
type Driver struct {
	Node *Node
	Rank int
	Ctx  cuda.Context // the context every call must name
	Dev  cuda.Device  // this rank's device

	// Calls lists the calls made, by name ("MemMap", or "MemMap mc" and
	// "MemMap mem" when TagKinds is set); a test may append its own.
	Calls []string
	// TagKinds names MemMap, MemUnmap and MemRelease by the kind of
	// handle they touch: " mc" or " mem" appended.
	TagKinds bool
	// FailCall is a call name (as in Calls) whose FailNth-th occurrence
	// (1-based; 0 is the first) fails with ErrInjected.
	FailCall string
	FailNth  int
	// MCGran, when set, is this rank's multicast granularity instead of
	// the node's.
	MCGran uint64

	seen map[string]int
}

// NewDriver returns rank's driver on n, with context 0x1000+rank and
// device rank.
func NewDriver(n *Node, rank int) *Driver {
	return &Driver{Node: n, Rank: rank, Ctx: cuda.Context(0x1000 + rank), Dev: cuda.Device(rank), seen: map[string]int{}}
}

// Call records name and returns ErrInjected if it is the call to fail.
// Every Multicast* call is counted on the node.
func (d *Driver) Call(name string) error {
	d.Calls = append(d.Calls, name)
	if strings.HasPrefix(name, "Multicast") {
		d.Node.mu.Lock()
		d.Node.mcCalls++
		d.Node.mu.Unlock()
	}
	d.seen[name]++
	nth := max(d.FailNth, 1)
	if name == d.FailCall && d.seen[name] == nth {
		return fmt.Errorf("%s on rank %d: %w", name, d.Rank, ErrInjected)
	}
	return nil
}

// enter records name, failing it when told to, and on success returns
// with the node locked: every call that touches shared state starts so.
func (d *Driver) enter(name string) error {
	if err := d.Call(name); err != nil {
		return err
	}
	d.Node.mu.Lock()
	return nil
}

// enterCtx is enter for a call that names a context, which must be this
// rank's.
func (d *Driver) enterCtx(name string, ctx cuda.Context) error {
	if err := d.Call(name); err != nil {
		return err
	}
	if ctx != d.Ctx {
		return fmt.Errorf("fake: rank %d used context %#x, want %#x", d.Rank, ctx, d.Ctx)
	}
	d.Node.mu.Lock()
	return nil
}

// named is name, tagged with the kind of handle when TagKinds is set.
func (d *Driver) named(name string, mc bool) string {
	switch {
	case !d.TagKinds:
		return name
	case mc:
		return name + " mc"
	default:
		return name + " mem"
	}
}

// MulticastGetGranularity is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MulticastGetGranularity(p *cuda.MulticastProp, recommended bool) (uint64, error) {
	if err := d.Call("MulticastGetGranularity"); err != nil {
		return 0, err
	}
	if !recommended || p.HandleTypes != cuda.HandlePosixFD || p.NumDevices == 0 {
		return 0, fmt.Errorf("fake: unexpected granularity query %+v recommended=%v", *p, recommended)
	}
	if d.MCGran != 0 {
		return d.MCGran, nil
	}
	return d.Node.mcGran, nil
}

// MemGetAllocationGranularity is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MemGetAllocationGranularity(p *cuda.AllocProp, recommended bool) (uint64, error) {
	if err := d.Call("MemGetAllocationGranularity"); err != nil {
		return 0, err
	}
	if p.Device != d.Dev {
		return 0, fmt.Errorf("fake: granularity for device %d on rank %d", p.Device, d.Rank)
	}
	return d.Node.vmmGran, nil
}

// MulticastCreate is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MulticastCreate(p *cuda.MulticastProp) (cuda.MemHandle, error) {
	if err := d.enter("MulticastCreate"); err != nil {
		return 0, err
	}
	n := d.Node
	defer n.mu.Unlock()
	if p.Size == 0 || p.Size%n.mcGran != 0 || p.HandleTypes&cuda.HandlePosixFD == 0 {
		return 0, fmt.Errorf("fake: bad multicast prop %+v", *p)
	}
	o := &Object{MC: true, Size: p.Size, Want: p.NumDevices, Devices: map[cuda.Device]bool{}, Bindings: map[cuda.Device]uint64{}}
	n.created = append(n.created, o)
	return n.newHandle(o), nil
}

// MemExportToFD is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MemExportToFD(ctx cuda.Context, h cuda.MemHandle) (int, error) {
	if err := d.enterCtx("MemExportToFD", ctx); err != nil {
		return -1, err
	}
	n := d.Node
	defer n.mu.Unlock()
	o, ok := n.handles[h]
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
	n.byInode[st.Ino] = o
	return fd, nil
}

// MemImportFromFD is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MemImportFromFD(ctx cuda.Context, fd int) (cuda.MemHandle, error) {
	if err := d.enterCtx("MemImportFromFD", ctx); err != nil {
		return 0, err
	}
	n := d.Node
	defer n.mu.Unlock()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("fake: import of a bad fd %d: %w", fd, err)
	}
	o, ok := n.byInode[st.Ino]
	if !ok {
		return 0, fmt.Errorf("fake: fd %d was not exported", fd)
	}
	return n.newHandle(o), nil
}

// MulticastAddDevice is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MulticastAddDevice(mc cuda.MemHandle, dev cuda.Device) error {
	if err := d.enter("MulticastAddDevice"); err != nil {
		return err
	}
	n := d.Node
	defer n.mu.Unlock()
	o, ok := n.handles[mc]
	if !ok || !o.MC {
		return fmt.Errorf("fake: add device to non-multicast handle %#x", mc)
	}
	if o.Devices[dev] || uint32(len(o.Devices)) >= o.Want {
		return fmt.Errorf("fake: device %d added twice or team full", dev)
	}
	o.Devices[dev] = true
	return nil
}

// MemCreate is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MemCreate(ctx cuda.Context, size uint64, p *cuda.AllocProp) (cuda.MemHandle, error) {
	if err := d.enterCtx("MemCreate", ctx); err != nil {
		return 0, err
	}
	n := d.Node
	defer n.mu.Unlock()
	if size == 0 || size%n.vmmGran != 0 || p.Device != d.Dev {
		return 0, fmt.Errorf("fake: bad MemCreate size %d prop %+v", size, *p)
	}
	return n.newHandle(&Object{Size: size, dev: p.Device}), nil
}

// MulticastBindMem is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MulticastBindMem(mc cuda.MemHandle, mcOff uint64, mem cuda.MemHandle, memOff, size uint64) error {
	if err := d.enter("MulticastBindMem"); err != nil {
		return err
	}
	n := d.Node
	defer n.mu.Unlock()
	m, okm := n.handles[mc]
	o, oko := n.handles[mem]
	switch {
	case !okm || !m.MC || !oko || o.MC:
		return fmt.Errorf("fake: bind of bad handles %#x %#x", mc, mem)
	case uint32(len(m.Devices)) != m.Want:
		// The real driver needs every device added before binding; that
		// is why Setup has a barrier here.
		return fmt.Errorf("fake: bind with %d of %d devices added", len(m.Devices), m.Want)
	case !m.Devices[o.dev]:
		return fmt.Errorf("fake: bind of device %d not in the team", o.dev)
	case mcOff != 0 || memOff != 0 || size != m.Size || size > o.Size || size%n.mcGran != 0:
		return fmt.Errorf("fake: bad bind range mc+%d mem+%d size %d", mcOff, memOff, size)
	case m.Bindings[o.dev] != 0:
		return fmt.Errorf("fake: device %d bound twice", o.dev)
	}
	m.Bindings[o.dev] = size
	o.bound = true
	return nil
}

// MulticastUnbind is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MulticastUnbind(mc cuda.MemHandle, dev cuda.Device, mcOff, size uint64) error {
	if err := d.enter("MulticastUnbind"); err != nil {
		return err
	}
	n := d.Node
	defer n.mu.Unlock()
	m, ok := n.handles[mc]
	if !ok || !m.MC || m.Bindings[dev] != size || mcOff != 0 {
		return fmt.Errorf("fake: unbind of device %d that is not bound so", dev)
	}
	delete(m.Bindings, dev)
	for _, o := range n.handles {
		if !o.MC && o.dev == dev && o.bound {
			o.bound = false
		}
	}
	return nil
}

// MemAddressReserve is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MemAddressReserve(ctx cuda.Context, size, align uint64) (cuda.DevicePtr, error) {
	if err := d.enterCtx("MemAddressReserve", ctx); err != nil {
		return 0, err
	}
	n := d.Node
	defer n.mu.Unlock()
	if align == 0 || size%n.vmmGran != 0 || size%n.mcGran != 0 {
		return 0, fmt.Errorf("fake: bad reserve size %d align %d", size, align)
	}
	n.next += size + align
	va := (n.next + align - 1) / align * align
	n.next = va + size
	n.res[cuda.DevicePtr(va)] = &reservation{size: size}
	return cuda.DevicePtr(va), nil
}

// MemAddressFree is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MemAddressFree(ctx cuda.Context, p cuda.DevicePtr, size uint64) error {
	if err := d.enter("MemAddressFree"); err != nil {
		return err
	}
	n := d.Node
	defer n.mu.Unlock()
	r, ok := n.res[p]
	if !ok || r.size != size || r.mapped != nil {
		return fmt.Errorf("fake: free of %#x (reserved %v, mapped %v)", p, ok, ok && r.mapped != nil)
	}
	delete(n.res, p)
	return nil
}

// MemMap is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MemMap(ctx cuda.Context, p cuda.DevicePtr, size uint64, h cuda.MemHandle) error {
	if err := d.enterCtx(d.named("MemMap", d.Node.IsMulticast(h)), ctx); err != nil {
		return err
	}
	n := d.Node
	defer n.mu.Unlock()
	r, okr := n.res[p]
	o, oko := n.handles[h]
	if !okr || !oko || r.mapped != nil || size != r.size || size > o.Size {
		return fmt.Errorf("fake: bad map of %#x size %d", p, size)
	}
	if o.MC && len(o.Bindings) == 0 {
		return fmt.Errorf("fake: mapping a multicast handle with nothing bound")
	}
	r.mapped = o
	o.mapped++
	return nil
}

// MemUnmap is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MemUnmap(ctx cuda.Context, p cuda.DevicePtr, size uint64) error {
	n := d.Node
	n.mu.Lock()
	r, ok := n.res[p]
	mc := ok && r.mapped != nil && r.mapped.MC
	n.mu.Unlock()
	if err := d.enter(d.named("MemUnmap", mc)); err != nil {
		return err
	}
	defer n.mu.Unlock()
	r, ok = n.res[p]
	if !ok || r.mapped == nil || r.size != size {
		return fmt.Errorf("fake: unmap of %#x that is not mapped", p)
	}
	r.mapped.mapped--
	r.mapped = nil
	return nil
}

// MemSetAccess is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MemSetAccess(ctx cuda.Context, p cuda.DevicePtr, size uint64, devs []cuda.Device) error {
	if err := d.enter("MemSetAccess"); err != nil {
		return err
	}
	n := d.Node
	defer n.mu.Unlock()
	r, ok := n.res[p]
	if !ok || r.mapped == nil || r.size != size || len(devs) != 1 || devs[0] != d.Dev {
		return fmt.Errorf("fake: bad set access on %#x for %v", p, devs)
	}
	return nil
}

// MemRelease is cuda.Driver's: it records the call and fails when told to.
func (d *Driver) MemRelease(ctx cuda.Context, h cuda.MemHandle) error {
	if err := d.enter(d.named("MemRelease", d.Node.IsMulticast(h))); err != nil {
		return err
	}
	n := d.Node
	defer n.mu.Unlock()
	o, ok := n.handles[h]
	if !ok {
		return fmt.Errorf("fake: release of unknown handle %#x", h)
	}
	// Stricter than the driver: nothing released while this rank still
	// maps or binds it.
	if !o.MC && (o.bound || o.mapped > 0) {
		return fmt.Errorf("fake: release of memory still bound or mapped")
	}
	delete(n.handles, h)
	return nil
}

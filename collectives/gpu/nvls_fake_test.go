package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
)

// A fake node with NVSwitch multicast for the NVLS selection tests: every
// rank's mcDriver shares one mcNode, which holds the multicast objects,
// memory, reservations and mappings, and enforces the ordering rules the
// real driver has (every device added before a bind, nothing released while
// bound or mapped). It also counts every Multicast* call, so that the
// gate tests can show there were none.

type mcNode struct {
	mu      sync.Mutex
	gran    uint64
	next    uint64
	handles map[cuda.MemHandle]*mcObj
	byInode map[uint64]*mcObj
	res     map[cuda.DevicePtr]*mcRes
	created []*mcObj
	mcCalls int // Multicast* calls on every rank
}

type mcObj struct {
	mc       bool
	size     uint64
	want     uint32
	devices  map[cuda.Device]bool
	bindings map[cuda.Device]bool
	dev      cuda.Device
	bound    bool
	mapped   int
}

type mcRes struct {
	size   uint64
	mapped *mcObj
}

func newMCNode(gran uint64) *mcNode {
	return &mcNode{gran: gran, next: 1 << 44, handles: map[cuda.MemHandle]*mcObj{},
		byInode: map[uint64]*mcObj{}, res: map[cuda.DevicePtr]*mcRes{}}
}

// live counts what still exists: handles, reservations, mappings, bindings,
// multicast objects created.
func (n *mcNode) live() (handles, reservations, mappings, bindings int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, r := range n.res {
		if r.mapped != nil {
			mappings++
		}
	}
	for _, o := range n.created {
		bindings += len(o.bindings)
	}
	return len(n.handles), len(n.res), mappings, bindings
}

func (n *mcNode) multicastCalls() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mcCalls
}

func (n *mcNode) newHandle(o *mcObj) cuda.MemHandle {
	n.next++
	h := cuda.MemHandle(n.next)
	n.handles[h] = o
	return h
}

var errMCInjected = errors.New("injected nvls failure")

// mcDriver is one rank's fake driver: the backend fake (streams, launches,
// ops) plus VMM and multicast on the shared node. failCall names a call
// (as recorded in calls) that fails the first time.
type mcDriver struct {
	*fakeDriver
	node      *mcNode
	rank      int
	multicast bool // what CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED says
	failCall  string
	calls     []string // VMM and multicast calls, and the mapper's Free
	mcVA      uint64   // where this rank mapped the multicast handle
	ucVA      uint64   // and its own memory
}

func newMCDriver(node *mcNode, rank int) *mcDriver {
	return &mcDriver{fakeDriver: newFakeDriver(), node: node, rank: rank, multicast: true}
}

func (d *mcDriver) call(name string) error {
	d.calls = append(d.calls, name)
	if strings.HasPrefix(name, "Multicast") {
		d.node.mu.Lock()
		d.node.mcCalls++
		d.node.mu.Unlock()
	}
	if name == d.failCall {
		d.failCall = ""
		return fmt.Errorf("%s on rank %d: %w", name, d.rank, errMCInjected)
	}
	return nil
}

func (d *mcDriver) DeviceAttribute(_ cuda.Device, a cuda.DeviceAttribute) (int, error) {
	if a == cuda.AttrMulticastSupported && !d.multicast {
		return 0, nil
	}
	return 1, nil
}

// ModuleGetFunction fails an NVLS kernel's lookup when told to.
func (d *mcDriver) ModuleGetFunction(ctx cuda.Context, m cuda.Module, name string) (cuda.Function, error) {
	if strings.HasPrefix(name, "goccl_nvls_") {
		if err := d.call("ModuleGetFunction nvls"); err != nil {
			return 0, err
		}
	}
	return d.fakeDriver.ModuleGetFunction(ctx, m, name)
}

// LaunchKernel also keeps the parameters (in data) and the grid (in n) in
// the op, for the simulator; quiet records nothing (allocation tests).
func (d *mcDriver) LaunchKernel(_ cuda.Context, fn cuda.Function, cfg cuda.LaunchConfig, params []byte) error {
	f := d.fakeDriver
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.quiet {
		return nil
	}
	p := append([]byte(nil), params...)
	f.launches = append(f.launches, fakeLaunch{name: f.names[fn], cfg: cfg, params: p})
	return f.op(fakeOp{kind: "launch", stream: cfg.Stream, name: f.names[fn], data: p, n: uint64(cfg.Grid.X)})
}

func (d *mcDriver) MulticastGetGranularity(p *cuda.MulticastProp, recommended bool) (uint64, error) {
	if err := d.call("MulticastGetGranularity"); err != nil {
		return 0, err
	}
	return d.node.gran, nil
}

func (d *mcDriver) MemGetAllocationGranularity(p *cuda.AllocProp, recommended bool) (uint64, error) {
	if err := d.call("MemGetAllocationGranularity"); err != nil {
		return 0, err
	}
	return d.node.gran, nil
}

func (d *mcDriver) MulticastCreate(p *cuda.MulticastProp) (cuda.MemHandle, error) {
	if err := d.call("MulticastCreate"); err != nil {
		return 0, err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if p.Size == 0 || p.Size%n.gran != 0 || p.HandleTypes&cuda.HandlePosixFD == 0 {
		return 0, fmt.Errorf("fake: bad multicast prop %+v", *p)
	}
	o := &mcObj{mc: true, size: p.Size, want: p.NumDevices, devices: map[cuda.Device]bool{}, bindings: map[cuda.Device]bool{}}
	n.created = append(n.created, o)
	return n.newHandle(o), nil
}

func (d *mcDriver) MemExportToFD(_ cuda.Context, h cuda.MemHandle) (int, error) {
	if err := d.call("MemExportToFD"); err != nil {
		return -1, err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	o, ok := n.handles[h]
	if !ok {
		return -1, fmt.Errorf("fake: export of unknown handle %#x", h)
	}
	// A real descriptor, so that fd passing and closing are real; its
	// inode names the object.
	fd, err := unix.MemfdCreate("goccl-fake-nvls", unix.MFD_CLOEXEC)
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

func (d *mcDriver) MemImportFromFD(_ cuda.Context, fd int) (cuda.MemHandle, error) {
	if err := d.call("MemImportFromFD"); err != nil {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("fake: import of bad fd %d: %w", fd, err)
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	o, ok := n.byInode[st.Ino]
	if !ok {
		return 0, fmt.Errorf("fake: fd %d was not exported", fd)
	}
	return n.newHandle(o), nil
}

func (d *mcDriver) MulticastAddDevice(mc cuda.MemHandle, dev cuda.Device) error {
	if err := d.call("MulticastAddDevice"); err != nil {
		return err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	o, ok := n.handles[mc]
	if !ok || !o.mc || o.devices[dev] || uint32(len(o.devices)) >= o.want {
		return fmt.Errorf("fake: bad add of device %d", dev)
	}
	o.devices[dev] = true
	return nil
}

func (d *mcDriver) MemCreate(_ cuda.Context, size uint64, p *cuda.AllocProp) (cuda.MemHandle, error) {
	if err := d.call("MemCreate"); err != nil {
		return 0, err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if size == 0 || size%n.gran != 0 {
		return 0, fmt.Errorf("fake: bad MemCreate size %d", size)
	}
	return n.newHandle(&mcObj{size: size, dev: p.Device}), nil
}

func (d *mcDriver) MulticastBindMem(mc cuda.MemHandle, mcOff uint64, mem cuda.MemHandle, memOff, size uint64) error {
	if err := d.call("MulticastBindMem"); err != nil {
		return err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	m, okm := n.handles[mc]
	o, oko := n.handles[mem]
	switch {
	case !okm || !m.mc || !oko || o.mc:
		return fmt.Errorf("fake: bind of bad handles")
	case uint32(len(m.devices)) != m.want:
		return fmt.Errorf("fake: bind with %d of %d devices added", len(m.devices), m.want)
	case m.bindings[o.dev] || mcOff != 0 || memOff != 0 || size != m.size:
		return fmt.Errorf("fake: bad bind")
	}
	m.bindings[o.dev] = true
	o.bound = true
	return nil
}

func (d *mcDriver) MulticastUnbind(mc cuda.MemHandle, dev cuda.Device, mcOff, size uint64) error {
	if err := d.call("MulticastUnbind"); err != nil {
		return err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	m, ok := n.handles[mc]
	if !ok || !m.mc || !m.bindings[dev] {
		return fmt.Errorf("fake: unbind of device %d that is not bound", dev)
	}
	delete(m.bindings, dev)
	for _, o := range n.handles {
		if !o.mc && o.dev == dev {
			o.bound = false
		}
	}
	return nil
}

func (d *mcDriver) MemAddressReserve(_ cuda.Context, size, align uint64) (cuda.DevicePtr, error) {
	if err := d.call("MemAddressReserve"); err != nil {
		return 0, err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if align == 0 || size%n.gran != 0 {
		return 0, fmt.Errorf("fake: bad reserve size %d align %d", size, align)
	}
	va := (n.next + size + align) / align * align
	n.next = va + size
	n.res[cuda.DevicePtr(va)] = &mcRes{size: size}
	return cuda.DevicePtr(va), nil
}

func (d *mcDriver) MemAddressFree(_ cuda.Context, p cuda.DevicePtr, size uint64) error {
	if err := d.call("MemAddressFree"); err != nil {
		return err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	r, ok := n.res[p]
	if !ok || r.size != size || r.mapped != nil {
		return fmt.Errorf("fake: bad free of %#x", p)
	}
	delete(n.res, p)
	return nil
}

func (d *mcDriver) MemMap(_ cuda.Context, p cuda.DevicePtr, size uint64, h cuda.MemHandle) error {
	if err := d.call("MemMap"); err != nil {
		return err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	r, okr := n.res[p]
	o, oko := n.handles[h]
	if !okr || !oko || r.mapped != nil || size != r.size || size > o.size {
		return fmt.Errorf("fake: bad map of %#x", p)
	}
	r.mapped = o
	o.mapped++
	if o.mc {
		d.mcVA = uint64(p)
	} else {
		d.ucVA = uint64(p)
	}
	return nil
}

func (d *mcDriver) MemUnmap(_ cuda.Context, p cuda.DevicePtr, size uint64) error {
	if err := d.call("MemUnmap"); err != nil {
		return err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	r, ok := n.res[p]
	if !ok || r.mapped == nil || r.size != size {
		return fmt.Errorf("fake: unmap of %#x that is not mapped", p)
	}
	r.mapped.mapped--
	r.mapped = nil
	return nil
}

func (d *mcDriver) MemSetAccess(_ cuda.Context, p cuda.DevicePtr, size uint64, devs []cuda.Device) error {
	if err := d.call("MemSetAccess"); err != nil {
		return err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if r, ok := n.res[p]; !ok || r.mapped == nil || len(devs) != 1 {
		return fmt.Errorf("fake: bad set access on %#x", p)
	}
	return nil
}

func (d *mcDriver) MemRelease(_ cuda.Context, h cuda.MemHandle) error {
	if err := d.call("MemRelease"); err != nil {
		return err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	o, ok := n.handles[h]
	if !ok {
		return fmt.Errorf("fake: release of unknown handle %#x", h)
	}
	if !o.mc && (o.bound || o.mapped > 0) {
		return fmt.Errorf("fake: release of memory still bound or mapped")
	}
	delete(n.handles, h)
	return nil
}

// orderMapper notes the workspace's Free in the driver's call log, so a
// test can check that the multicast team goes first.
type orderMapper struct {
	*fakeMapper
	d *mcDriver
}

func (m *orderMapper) Free(ctx context.Context, r *transport.Region) error {
	m.d.calls = append(m.d.calls, "mapper.Free")
	return m.fakeMapper.Free(ctx, r)
}

// countFDs returns how many descriptors this process holds.
func countFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

package vmm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/ipc"
)

// closeTimeout bounds the barriers Close runs for the regions left over,
// since Close has no context of its own.
const closeTimeout = 60 * time.Second

// closeFD closes a descriptor this package owns; tests may count calls.
var closeFD = unix.Close

// Mapper maps peers' memory with the virtual memory management API:
// cuMemCreate allocations exported as POSIX file descriptors, passed over
// the bootstrap's Unix sockets, imported and mapped by every peer. It
// implements transport.Mapper; Alloc, Register and Free are collective.
//
// Register also takes cuMemAlloc memory it did not make (foreign.go): VMM
// cannot export that, so it goes through an ipc Mapper over the same
// bootstrap and context.
type Mapper struct {
	drv cuda.Driver
	b   transport.Bootstrap
	ctx cuda.Context
	dev cuda.Device

	mu      sync.Mutex // held for a whole collective operation
	regions transport.Regions[*region]
	ipc     *ipc.Mapper                    // foreign memory's route; its lock is taken only under mu
	foreign map[*transport.Region]struct{} // live regions Register made through ipc
	gran    uint64                         // allocation granularity, once known
	seq     uint64                         // Allocs so far: the same on every rank, names a region across ranks
	closed  bool
}

// mapping is one VMM mapping: a handle mapped at a reserved range.
type mapping struct {
	h    cuda.MemHandle
	va   cuda.DevicePtr
	size uint64
	// made records how far the mapping got, so undo releases exactly that.
	made int
}

const (
	madeHandle = 1 + iota
	madeReserve
	madeMap
)

// region is a Region's Priv. Alloc's regions own memory; Register's are
// views into one of them.
type region struct {
	m      *Mapper
	seq    uint64
	local  mapping
	peers  []mapping // by rank; the entry for this rank is unused
	parent *transport.Region
}

var _ transport.Mapper = (*Mapper)(nil)

// New returns a Mapper for the rank that drives dev through ctx.
func New(drv cuda.Driver, b transport.Bootstrap, ctx cuda.Context, dev cuda.Device) (*Mapper, error) {
	if drv == nil || b == nil {
		return nil, errors.New("vmm: New: nil driver or bootstrap")
	}
	im, err := ipc.New(drv, b, ctx)
	if err != nil {
		return nil, fmt.Errorf("vmm: New: %w", err)
	}
	return &Mapper{drv: drv, b: b, ctx: ctx, dev: dev, ipc: im, foreign: map[*transport.Region]struct{}{}}, nil
}

// Name is "vmm".
func (m *Mapper) Name() string { return "vmm" }

func (m *Mapper) prop() *cuda.AllocProp {
	return &cuda.AllocProp{Device: m.dev, HandleTypes: cuda.HandlePosixFD}
}

// granularity is the device's minimum granularity for exportable memory
// (2 MiB on H100/H200).
func (m *Mapper) granularity() (uint64, error) {
	if m.gran == 0 {
		g, err := m.drv.MemGetAllocationGranularity(m.prop(), false)
		if err != nil {
			return 0, err
		}
		if g == 0 || g&(g-1) != 0 {
			return 0, fmt.Errorf("granularity %d is not a power of two", g)
		}
		m.gran = g
	}
	return m.gran, nil
}

// RoundUp rounds size up to a multiple of gran (a power of two); ok is
// false when the result does not fit in uint64.
func RoundUp(size, gran uint64) (uint64, bool) {
	r := (size + gran - 1) &^ (gran - 1)
	return r, r >= size
}

// Alloc creates size bytes (rounded up to the granularity) on this rank's
// device, and maps every peer's allocation. Region.Size is the rounded
// size.
func (m *Mapper) Alloc(ctx context.Context, size uint64) (*transport.Region, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, transport.ErrClosed
	}
	me := m.b.Rank()
	m.seq++
	reg := &region{m: m, seq: m.seq}
	fd := -1
	local := m.create(size, &reg.local, &fd)
	all, err := agree(ctx, m.b, local, binary.LittleEndian.AppendUint64(nil, reg.local.size))
	if err != nil {
		m.closeFD(fd)
		m.undo(&reg.local)
		return nil, err
	}

	// Exchange descriptors; every rank takes part, since all agreed above.
	var failed *StepError
	fds, err := transport.ExchangeFDs(ctx, m.b, []int{fd})
	m.closeFD(fd) // the exporter's copy is no longer needed once sent
	if err != nil {
		failed = stepErr(me, "exchange fds", -1, err)
	} else {
		failed = m.importPeers(all, fds, reg)
	}
	if _, err := agree(ctx, m.b, failed, nil); err != nil {
		_ = m.release(ctx, reg) // the step's error is the one to report
		return nil, err
	}
	peers := make([]uintptr, len(all))
	for r := range peers {
		peers[r] = uintptr(reg.peers[r].va)
	}
	peers[me] = uintptr(reg.local.va)
	out := &transport.Region{Size: reg.local.size, Local: uintptr(reg.local.va), Peers: peers, Priv: reg}
	m.regions.Add(out)
	return out, nil
}

// create makes the local allocation, mapped and accessible here, and
// exports it as *fd. On failure it undoes what it made and names the step.
func (m *Mapper) create(size uint64, l *mapping, fd *int) *StepError {
	me := m.b.Rank()
	if size == 0 {
		return stepErr(me, "Alloc", -1, fmt.Errorf("size 0: %w", cuda.ErrorInvalidValue))
	}
	gran, err := m.granularity()
	if err != nil {
		return stepErr(me, "cuMemGetAllocationGranularity", -1, err)
	}
	rounded, ok := RoundUp(size, gran)
	if !ok {
		return stepErr(me, "Alloc", -1, fmt.Errorf("size %d overflows when rounded to %d: %w", size, gran, cuda.ErrorInvalidValue))
	}
	l.size = rounded
	if l.h, err = m.drv.MemCreate(m.ctx, rounded, m.prop()); err != nil {
		return stepErr(me, "cuMemCreate", -1, fmt.Errorf("%d bytes: %w", rounded, err))
	}
	l.made = madeHandle
	if step, err := m.mapHere(l, gran); err != nil {
		m.undo(l)
		return stepErr(me, step, -1, err)
	}
	if *fd, err = m.drv.MemExportToFD(m.ctx, l.h); err != nil {
		*fd = -1
		m.undo(l)
		return stepErr(me, "cuMemExportToShareableHandle", -1, err)
	}
	return nil
}

// mapHere reserves an address range for l.h, maps it and makes it
// read-write for this device. It returns the failing step.
func (m *Mapper) mapHere(l *mapping, align uint64) (string, error) {
	var err error
	if l.va, err = m.drv.MemAddressReserve(m.ctx, l.size, align); err != nil {
		return "cuMemAddressReserve", err
	}
	l.made = madeReserve
	if err = m.drv.MemMap(m.ctx, l.va, l.size, l.h); err != nil {
		return "cuMemMap", err
	}
	l.made = madeMap
	if err = m.drv.MemSetAccess(m.ctx, l.va, l.size, []cuda.Device{m.dev}); err != nil {
		return "cuMemSetAccess", err
	}
	return "", nil
}

// importPeers imports and maps every peer's descriptor, closing each
// received descriptor once imported (or skipped after a failure).
func (m *Mapper) importPeers(all [][]byte, fds [][]int, reg *region) *StepError {
	me := m.b.Rank()
	reg.peers = make([]mapping, len(all))
	var failed *StepError
	for r := range all {
		if r == me {
			continue
		}
		fd := fds[r][0]
		if failed != nil {
			m.closeFD(fd)
			continue
		}
		p := &reg.peers[r]
		if len(all[r]) != 8 {
			failed = stepErr(me, "decode size", r, fmt.Errorf("size message of %d bytes, want 8", len(all[r])))
			m.closeFD(fd)
			continue
		}
		p.size = binary.LittleEndian.Uint64(all[r])
		h, err := m.drv.MemImportFromFD(m.ctx, fd)
		m.closeFD(fd)
		if err != nil {
			failed = stepErr(me, "cuMemImportFromShareableHandle", r, err)
			continue
		}
		p.h, p.made = h, madeHandle
		if step, err := m.mapHere(p, m.gran); err != nil {
			failed = stepErr(me, step, r, fmt.Errorf("rank %d's %d bytes: %w", r, p.size, err))
		}
	}
	return failed
}

// undo releases one mapping as far as it was made, in reverse order.
func (m *Mapper) undo(l *mapping) error {
	var errs []error
	if l.made >= madeMap {
		if err := m.drv.MemUnmap(m.ctx, l.va, l.size); err != nil {
			errs = append(errs, fmt.Errorf("cuMemUnmap: %w", err))
		}
	}
	if l.made >= madeReserve {
		if err := m.drv.MemAddressFree(m.ctx, l.va, l.size); err != nil {
			errs = append(errs, fmt.Errorf("cuMemAddressFree: %w", err))
		}
	}
	if l.made >= madeHandle {
		if err := m.drv.MemRelease(m.ctx, l.h); err != nil {
			errs = append(errs, fmt.Errorf("cuMemRelease: %w", err))
		}
	}
	l.made = 0
	return errors.Join(errs...)
}

func (m *Mapper) closeFD(fd int) {
	if fd >= 0 {
		_ = closeFD(fd)
	}
}

// release undoes an owned region: unmap peers' memory, wait until every
// rank has, then release the local allocation. Views of it die with it.
func (m *Mapper) release(ctx context.Context, reg *region) error {
	me := m.b.Rank()
	var errs []error
	for r := len(reg.peers) - 1; r >= 0; r-- {
		if err := m.undo(&reg.peers[r]); err != nil {
			errs = append(errs, stepErr(me, "unmap peer memory", r, err))
		}
	}
	// The exporter keeps its memory until every importer has unmapped it.
	if err := m.b.Barrier(ctx); err != nil {
		errs = append(errs, stepErr(me, "barrier before release", -1, err))
	}
	if err := m.undo(&reg.local); err != nil {
		errs = append(errs, stepErr(me, "release local memory", -1, err))
	}
	m.regions.DeleteFunc(func(v *transport.Region) bool {
		vr, ok := v.Priv.(*region)
		return ok && vr.parent != nil && vr.parent.Priv == reg
	})
	return errors.Join(errs...)
}

// Register exposes [ptr, ptr+size) to peers without copying. Memory from
// this Mapper's Alloc is shared as a view whose peer addresses are offsets
// into the peers' mappings of the same Alloc. Other memory ("foreign", such
// as a framework's cuMemAlloc tensors) cannot be exported by VMM, so it is
// registered through legacy IPC handles instead. Every rank must take the
// same route: the ranks agree on it first, and mixed routes fail on all.
func (m *Mapper) Register(ctx context.Context, ptr uintptr, size uint64) (*transport.Region, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, transport.ErrClosed
	}
	parent, local := m.route(ptr, size)
	var payload []byte
	if local == nil {
		payload = routePayload(parent, ptr, size)
	}
	all, err := agree(ctx, m.b, local, payload)
	if err != nil {
		return nil, err
	}
	// Every rank decodes the same payloads, so all reach the same verdict
	// without another exchange and run the same bootstrap operations next:
	// the ipc Mapper's exchanges, the view's agreement, or none.
	routes, err := m.decodeRoutes(all)
	if err != nil {
		return nil, err
	}
	switch foreign, views := splitRoutes(routes); {
	case len(views) == 0:
		return m.registerForeign(ctx, ptr, size)
	case len(foreign) > 0:
		return nil, mixedRoutes(routes, foreign, views)
	}
	return m.registerView(ctx, parent, ptr, size, routes)
}

// registerView makes a view of parent, an Alloc every rank registers part
// of; routes holds each rank's Alloc and offset.
func (m *Mapper) registerView(ctx context.Context, parent *transport.Region, ptr uintptr, size uint64, routes []route) (*transport.Region, error) {
	me := m.b.Rank()
	preg := parent.Priv.(*region)
	peers := make([]uintptr, len(routes))
	var failed *StepError
	for r, rt := range routes {
		if rt.seq != preg.seq {
			failed = stepErr(me, "Register", r, fmt.Errorf("rank %d registers memory of Alloc #%d, this rank of #%d", r, rt.seq, preg.seq))
			break
		}
		peers[r] = parent.Peers[r] + uintptr(rt.off)
	}
	if _, err := agree(ctx, m.b, failed, nil); err != nil {
		return nil, err
	}
	out := &transport.Region{Size: size, Local: ptr, Peers: peers, Priv: &region{m: m, seq: preg.seq, parent: parent}}
	m.regions.Add(out)
	return out, nil
}

// Free unmaps peers' memory, waits until every rank has, then releases the
// local allocation. Freeing a Register view releases nothing; freeing
// foreign memory's region closes its IPC mappings (collective too).
func (m *Mapper) Free(ctx context.Context, r *transport.Region) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.foreign[r]; ok {
		delete(m.foreign, r)
		if err := m.ipc.Free(ctx, r); err != nil {
			return fmt.Errorf("vmm: Free of foreign memory: %w", err)
		}
		return nil
	}
	reg, ok := m.take(r)
	if !ok {
		return fmt.Errorf("vmm: Free: region %p is not live in this mapper", r)
	}
	if reg.parent != nil {
		return nil
	}
	return m.release(ctx, reg)
}

func (m *Mapper) take(r *transport.Region) (*region, bool) {
	return m.regions.Take(r, func(reg *region) bool { return reg.m == m })
}

// Close frees the regions still live, newest first, then those of foreign
// memory (collective, like Free: every rank holds the same regions, so all
// run the same barriers in the same order).
func (m *Mapper) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	err := m.regions.Drain(closeTimeout, func(ctx context.Context, _ *transport.Region, reg *region) error {
		if reg.parent != nil {
			return nil
		}
		return m.release(ctx, reg)
	})
	clear(m.foreign)
	if ierr := m.ipc.Close(); ierr != nil {
		err = errors.Join(err, fmt.Errorf("vmm: Close of foreign memory: %w", ierr))
	}
	return err
}

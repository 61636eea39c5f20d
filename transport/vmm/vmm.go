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
type Mapper struct {
	drv cuda.Driver
	b   transport.Bootstrap
	ctx cuda.Context
	dev cuda.Device

	mu      sync.Mutex // held for a whole collective operation
	regions transport.Regions[*region]
	gran    uint64 // allocation granularity, once known
	seq     uint64 // Allocs so far: the same on every rank, names a region across ranks
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
	return &Mapper{drv: drv, b: b, ctx: ctx, dev: dev}, nil
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

// Register exposes [ptr, ptr+size) to peers without copying. VMM can only
// share what it created, so ptr must lie in memory from this Mapper's
// Alloc; the result is a view whose peer addresses are offsets into the
// peers' mappings of the same Alloc.
func (m *Mapper) Register(ctx context.Context, ptr uintptr, size uint64) (*transport.Region, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, transport.ErrClosed
	}
	me := m.b.Rank()
	var local *StepError
	parent := m.owner(ptr, size)
	if parent == nil {
		local = stepErr(me, "Register", -1, fmt.Errorf(
			"buffer %#x (+%d bytes) is not inside memory from this mapper's Alloc: %w", ptr, size, cuda.ErrNotSupported))
	}
	var payload []byte
	if parent != nil {
		preg := parent.Priv.(*region)
		payload = binary.LittleEndian.AppendUint64(nil, preg.seq)
		payload = binary.LittleEndian.AppendUint64(payload, uint64(ptr-parent.Local))
	}
	all, err := agree(ctx, m.b, local, payload)
	if err != nil {
		return nil, err
	}
	preg := parent.Priv.(*region)
	peers := make([]uintptr, len(all))
	var failed *StepError
	for r, p := range all {
		if len(p) != 16 {
			failed = stepErr(me, "decode offset", r, fmt.Errorf("message of %d bytes, want 16", len(p)))
			break
		}
		seq, off := binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:])
		if seq != preg.seq {
			failed = stepErr(me, "Register", r, fmt.Errorf("rank %d registers memory of Alloc #%d, this rank of #%d", r, seq, preg.seq))
			break
		}
		peers[r] = parent.Peers[r] + uintptr(off)
	}
	if _, err := agree(ctx, m.b, failed, nil); err != nil {
		return nil, err
	}
	out := &transport.Region{Size: size, Local: ptr, Peers: peers, Priv: &region{m: m, seq: preg.seq, parent: parent}}
	m.regions.Add(out)
	return out, nil
}

// owner is the live Alloc region holding [ptr, ptr+size), or nil.
func (m *Mapper) owner(ptr uintptr, size uint64) *transport.Region {
	if size == 0 {
		return nil
	}
	for r := range m.regions.All() {
		if reg := r.Priv.(*region); reg.parent == nil &&
			ptr >= r.Local && uint64(ptr-r.Local) < r.Size && size <= r.Size-uint64(ptr-r.Local) {
			return r
		}
	}
	return nil
}

// Free unmaps peers' memory, waits until every rank has, then releases the
// local allocation. Freeing a Register view releases nothing.
func (m *Mapper) Free(ctx context.Context, r *transport.Region) error {
	m.mu.Lock()
	defer m.mu.Unlock()
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

// Close frees the regions still live, newest first (collective, like Free).
func (m *Mapper) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return m.regions.Drain(closeTimeout, func(ctx context.Context, _ *transport.Region, reg *region) error {
		if reg.parent != nil {
			return nil
		}
		return m.release(ctx, reg)
	})
}

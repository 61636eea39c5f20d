package uva

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
)

// closeTimeout bounds the barriers Close runs for the regions left over,
// since Close has no context of its own.
const closeTimeout = 60 * time.Second

// Mapper reaches peers' memory when every rank lives in this process (a
// goroutine per rank, each with its own device): a cuMemAlloc pointer is
// valid on every GPU once this rank's context has peer access to the
// owner's. It implements transport.Mapper; Alloc, Register and Free are
// collective.
type Mapper struct {
	drv cuda.Driver
	b   transport.Bootstrap
	dev cuda.Device
	ctx cuda.Context

	mu      sync.Mutex // held for a whole collective operation
	regions transport.Regions[*region]
	peers   map[cuda.Device]bool // peer devices whose primary context is retained and reachable
	closed  bool
}

// region is a Region's Priv.
type region struct {
	m     *Mapper
	owned bool // allocated by Alloc: freed by Free
}

var _ transport.Mapper = (*Mapper)(nil)

// New returns a Mapper for the rank that drives dev through ctx.
func New(drv cuda.Driver, b transport.Bootstrap, dev cuda.Device, ctx cuda.Context) (*Mapper, error) {
	if drv == nil || b == nil {
		return nil, errors.New("uva: New: nil driver or bootstrap")
	}
	return &Mapper{drv: drv, b: b, dev: dev, ctx: ctx, peers: map[cuda.Device]bool{}}, nil
}

// Name is "uva".
func (m *Mapper) Name() string { return "uva" }

func marshal(p uintptr, dev cuda.Device) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(p))
	return binary.LittleEndian.AppendUint32(b, uint32(dev))
}

func unmarshal(b []byte) (uintptr, cuda.Device, error) {
	if len(b) != 12 {
		return 0, 0, fmt.Errorf("pointer message of %d bytes, want 12", len(b))
	}
	return uintptr(binary.LittleEndian.Uint64(b)), cuda.Device(int32(binary.LittleEndian.Uint32(b[8:]))), nil
}

// Alloc allocates size bytes on this rank's device and gives every rank
// every other rank's pointer.
func (m *Mapper) Alloc(ctx context.Context, size uint64) (*transport.Region, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, transport.ErrClosed
	}
	var local *StepError
	var p cuda.DevicePtr
	if size == 0 {
		local = stepErr(m.b.Rank(), "Alloc", -1, fmt.Errorf("size 0: %w", cuda.ErrorInvalidValue))
	} else if q, err := m.drv.MemAlloc(m.ctx, size); err != nil {
		local = stepErr(m.b.Rank(), "cuMemAlloc", -1, fmt.Errorf("%d bytes: %w", size, err))
	} else {
		p = q
	}
	reg, err := m.share(ctx, local, uintptr(p), size, true)
	if err != nil && local == nil {
		// Peers never used the pointer: no barrier needed.
		_ = m.drv.MemFree(m.ctx, p)
	}
	return reg, err
}

// Register gives every rank every other rank's [ptr, ptr+size), which must
// be device memory of the rank's device (any cuMemAlloc memory works).
func (m *Mapper) Register(ctx context.Context, ptr uintptr, size uint64) (*transport.Region, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, transport.ErrClosed
	}
	var local *StepError
	if size == 0 || ptr == 0 {
		local = stepErr(m.b.Rank(), "Register", -1, fmt.Errorf("buffer %#x of %d bytes: %w", ptr, size, cuda.ErrorInvalidValue))
	}
	return m.share(ctx, local, ptr, size, false)
}

// share exchanges pointers, opens peer access to every peer device, and
// agrees that every rank succeeded.
func (m *Mapper) share(ctx context.Context, local *StepError, p uintptr, size uint64, owned bool) (*transport.Region, error) {
	me := m.b.Rank()
	all, err := agree(ctx, m.b, local, marshal(p, m.dev))
	if err != nil {
		return nil, err
	}
	peers := make([]uintptr, len(all))
	var failed *StepError
	for r, msg := range all {
		ptr, dev, err := unmarshal(msg)
		if err != nil {
			failed = stepErr(me, "decode pointer", r, err)
			break
		}
		peers[r] = ptr
		if r == me || dev == m.dev {
			continue
		}
		if err := m.reach(dev); err != nil {
			failed = stepErr(me, "cuCtxEnablePeerAccess", r, fmt.Errorf("device %d: %w", dev, err))
			break
		}
	}
	if _, err := agree(ctx, m.b, failed, nil); err != nil {
		return nil, err
	}
	out := &transport.Region{Size: size, Local: p, Peers: peers, Priv: &region{m: m, owned: owned}}
	m.regions.Add(out)
	return out, nil
}

// reach gives this rank's context access to dev's memory, once: it retains
// dev's primary context (released by Close) and enables peer access to it.
func (m *Mapper) reach(dev cuda.Device) error {
	if m.peers[dev] {
		return nil
	}
	pctx, err := m.drv.PrimaryCtxRetain(dev)
	if err != nil {
		return fmt.Errorf("retain primary context: %w", err)
	}
	if err := m.drv.CtxEnablePeerAccess(m.ctx, pctx); err != nil && !errors.Is(err, cuda.ErrorPeerAccessAlreadyEnabled) {
		_ = m.drv.PrimaryCtxRelease(dev)
		return err
	}
	m.peers[dev] = true
	return nil
}

// Free waits until every rank is done with the region, then frees the local
// memory if Alloc made it.
func (m *Mapper) Free(ctx context.Context, r *transport.Region) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	reg, ok := m.take(r)
	if !ok {
		return fmt.Errorf("uva: Free: region %p is not live in this mapper", r)
	}
	return m.release(ctx, r, reg)
}

func (m *Mapper) release(ctx context.Context, r *transport.Region, reg *region) error {
	me := m.b.Rank()
	var errs []error
	if err := m.b.Barrier(ctx); err != nil {
		errs = append(errs, stepErr(me, "barrier before free", -1, err))
	}
	if reg.owned {
		if err := m.drv.MemFree(m.ctx, cuda.DevicePtr(r.Local)); err != nil {
			errs = append(errs, stepErr(me, "cuMemFree", -1, err))
		}
		reg.owned = false
	}
	return errors.Join(errs...)
}

func (m *Mapper) take(r *transport.Region) (*region, bool) {
	return m.regions.Take(r, func(reg *region) bool { return reg.m == m })
}

// Close frees the regions still live, newest first (collective, like
// Free), and releases the peers' primary contexts.
func (m *Mapper) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	var errs []error
	if err := m.regions.Drain(closeTimeout, m.release); err != nil {
		errs = append(errs, err)
	}
	for _, dev := range slices.Sorted(maps.Keys(m.peers)) {
		if err := m.drv.PrimaryCtxRelease(dev); err != nil {
			errs = append(errs, stepErr(m.b.Rank(), "cuDevicePrimaryCtxRelease", -1, fmt.Errorf("device %d: %w", dev, err)))
		}
	}
	clear(m.peers)
	return errors.Join(errs...)
}

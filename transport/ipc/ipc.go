package ipc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
)

// closeTimeout bounds the barriers Close runs for the regions left over,
// since Close has no context of its own.
const closeTimeout = 60 * time.Second

// Mapper maps peers' cuMemAlloc memory into this process with CUDA IPC
// handles. It implements transport.Mapper; Alloc, Register and Free are
// collective.
type Mapper struct {
	drv cuda.Driver
	b   transport.Bootstrap
	ctx cuda.Context

	mu      sync.Mutex // held for a whole collective operation
	regions transport.Regions[*region]
	opens   map[openKey]*openEntry
	closed  bool
}

// openKey names one peer allocation opened here: CUDA refuses to open the
// same allocation twice in one process, so Registers of buffers in one peer
// allocation share the mapping.
type openKey struct {
	peer int
	h    cuda.IpcMemHandle
}

type openEntry struct {
	base cuda.DevicePtr // this process's address of the peer allocation
	refs int
}

// region is a Region's Priv: what Free must undo.
type region struct {
	m     *Mapper
	owned bool           // allocated by Alloc: freed by Free
	base  cuda.DevicePtr // the local allocation (owned only)
	opens []openKey
}

var _ transport.Mapper = (*Mapper)(nil)

// New returns a Mapper for this rank; ctx is the rank's CUDA context.
func New(drv cuda.Driver, b transport.Bootstrap, ctx cuda.Context) (*Mapper, error) {
	if drv == nil || b == nil {
		return nil, errors.New("ipc: New: nil driver or bootstrap")
	}
	return &Mapper{drv: drv, b: b, ctx: ctx, opens: map[openKey]*openEntry{}}, nil
}

// Name is "ipc".
func (m *Mapper) Name() string { return "ipc" }

// payload: the handle of the allocation and the buffer's offset in it.
const payloadLen = 64 + 8

func marshal(h cuda.IpcMemHandle, off uint64) []byte {
	return binary.LittleEndian.AppendUint64(append([]byte(nil), h[:]...), off)
}

func unmarshal(p []byte) (cuda.IpcMemHandle, uint64, error) {
	var h cuda.IpcMemHandle
	if len(p) != payloadLen {
		return h, 0, fmt.Errorf("handle message of %d bytes, want %d", len(p), payloadLen)
	}
	copy(h[:], p)
	return h, binary.LittleEndian.Uint64(p[64:]), nil
}

// Alloc allocates size bytes with cuMemAlloc and maps every peer's
// allocation.
func (m *Mapper) Alloc(ctx context.Context, size uint64) (*transport.Region, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, transport.ErrClosed
	}
	me := m.b.Rank()
	var local *StepError
	var p cuda.DevicePtr
	var h cuda.IpcMemHandle
	if size == 0 {
		local = stepErr(me, "Alloc", -1, fmt.Errorf("size 0: %w", cuda.ErrorInvalidValue))
	} else if q, err := m.drv.MemAlloc(m.ctx, size); err != nil {
		local = stepErr(me, "cuMemAlloc", -1, fmt.Errorf("%d bytes: %w", size, err))
	} else if h, err = m.drv.IpcGetMemHandle(m.ctx, q); err != nil {
		local = stepErr(me, "cuIpcGetMemHandle", -1, err)
		_ = m.drv.MemFree(m.ctx, q)
	} else {
		p = q
	}
	all, err := agree(ctx, m.b, local, marshal(h, 0))
	if err != nil {
		if local == nil {
			// No peer opened anything yet, so no barrier is needed.
			_ = m.drv.MemFree(m.ctx, p)
		}
		return nil, err
	}
	return m.mapPeers(ctx, all, uintptr(p), size, &region{m: m, owned: true, base: p})
}

// Register exposes [ptr, ptr+size) of a cuMemAlloc allocation to peers.
// The handle covers the whole allocation; peers add the offset.
func (m *Mapper) Register(ctx context.Context, ptr uintptr, size uint64) (*transport.Region, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, transport.ErrClosed
	}
	me := m.b.Rank()
	var local *StepError
	var h cuda.IpcMemHandle
	var off uint64
	base, asize, err := m.drv.MemGetAddressRange(m.ctx, cuda.DevicePtr(ptr))
	switch {
	case size == 0:
		local = stepErr(me, "Register", -1, fmt.Errorf("size 0: %w", cuda.ErrorInvalidValue))
	case err != nil:
		local = stepErr(me, "cuMemGetAddressRange", -1, fmt.Errorf("pointer %#x: %w", ptr, err))
	case uint64(ptr)-uint64(base) > asize || size > asize-(uint64(ptr)-uint64(base)):
		local = stepErr(me, "Register", -1, fmt.Errorf("[%#x,+%d) overruns its allocation [%#x,+%d): %w",
			ptr, size, base, asize, cuda.ErrorInvalidValue))
	default:
		off = uint64(ptr) - uint64(base)
		if h, err = m.drv.IpcGetMemHandle(m.ctx, base); err != nil {
			local = stepErr(me, "cuIpcGetMemHandle", -1, fmt.Errorf("allocation %#x: %w", base, err))
		}
	}
	all, err := agree(ctx, m.b, local, marshal(h, off))
	if err != nil {
		return nil, err
	}
	return m.mapPeers(ctx, all, ptr, size, &region{m: m})
}

// mapPeers opens every peer's handle, agrees that all ranks did, and
// returns the region. On any failure every rank closes what it opened,
// waits for the others, then frees its own allocation.
func (m *Mapper) mapPeers(ctx context.Context, all [][]byte, local uintptr, size uint64, reg *region) (*transport.Region, error) {
	me := m.b.Rank()
	peers := make([]uintptr, len(all))
	peers[me] = local
	var failed *StepError
	for r, p := range all {
		if r == me {
			continue
		}
		h, off, err := unmarshal(p)
		if err != nil {
			failed = stepErr(me, "decode handle", r, err)
			break
		}
		base, err := m.open(r, h)
		if err != nil {
			failed = stepErr(me, "cuIpcOpenMemHandle", r, err)
			break
		}
		reg.opens = append(reg.opens, openKey{r, h})
		peers[r] = uintptr(base) + uintptr(off)
	}
	if _, err := agree(ctx, m.b, failed, nil); err != nil {
		_ = m.release(ctx, reg) // the step's error is the one to report
		return nil, err
	}
	out := &transport.Region{Size: size, Local: local, Peers: peers, Priv: reg}
	m.regions.Add(out)
	return out, nil
}

// open maps peer's allocation h, once per process.
func (m *Mapper) open(peer int, h cuda.IpcMemHandle) (cuda.DevicePtr, error) {
	k := openKey{peer, h}
	if e, ok := m.opens[k]; ok {
		e.refs++
		return e.base, nil
	}
	base, err := m.drv.IpcOpenMemHandle(m.ctx, h)
	if err != nil {
		return 0, err
	}
	m.opens[k] = &openEntry{base: base, refs: 1}
	return base, nil
}

// release undoes a region: close the peer handles it holds (the last user
// closes), wait until every rank has done so, then free the local
// allocation. It goes on past errors and returns them all.
func (m *Mapper) release(ctx context.Context, reg *region) error {
	me := m.b.Rank()
	var errs []error
	for i := len(reg.opens) - 1; i >= 0; i-- {
		k := reg.opens[i]
		e := m.opens[k]
		if e == nil {
			continue
		}
		if e.refs--; e.refs > 0 {
			continue
		}
		delete(m.opens, k)
		if err := m.drv.IpcCloseMemHandle(m.ctx, e.base); err != nil {
			errs = append(errs, stepErr(me, "cuIpcCloseMemHandle", k.peer, err))
		}
	}
	reg.opens = nil
	// Every importer must be done before the exporter frees.
	if err := m.b.Barrier(ctx); err != nil {
		errs = append(errs, stepErr(me, "barrier before free", -1, err))
	}
	if reg.owned {
		if err := m.drv.MemFree(m.ctx, reg.base); err != nil {
			errs = append(errs, stepErr(me, "cuMemFree", -1, err))
		}
		reg.owned = false
	}
	return errors.Join(errs...)
}

// Free closes peers' handles, waits until every rank has, then frees the
// local allocation if Alloc made it.
func (m *Mapper) Free(ctx context.Context, r *transport.Region) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	reg, ok := m.take(r)
	if !ok {
		return fmt.Errorf("ipc: Free: region %p is not live in this mapper", r)
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
		return m.release(ctx, reg)
	})
}

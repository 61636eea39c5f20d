package gpu

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// registration is a user buffer mapped by every peer.
type registration struct {
	be     *Backend
	region *transport.Region
	owned  bool
}

// Register exposes [ptr, ptr+size) to peers (collective). The region's peer
// addresses are what a zero-copy algorithm reads.
func (be *Backend) Register(ctx context.Context, ptr uintptr, size uint64) (collectives.Registration, error) {
	if ptr == 0 || size == 0 {
		return nil, fmt.Errorf("gpu backend: register %#x+%d: %w", ptr, size, collectives.ErrInvalidArgument)
	}
	if be.aborted.Load() {
		return nil, be.abortErr()
	}
	r, err := be.mapper.Register(ctx, ptr, size)
	if err != nil {
		return nil, fmt.Errorf("gpu backend: register: %w", err)
	}
	return be.track(&registration{be: be, region: r}), nil
}

// Alloc allocates size bytes of device memory already registered
// (collective).
func (be *Backend) Alloc(ctx context.Context, size uint64) (uintptr, collectives.Registration, error) {
	if size == 0 {
		return 0, nil, fmt.Errorf("gpu backend: alloc 0 bytes: %w", collectives.ErrInvalidArgument)
	}
	if be.aborted.Load() {
		return 0, nil, be.abortErr()
	}
	r, err := be.mapper.Alloc(ctx, size)
	if err != nil {
		return 0, nil, fmt.Errorf("gpu backend: alloc: %w", err)
	}
	return r.Local, be.track(&registration{be: be, region: r, owned: true}), nil
}

func (be *Backend) track(r *registration) *registration {
	be.regMu.Lock()
	be.regs[r] = struct{}{}
	be.regMu.Unlock()
	return r
}

// Close releases the registration (collective).
func (r *registration) Close(ctx context.Context) error {
	be := r.be
	be.regMu.Lock()
	_, ok := be.regs[r]
	delete(be.regs, r)
	be.regMu.Unlock()
	if !ok {
		return nil
	}
	return r.free(ctx)
}

func (r *registration) free(ctx context.Context) error {
	if err := r.be.mapper.Free(ctx, r.region); err != nil {
		return fmt.Errorf("gpu backend: free registration: %w", err)
	}
	return nil
}

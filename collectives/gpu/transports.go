package gpu

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/ipc"
	"github.com/goccl/goccl/transport/uva"
	"github.com/goccl/goccl/transport/vmm"
)

// newMapper builds the named transport for this rank (collective).
func newMapper(_ context.Context, name string, drv cuda.Driver, b transport.Bootstrap, dev cuda.Device, cctx cuda.Context) (transport.Mapper, error) {
	// Each branch returns a nil interface on error, never a typed nil.
	switch name {
	case "uva":
		if m, err := uva.New(drv, b, dev, cctx); err == nil {
			return m, nil
		} else {
			return nil, err
		}
	case "ipc":
		if m, err := ipc.New(drv, b, cctx); err == nil {
			return m, nil
		} else {
			return nil, err
		}
	case "vmm":
		if m, err := vmm.New(drv, b, cctx, dev); err == nil {
			return m, nil
		} else {
			return nil, err
		}
	}
	return nil, fmt.Errorf("unknown transport %q: %w", name, collectives.ErrInvalidArgument)
}

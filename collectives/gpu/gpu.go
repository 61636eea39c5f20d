package gpu

import (
	"context"
	"errors"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// Config selects the device and transport.
type Config struct {
	Device    int    // CUDA device ordinal this rank drives
	Transport string // "", "uva", "ipc", "vmm" (GOCCL_TRANSPORT)
	Algo      string // GOCCL_ALGO
}

// New builds the GPU backend for this rank. It is collective.
func New(ctx context.Context, b transport.Bootstrap, cfg Config) (collectives.Backend, error) {
	return nil, errors.New("gpu backend: not built yet")
}

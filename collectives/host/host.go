package host

import (
	"context"
	"errors"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// Config tunes the host backend.
type Config struct {
	// Algo forces an algorithm ("oneshot", "rsag"); empty chooses by size.
	Algo string
}

// New builds the host backend for this rank. It is collective.
func New(ctx context.Context, b transport.Bootstrap, cfg Config) (collectives.Backend, error) {
	return nil, errors.New("host backend: not built yet")
}

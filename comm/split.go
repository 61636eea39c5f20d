package comm

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// NoColor passed to Split as the color leaves the caller out of every new
// communicator (NCCL_SPLIT_NOCOLOR); Split then returns nil, nil.
const NoColor = -1

// Split makes a new communicator of the ranks that pass the same color,
// numbered by key (ties by parent rank), as ncclCommSplit. It is
// collective over the parent: every rank calls it, each with its own color
// and key. A rank passing NoColor joins no communicator.
func (c *Comm) Split(ctx context.Context, color, key int, opts Options) (*Comm, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("goccl: rank %d: Split: %w", c.rank, collectives.ErrNotSupported)
}

// Shrink makes a communicator of the ranks not in exclude, numbered in
// parent order, as ncclCommShrink. It works after the parent aborted (a
// rank died), so that a job can go on without it. Every surviving rank
// calls it with the same exclude list.
func (c *Comm) Shrink(ctx context.Context, exclude []int, opts Options) (*Comm, error) {
	return nil, fmt.Errorf("goccl: rank %d: Shrink: %w", c.rank, collectives.ErrNotSupported)
}

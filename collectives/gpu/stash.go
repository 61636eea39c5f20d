package gpu

import (
	"fmt"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// The stash: a one-shot AllReduce launch gets dynamic shared memory for
// one round of its block, and each thread keeps there the vectors it
// pushes to the peers, so that after the barrier the kernel reads only the
// peers' chunks and not its own input again (kernels/allreduce.cu).

// defaultStash is the largest round a one-shot block keeps in shared
// memory: a whole slot, which covers every one-shot size at 2 ranks.
const defaultStash = maxSlot

// staticSmemReserve is left of the GPU's per-block shared memory for the
// kernels' static shared memory (the barrier's abort word).
const staticSmemReserve = 1 << 10

// setupStash caps the stash at what the GPU gives one block and lets the
// one-shot AllReduce kernels take it: past 48 KiB a kernel must opt in.
func (be *Backend) setupStash() error {
	if be.tune.stash == 0 {
		return nil
	}
	most, err := be.drv.DeviceAttribute(be.dev, cuda.AttrMaxSharedMemPerBlockOptin)
	if err != nil {
		return fmt.Errorf("gpu backend: shared memory per block: %w", err)
	}
	be.tune.stash = min(be.tune.stash, be.tune.slot, int64(most)-staticSmemReserve) &^ 15
	if be.tune.stash <= 0 {
		be.tune.stash = 0
		return nil
	}
	for dt := range numTypes {
		for op := range numOps {
			fn := be.fns.get(famAllReduceOneShot, collectives.DataType(dt), collectives.Op(op))
			if fn == 0 { // an optional kernel the fatbin lacks
				continue
			}
			if err := be.drv.FuncSetMaxDynamicSharedMem(be.ctx, fn, int(be.tune.stash)); err != nil {
				return fmt.Errorf("gpu backend: %d bytes of shared memory for %s: %w", be.tune.stash,
					kernelName(famAllReduceOneShot, collectives.DataType(dt), collectives.Op(op)), err)
			}
		}
	}
	return nil
}

// stashFor is the dynamic shared memory of a one-shot AllReduce of count
// elements of elem bytes on grid blocks: one block's round, as the kernel
// cuts it (chunk_elems in kernels/common.cuh), where the stash holds it,
// else 0 (the kernel then reads its input again).
func (t *tuning) stashFor(count uint64, elem int64, grid int) uint32 {
	if t.stash == 0 {
		return 0
	}
	chunk := min(roundUp(ceilDiv(count, uint64(grid)), uint64(t.share/elem)), uint64(t.slot/elem))
	if bytes := chunk * uint64(elem); bytes <= uint64(t.stash) {
		return uint32(bytes)
	}
	return 0
}

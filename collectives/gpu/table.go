package gpu

import (
	"fmt"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// kernel families in the fatbin. Reducing families have one kernel per
// (type, op); copy families one kernel for every type.
type family int

const (
	famAllReduceOneShot family = iota
	famAllReduceTwoShot
	famReduce
	famReduceScatter
	famAllReduceLL
	famCEReduce
	famBroadcast
	famAllGather
	famP2P // a group's Sends and Recvs (p2p.go)
	numFamilies
)

var familyStems = [numFamilies]string{
	"allreduce_oneshot", "allreduce_twoshot", "reduce_oneshot",
	"reducescatter_oneshot", "allreduce_ll", "cereduce", "broadcast_oneshot", "allgather_oneshot",
	"p2p",
}

func (f family) reduces() bool { return f <= famCEReduce }

// Kernel spellings of collectives.DataType and collectives.Op, by enum value.
var (
	typeNames = [...]string{
		collectives.Int8: "i8", collectives.Uint8: "u8", collectives.Int32: "i32",
		collectives.Uint32: "u32", collectives.Int64: "i64", collectives.Uint64: "u64",
		collectives.Float16: "f16", collectives.Float32: "f32", collectives.Float64: "f64",
		collectives.BFloat16: "bf16", collectives.Float8E4M3: "f8e4m3", collectives.Float8E5M2: "f8e5m2",
	}
	opNames = [...]string{
		collectives.Sum: "sum", collectives.Prod: "prod", collectives.Max: "max",
		collectives.Min: "min", collectives.Avg: "avg", collectives.PreMulSum: "premulsum",
	}
)

// optionalKernel reports whether a kernel may be missing from the fatbin:
// the 8-bit float and PreMulSum kernels (a fatbin built before them has
// none; the copy-engine family never has PreMulSum). A call that needs a
// missing one fails with ErrNotSupported instead of the whole backend.
func optionalKernel(f family, t collectives.DataType, op collectives.Op) bool {
	return f.reduces() && (t.IsFloat8() || op == collectives.PreMulSum)
}

const (
	numTypes = len(typeNames)
	numOps   = len(opNames)
)

// KernelName is the exported symbol of a reducing family's kernel, e.g.
// goccl_allreduce_oneshot_f32_sum; copy families ignore t and op.
func kernelName(f family, t collectives.DataType, op collectives.Op) string {
	if !f.reduces() {
		return "goccl_" + familyStems[f]
	}
	return "goccl_" + familyStems[f] + "_" + typeNames[t] + "_" + opNames[op]
}

// familyOf maps a collective and algorithm to the kernel family.
func familyOf(c collectives.Collective, algo collectives.Algorithm) family {
	switch c {
	case collectives.AllReduce:
		switch algo {
		case collectives.LL:
			return famAllReduceLL
		case collectives.TwoShot:
			return famAllReduceTwoShot
		}
		return famAllReduceOneShot
	case collectives.Reduce:
		return famReduce
	case collectives.ReduceScatter:
		return famReduceScatter
	case collectives.Broadcast:
		return famBroadcast
	default:
		return famAllGather
	}
}

// funcTable holds every kernel, looked up once at init; the hot path
// indexes it.
type funcTable [numFamilies][numTypes][numOps]cuda.Function

func (t *funcTable) get(f family, dt collectives.DataType, op collectives.Op) cuda.Function {
	if !f.reduces() {
		return t[f][0][0]
	}
	return t[f][dt][op]
}

// load resolves every kernel from mod.
func (t *funcTable) load(drv cuda.Driver, ctx cuda.Context, mod cuda.Module) error {
	for f := family(0); f < numFamilies; f++ {
		nt, no := numTypes, numOps
		if !f.reduces() {
			nt, no = 1, 1
		}
		for dt := 0; dt < nt; dt++ {
			for op := 0; op < no; op++ {
				name := kernelName(f, collectives.DataType(dt), collectives.Op(op))
				fn, err := drv.ModuleGetFunction(ctx, mod, name)
				if err != nil && optionalKernel(f, collectives.DataType(dt), collectives.Op(op)) {
					continue
				}
				if err != nil {
					return fmt.Errorf("gpu: kernel %s: %w", name, err)
				}
				t[f][dt][op] = fn
			}
		}
	}
	return nil
}

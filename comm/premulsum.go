package comm

import (
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// Scaled sums. A PreMulSum op multiplies every rank's input by a scalar
// before the sum: averaging by a count that is not the communicator's
// size, or by a factor computed on the GPU. As NCCL's
// ncclRedOpCreatePreMulSum, the op is a handle of this communicator bound
// to one DataType; pass it as the op of AllReduce, Reduce and
// ReduceScatter (Group's too). Ranks may use different scalars.

// firstOpHandle is the first handle value; handles stay far above the
// built-in ops so that a built-in value is never mistaken for one.
const firstOpHandle Op = 1 << 10

// ScalarOf is v as an element of dt (see collectives.ScalarOf): the
// scalar is copied now, as NCCL's ncclScalarHostImmediate.
func ScalarOf(dt DataType, v float64) (Scalar, error) { return collectives.ScalarOf(dt, v) }

// ScalarAt is the element of the op's DataType at address p (device
// memory on the GPU backend, host memory on the host backend), read by
// every call when it runs (NCCL's ncclScalarDevice): it may change
// between calls, or between replays of a captured graph.
func ScalarAt(p uintptr) Scalar { return collectives.ScalarAt(p) }

type opEntry struct {
	dt   DataType
	s    Scalar
	live bool
}

// CreatePreMulSum returns an op for calls of type dt that sums every
// rank's input multiplied by s. Destroy it with DestroyOp.
func (c *Comm) CreatePreMulSum(s Scalar, dt DataType) (Op, error) {
	if !dt.Valid() {
		return 0, fmt.Errorf("goccl: rank %d: CreatePreMulSum: datatype %d: %w", c.rank, dt, collectives.ErrUnknownDataType)
	}
	if err := c.Err(); err != nil {
		return 0, err
	}
	c.opsMu.Lock()
	defer c.opsMu.Unlock()
	e := opEntry{dt: dt, s: s, live: true}
	for i := range c.ops {
		if !c.ops[i].live {
			c.ops[i] = e
			return firstOpHandle + Op(i), nil
		}
	}
	c.ops = append(c.ops, e)
	return firstOpHandle + Op(len(c.ops)-1), nil
}

// DestroyOp releases an op made by CreatePreMulSum. Calls already issued
// with it are unaffected (they carry their scalar or its address).
func (c *Comm) DestroyOp(op Op) error {
	c.opsMu.Lock()
	defer c.opsMu.Unlock()
	i := int(op - firstOpHandle)
	if op < firstOpHandle || i >= len(c.ops) || !c.ops[i].live {
		return fmt.Errorf("goccl: rank %d: DestroyOp: op %d is not an op of this communicator: %w", c.rank, op, collectives.ErrUnknownOp)
	}
	c.ops[i] = opEntry{}
	return nil
}

// resolveOp turns a's op handle into PreMulSum and its scalar. A
// built-in op passes through; PreMulSum given directly is refused, as it
// has no scalar.
func (c *Comm) resolveOp(a *collectives.Args) error {
	if !a.Coll.Reduces() {
		return nil
	}
	switch {
	case a.Op == collectives.PreMulSum:
		return fmt.Errorf("%s: op %s needs a scalar: pass an op from CreatePreMulSum: %w", a.Coll, a.Op, collectives.ErrUnknownOp)
	case a.Op < firstOpHandle:
		return nil // a built-in op, or an unknown one that Validate names
	}
	c.opsMu.Lock()
	defer c.opsMu.Unlock()
	i := int(a.Op - firstOpHandle)
	if i >= len(c.ops) || !c.ops[i].live {
		return fmt.Errorf("%s: op %d is not an op of this communicator (destroyed, or another's): %w", a.Coll, a.Op, collectives.ErrUnknownOp)
	}
	e := c.ops[i]
	if e.dt != a.Type {
		return fmt.Errorf("%s: op %d was created for %s, the call is of %s: %w", a.Coll, a.Op, e.dt, a.Type, collectives.ErrInvalidArgument)
	}
	a.Op, a.Scalar = collectives.PreMulSum, e.s
	return nil
}

// ScalarFromBytes is the element of dt in b (its first Size() bytes, as a
// C caller's pointer holds it), copied now.
func ScalarFromBytes(dt DataType, b []byte) (Scalar, error) {
	return collectives.ScalarFromBytes(dt, b)
}

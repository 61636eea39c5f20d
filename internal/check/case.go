package check

import (
	"errors"
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// Case is one collective call as seen by the checker. Count follows NCCL
// (collectives.Args): elements per rank's input for AllReduce, Broadcast,
// Reduce and AllGather, elements per rank's output for ReduceScatter.
type Case struct {
	Coll   collectives.Collective
	Type   collectives.DataType
	Op     collectives.Op // ignored by Broadcast and AllGather
	Root   int            // Broadcast and Reduce only
	NRanks int
	Count  int
	Seed   uint64
	// Roundings is how many times an 8-bit float reduction may round its
	// partial results to the type (0 and 1: once, at the end, as goccl's
	// kernels do on one node; a reduction across nodes rounds once per leg,
	// and NCCL's rings once per step).
	Roundings int
}

// ErrBadCase is wrapped by every Case validation error.
var ErrBadCase = errors.New("check: invalid case")

// Validate reports what is wrong with c, if anything.
func (c Case) Validate() error {
	switch {
	case !c.Coll.Valid():
		return fmt.Errorf("%w: collective %d", ErrBadCase, c.Coll)
	case !c.Type.Valid():
		return fmt.Errorf("%w: datatype %d", ErrBadCase, c.Type)
	case c.Coll.Reduces() && !c.Op.Valid():
		return fmt.Errorf("%w: op %d", ErrBadCase, c.Op)
	case c.NRanks < 1 || c.NRanks > MaxRanks:
		return fmt.Errorf("%w: nranks %d not in [1,%d]", ErrBadCase, c.NRanks, MaxRanks)
	case c.Count < 0:
		return fmt.Errorf("%w: count %d", ErrBadCase, c.Count)
	case c.Coll.Rooted() && (c.Root < 0 || c.Root >= c.NRanks):
		return fmt.Errorf("%w: root %d not in [0,%d)", ErrBadCase, c.Root, c.NRanks)
	}
	return nil
}

// MaxRanks bounds NRanks; far above what one node holds.
const MaxRanks = 1024

// InputCount is the number of elements in each rank's input.
func (c Case) InputCount() int {
	if c.Coll == collectives.ReduceScatter {
		return c.Count * c.NRanks
	}
	return c.Count
}

// OutputCount is the number of elements rank must produce; 0 for the
// non-root ranks of Reduce.
func (c Case) OutputCount(rank int) int {
	switch c.Coll {
	case collectives.AllGather:
		return c.Count * c.NRanks
	case collectives.Reduce:
		if rank != c.Root {
			return 0
		}
	}
	return c.Count
}

// HasInput reports whether rank contributes an input (every rank but the
// non-root ranks of Broadcast).
func (c Case) HasInput(rank int) bool {
	return !(c.Coll == collectives.Broadcast && rank != c.Root)
}

// String names the case the way failure messages print it.
func (c Case) String() string {
	s := fmt.Sprintf("%s %s count=%d nranks=%d", c.Coll, c.Type, c.Count, c.NRanks)
	if c.Coll.Reduces() {
		s += " op=" + c.Op.String()
	}
	if c.Coll.Rooted() {
		s += fmt.Sprintf(" root=%d", c.Root)
	}
	return s + fmt.Sprintf(" seed=%#x", c.Seed)
}

// segment is a run of output elements that all reduce (or copy) the same
// contributors' inputs at a fixed offset.
type segment struct {
	out, n  int   // output element range [out, out+n)
	src     int   // input index of the segment's first element
	ranks   []int // contributors
	reduces bool  // false: the single contributor's value is copied
}

// segments describes rank's output of c.
func (c Case) segments(rank int) []segment {
	all := make([]int, c.NRanks)
	for i := range all {
		all[i] = i
	}
	switch c.Coll {
	case collectives.AllReduce:
		return []segment{{0, c.Count, 0, all, true}}
	case collectives.Reduce:
		if rank != c.Root {
			return nil
		}
		return []segment{{0, c.Count, 0, all, true}}
	case collectives.ReduceScatter:
		return []segment{{0, c.Count, rank * c.Count, all, true}}
	case collectives.Broadcast:
		return []segment{{0, c.Count, 0, []int{c.Root}, false}}
	case collectives.AllGather:
		segs := make([]segment, c.NRanks)
		for r := range segs {
			segs[r] = segment{r * c.Count, c.Count, 0, []int{r}, false}
		}
		return segs
	}
	return nil
}

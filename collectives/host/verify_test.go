package host

import (
	"bytes"
	"context"
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// call describes one collective made by every rank of a job.
type call struct {
	coll    collectives.Collective
	dt      collectives.DataType
	op      collectives.Op
	count   int
	root    int
	inPlace bool
}

func (c call) String() string {
	place := "out-of-place"
	if c.inPlace {
		place = "in-place"
	}
	return fmt.Sprintf("%s %s %s count %d root %d %s", c.coll, c.dt, c.op, c.count, c.root, place)
}

// verify runs c on every rank of j with fresh random inputs and poisoned
// outputs and checks every output element (and that inputs survive
// out-of-place calls) against a reference computed here.
func (j *job) verify(c call) error {
	n := j.n
	a := collectives.Args{Coll: c.coll, Count: c.count, Type: c.dt, Op: c.op, Root: c.root}
	sendBytes, recvBytes := a.SendBytes(n), a.RecvBytes(n)
	ins := make([][]byte, n)    // each rank's input, as sent
	outs := make([][]byte, n)   // each rank's output buffer
	before := make([][]byte, n) // each rank's output buffer before the call
	sends := make([][]byte, n)
	args := make([]collectives.Args, n)
	j.resetArenas()
	for r := 0; r < n; r++ {
		ins[r] = alloc(sendBytes)
		if c.coll != collectives.Broadcast || r == c.root {
			fill(j.rng, c.dt, c.op, ins[r])
		}
		args[r] = a
		switch {
		case !c.inPlace:
			sends[r] = j.cloneFor(r, ins[r])
			outs[r] = j.buf(r, recvBytes)
			poison(c.dt, outs[r])
			args[r].Send, args[r].Recv = addr(sends[r]), addr(outs[r])
			if c.coll == collectives.Broadcast && r != c.root {
				args[r].Send = 0 // allowed: non-roots have no input
			}
		case c.coll == collectives.AllGather:
			outs[r] = j.buf(r, recvBytes)
			poison(c.dt, outs[r])
			copy(outs[r][r*sendBytes:], ins[r])
			args[r].Recv = addr(outs[r])
			args[r].Send = args[r].Recv + uintptr(r*sendBytes)
		case c.coll == collectives.ReduceScatter:
			outs[r] = j.cloneFor(r, ins[r])
			args[r].Send = addr(outs[r])
			args[r].Recv = args[r].Send + uintptr(r*recvBytes)
		default:
			outs[r] = j.buf(r, recvBytes)
			if c.coll == collectives.Broadcast && r != c.root {
				poison(c.dt, outs[r])
			} else {
				copy(outs[r], ins[r])
			}
			args[r].Send, args[r].Recv = addr(outs[r]), addr(outs[r])
		}
		if c.count == 0 {
			args[r].Send, args[r].Recv = 0, 0
		}
		before[r] = append([]byte(nil), outs[r]...)
	}
	for r, err := range j.run(context.Background(), args) {
		if err != nil {
			return fmt.Errorf("%v: rank %d: %w", c, r, err)
		}
	}
	for r := 0; r < n; r++ {
		if !c.inPlace && !bytes.Equal(sends[r], ins[r]) {
			return fmt.Errorf("%v: rank %d's send buffer changed", c, r)
		}
		// AllReduce outputs are identical on every rank: rank 0's is
		// checked element by element, the others against it.
		if c.coll == collectives.AllReduce && r > 0 {
			if !bytes.Equal(outs[r], outs[0]) {
				return fmt.Errorf("%v: rank %d's output differs from rank 0's at byte %d", c, r, firstDiff(outs[r], outs[0]))
			}
			continue
		}
		if err := j.checkRank(c, r, ins, outs[r], before[r]); err != nil {
			return fmt.Errorf("%v: rank %d: %w", c, r, err)
		}
	}
	return nil
}

func (j *job) checkRank(c call, r int, ins [][]byte, out, before []byte) error {
	n, count, es := j.n, c.count, c.dt.Size()
	switch c.coll {
	case collectives.AllReduce, collectives.Reduce:
		if c.coll == collectives.Reduce && r != c.root {
			if !bytes.Equal(out, before) {
				return fmt.Errorf("non-root's receive buffer was written")
			}
			return nil
		}
		for i := 0; i < count; i++ {
			if err := checkReduced(c.dt, c.op, out, i, ins, i); err != nil {
				return err
			}
		}
	case collectives.ReduceScatter:
		for i := 0; i < count; i++ {
			if err := checkReduced(c.dt, c.op, out, c.inPlaceIndex(r, i), ins, r*count+i); err != nil {
				return err
			}
		}
	case collectives.Broadcast:
		if !bytes.Equal(out[:count*es], ins[c.root][:count*es]) {
			return fmt.Errorf("broadcast output differs from root %d's input at byte %d", c.root, firstDiff(out, ins[c.root]))
		}
	case collectives.AllGather:
		for q := 0; q < n; q++ {
			got := out[q*count*es : (q+1)*count*es]
			if !bytes.Equal(got, ins[q]) {
				return fmt.Errorf("slot %d differs from rank %d's input at byte %d", q, q, firstDiff(got, ins[q]))
			}
		}
	}
	return nil
}

// inPlaceIndex is where ReduceScatter's element i lands in the buffer the
// test kept (in place: the whole send buffer).
func (c call) inPlaceIndex(r, i int) int {
	if c.inPlace {
		return r*c.count + i
	}
	return i
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func clone(b []byte) []byte {
	c := alloc(len(b))
	copy(c, b)
	return c
}

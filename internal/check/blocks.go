package check

import (
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// Blocks are what point-to-point calls move: the elements rank src sends
// rank dst (a Send, or a block of AllToAll(v), Gather or Scatter). Their
// values depend only on the type, the count, the seed and the two ranks,
// so the receiver regenerates what it should have got; they arrive
// copied, so the comparison is bitwise.

func blockCase(t collectives.DataType, nranks, count, src, dst int, seed uint64) Case {
	return Case{Coll: collectives.Broadcast, Type: t, NRanks: nranks, Count: count, Root: src,
		Seed: Seed(seed, uint64(src), uint64(dst))}
}

// FillBlock writes the block src sends dst (len(out)/t.Size() elements).
func FillBlock(t collectives.DataType, nranks, src, dst int, seed uint64, out []byte) error {
	if !t.Valid() || len(out)%t.Size() != 0 {
		return fmt.Errorf("%w: block of %d bytes of %v", ErrBadCase, len(out), t)
	}
	if dst < 0 || dst >= nranks {
		return errBadRank(dst, nranks)
	}
	return FillInput(blockCase(t, nranks, len(out)/t.Size(), src, dst, seed), src, out)
}

// VerifyBlock compares got with the block src sends dst; scratch (at least
// len(got) bytes) holds the reference.
func VerifyBlock(t collectives.DataType, nranks, src, dst int, seed uint64, got, scratch []byte) (Result, error) {
	if len(scratch) < len(got) {
		return Result{}, errBadLen("scratch", len(scratch), len(got))
	}
	want := scratch[:len(got)]
	if err := FillBlock(t, nranks, src, dst, seed, want); err != nil {
		return Result{}, err
	}
	ts := t.Size()
	res := Result{Checked: len(got) / ts}
	for i := 0; i < len(got); i += ts {
		if string(got[i:i+ts]) != string(want[i:i+ts]) {
			res.Wrong++
			if len(res.First) < MaxMismatches {
				res.First = append(res.First, Mismatch{Index: i / ts, Got: fmt.Sprintf("%#x", got[i:i+ts]), Want: fmt.Sprintf("%#x", want[i:i+ts])})
			}
		}
	}
	return res, nil
}

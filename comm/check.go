package comm

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// GOCCL_CHECK: before each collective the ranks allgather what they were
// asked to do and fail alike, naming the first rank that disagrees with
// rank 0, instead of silently corrupting data or hanging.

// callRecord is one rank's view of a call. Valid is false when the rank's
// own argument check failed: the others then fail too rather than wait.
// Facts are the backend's PathFacts, as bits.
type callRecord struct {
	Valid bool
	Coll  collectives.Collective
	Count int64
	Type  collectives.DataType
	Op    collectives.Op
	Root  int64
	Facts uint8
}

const callRecordSize = 1 + 4 + 8 + 4 + 4 + 8 + 1

// The bits of callRecord.Facts, and what each says when ranks differ.
const (
	factSendRegistered uint8 = 1 << iota
	factRecvRegistered
	factInPlace
	factsKnown = factSendRegistered | factRecvRegistered | factInPlace
)

var factNames = []struct {
	bit     uint8
	set, no string
}{
	{factSendRegistered, "with its send buffer registered", "with its send buffer not registered"},
	{factRecvRegistered, "with its recv buffer registered", "with its recv buffer not registered"},
	{factInPlace, "in place on registered buffers", "out of place on registered buffers"},
}

func encodeFacts(f collectives.PathFacts) uint8 {
	var b uint8
	if f.SendRegistered {
		b |= factSendRegistered
	}
	if f.RecvRegistered {
		b |= factRecvRegistered
	}
	if f.InPlace {
		b |= factInPlace
	}
	return b
}

func encodeCallRecord(r callRecord) []byte {
	b := make([]byte, 0, callRecordSize)
	v := byte(0)
	if r.Valid {
		v = 1
	}
	b = append(b, v)
	b = binary.BigEndian.AppendUint32(b, uint32(r.Coll))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Count))
	b = binary.BigEndian.AppendUint32(b, uint32(r.Type))
	b = binary.BigEndian.AppendUint32(b, uint32(r.Op))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Root))
	return append(b, r.Facts)
}

func decodeCallRecord(b []byte) (callRecord, error) {
	if len(b) != callRecordSize || b[0] > 1 || b[callRecordSize-1]&^factsKnown != 0 {
		return callRecord{}, fmt.Errorf("%w: call record of %d bytes", errMalformed, len(b))
	}
	return callRecord{
		Valid: b[0] == 1,
		Coll:  collectives.Collective(int32(binary.BigEndian.Uint32(b[1:]))),
		Count: int64(binary.BigEndian.Uint64(b[5:])),
		Type:  collectives.DataType(int32(binary.BigEndian.Uint32(b[13:]))),
		Op:    collectives.Op(int32(binary.BigEndian.Uint32(b[17:]))),
		Root:  int64(binary.BigEndian.Uint64(b[21:])),
		Facts: b[callRecordSize-1],
	}, nil
}

// compareCalls returns an error naming the first rank whose call differs
// from rank 0's, or whose arguments were invalid; nil when all agree.
func compareCalls(recs []callRecord) error {
	for r, x := range recs {
		if !x.Valid {
			return fmt.Errorf("%w: rank %d called %s with invalid arguments", ErrMismatch, r, x.Coll)
		}
	}
	ref := recs[0]
	for r := 1; r < len(recs); r++ {
		x := recs[r]
		switch {
		case x.Coll != ref.Coll:
			return fmt.Errorf("%w: rank %d called %s, rank 0 called %s", ErrMismatch, r, x.Coll, ref.Coll)
		case x.Count != ref.Count:
			return fmt.Errorf("%w: rank %d called %s count=%d, rank 0 count=%d", ErrMismatch, r, x.Coll, x.Count, ref.Count)
		case x.Type != ref.Type:
			return fmt.Errorf("%w: rank %d called %s datatype=%s, rank 0 datatype=%s", ErrMismatch, r, x.Coll, x.Type, ref.Type)
		case x.Coll.Reduces() && x.Op != ref.Op:
			return fmt.Errorf("%w: rank %d called %s op=%s, rank 0 op=%s", ErrMismatch, r, x.Coll, x.Op, ref.Op)
		case x.Coll.Rooted() && x.Root != ref.Root:
			return fmt.Errorf("%w: rank %d called %s root=%d, rank 0 root=%d", ErrMismatch, r, x.Coll, x.Root, ref.Root)
		case x.Facts != ref.Facts:
			for _, f := range factNames {
				if x.Facts&f.bit != ref.Facts&f.bit {
					mine, theirs := f.no, f.set
					if x.Facts&f.bit != 0 {
						mine, theirs = f.set, f.no
					}
					return fmt.Errorf("%w: rank %d called %s %s, rank 0 %s: every rank must register its buffers "+
						"alike (Alloc or Register) and run in place alike, since the path a call takes depends on it",
						ErrMismatch, r, x.Coll, mine, theirs)
				}
			}
		}
	}
	return nil
}

// pointerChecker is a backend that can tell whether a call's buffers are
// memory it can use (the GPU backend asks the driver for the allocation
// holding each one); under GOCCL_CHECK a buffer it rejects makes this
// rank's call invalid, so every rank fails alike.
type pointerChecker interface {
	CheckPointers(a *collectives.Args) error
}

// checkCall runs the GOCCL_CHECK exchange; localErr is this rank's own
// validation result, returned unchanged when set.
func (c *Comm) checkCall(ctx context.Context, a *collectives.Args, localErr error) error {
	if pc, ok := c.backend.(pointerChecker); ok && localErr == nil {
		localErr = pc.CheckPointers(a)
	}
	rec := callRecord{Valid: localErr == nil, Coll: a.Coll, Count: int64(a.Count), Type: a.Type, Op: a.Op, Root: int64(a.Root)}
	if pr, ok := c.backend.(collectives.PathReporter); ok && localErr == nil {
		rec.Facts = encodeFacts(pr.PathFacts(a))
	}
	all, err := c.boot.AllGather(ctx, encodeCallRecord(rec))
	if err != nil {
		return fmt.Errorf("GOCCL_CHECK exchange: %w", err)
	}
	if localErr != nil {
		return localErr
	}
	recs := make([]callRecord, len(all))
	for r, b := range all {
		if recs[r], err = decodeCallRecord(b); err != nil {
			return fmt.Errorf("GOCCL_CHECK: rank %d: %w", r, err)
		}
	}
	return compareCalls(recs)
}

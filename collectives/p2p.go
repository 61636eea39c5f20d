package collectives

import (
	"fmt"
	"math"
)

// P2PKind says whether a point-to-point operation sends or receives.
type P2PKind uint8

const (
	SendOp P2PKind = iota // this rank sends Buf to Peer
	RecvOp                // this rank receives from Peer into Buf
)

// String gives "Send" or "Recv".
func (k P2PKind) String() string {
	if k == SendOp {
		return "Send"
	}
	return "Recv"
}

// P2P is one Send or Recv of Count elements of Type between this rank and
// Peer. NCCL's matching rule holds: the k-th Send from A to B pairs with
// the k-th Recv on B from A; the pair's counts and types must agree.
// Peer may be this rank (a local copy, paired as any other).
type P2P struct {
	Kind   P2PKind
	Peer   int
	Buf    uintptr // device (GPU backend) or host (host backend) address
	Count  int
	Type   DataType
	Stream uintptr
}

// Bytes is the operation's size.
func (p *P2P) Bytes() int { return p.Count * p.Type.Size() }

// Validate checks what can be checked locally, naming the argument at
// fault; rank and nranks are the caller's communicator's.
func (p *P2P) Validate(rank, nranks int) error {
	if p.Kind != SendOp && p.Kind != RecvOp {
		return fmt.Errorf("point-to-point kind %d: %w", p.Kind, ErrInvalidArgument)
	}
	if !p.Type.Valid() {
		return fmt.Errorf("%s: datatype %d: %w", p.Kind, p.Type, ErrUnknownDataType)
	}
	if p.Peer < 0 || p.Peer >= nranks {
		return fmt.Errorf("%s: peer %d not in [0,%d): %w", p.Kind, p.Peer, nranks, ErrInvalidPeer)
	}
	if p.Count < 0 {
		return fmt.Errorf("%s: count %d: %w", p.Kind, p.Count, ErrInvalidCount)
	}
	if p.Count > 0 && uint64(p.Count) > math.MaxInt64/uint64(p.Type.Size()) {
		return fmt.Errorf("%s: count %d of %s overflows: %w", p.Kind, p.Count, p.Type, ErrInvalidCount)
	}
	if p.Count == 0 {
		return nil
	}
	if p.Buf == 0 {
		return fmt.Errorf("%s to/from rank %d: buffer is nil: %w", p.Kind, p.Peer, ErrNilPointer)
	}
	if p.Buf%uintptr(p.Type.Size()) != 0 {
		return fmt.Errorf("%s: buffer %#x not aligned to %d bytes for %s: %w", p.Kind, p.Buf, p.Type.Size(), p.Type, ErrMisaligned)
	}
	return nil
}

// Group is one communicator's share of a group of calls issued together
// (ncclGroupStart/End): collectives in call order, and point-to-point
// operations in call order. Every rank issues its collectives of a group
// in the same order; its point-to-point operations pair with its peers'
// by NCCL's rule, whatever their order in the group, and never deadlock
// among themselves. Kind names the call a whole group stands for
// (AllToAll, Gather, ...) so that a backend can take a fast path; it is
// PlainGroup for an application's own group.
type Group struct {
	Colls []Args
	P2P   []P2P
	Kind  GroupKind
	// Seq is the communicator's number of the group's first collective
	// call, or of the group itself when it has none.
	Seq uint64
}

// Reset empties g, keeping its storage.
func (g *Group) Reset() {
	g.Colls, g.P2P, g.Kind, g.Seq = g.Colls[:0], g.P2P[:0], PlainGroup, 0
}

// Empty reports whether g holds no operation.
func (g *Group) Empty() bool { return len(g.Colls) == 0 && len(g.P2P) == 0 }

// GroupKind names the call a group of point-to-point operations stands for.
type GroupKind uint8

const (
	PlainGroup     GroupKind = iota // an application's own group
	AllToAllGroup                   // AllToAll: equal counts to and from every rank
	AllToAllvGroup                  // AllToAllv: per-peer counts and displacements
	GatherGroup                     // Gather: every rank's buffer to root
	ScatterGroup                    // Scatter: root's blocks to every rank
)

var groupKindNames = [...]string{"Group", "AllToAll", "AllToAllv", "Gather", "Scatter"}

// String gives the group's name ("Group", "AllToAll", ...).
func (k GroupKind) String() string {
	if int(k) < len(groupKindNames) {
		return groupKindNames[k]
	}
	return fmt.Sprintf("GroupKind(%d)", k)
}

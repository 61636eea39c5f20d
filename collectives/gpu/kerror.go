package gpu

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goccl/goccl/collectives"
)

// What the kernels find wrong between ranks they record where the host
// reads it without synchronizing (kernels/common.cuh, report_error), and
// they raise the abort flag so that every kernel of the rank after it
// returns at once: errOff bytes past the abort flag in host-pinned memory,
// a word (1 | code<<1 | peer<<8), this rank's value at +8 and the peer's
// at +16. The first error of a rank claims the record through a word of
// the signal area at errClaimOff.
const (
	errOff      = 32       // kErrOffset
	errClaimOff = 48 << 10 // kErrClaimOffset
	// Call numbers (Params.seq's low 32 bits) that block 0's barriers
	// publish, [2][maxRanks] u32 by epoch parity, and the LL kernel's
	// numbers and flags, [2][maxRanks] u32 each.
	seqOff   = 18 << 10 // kSeqOffset
	llSeqOff = 97 << 10 // kLLSeqOffset (ll.cu)

	errSendBytes = 0 // a Send's byte count differs from its Recv's
	errRecvBytes = 1 // a Recv's from its Send's
	errCall      = 2 // ranks met in calls of different numbers
	// A point-to-point wait on the peer outlasted Config.Timeout: this
	// rank's value is the op's number (its k-th Send to, or Recv from, the
	// peer on the communicator), the peer's the nanoseconds waited.
	errSendTimeout = 3
	errRecvTimeout = 4
)

// The signal area's users do not overlap: barrier epochs, call numbers,
// copy-engine flags; the error claim, LL epochs, LL call numbers.
var (
	_ [seqOff - (epochOff + 4*maxBlocks)]struct{}
	_ [ceFlagOff - (seqOff + 8*maxRanks)]struct{}
	_ [llEpochOff - (errClaimOff + 4)]struct{}
	_ [llSeqOff - (llEpochOff + 4*llMaxBlocks)]struct{}
	_ [signalSize - (llSeqOff + 16*maxRanks)]struct{}
)

// kernelError returns the error a kernel of this rank recorded, after
// aborting the communicator with it, or nil.
func (be *Backend) kernelError() error {
	be.abortMu.Lock()
	h := be.abortHost
	var w uint32
	var mine, theirs uint64
	if h != nil {
		w = atomic.LoadUint32((*uint32)(unsafe.Add(h, errOff)))
		mine = atomic.LoadUint64((*uint64)(unsafe.Add(h, errOff+8)))
		theirs = atomic.LoadUint64((*uint64)(unsafe.Add(h, errOff+16)))
	}
	be.abortMu.Unlock()
	if w == 0 {
		return nil
	}
	peer := int(w >> 8 & 0xff)
	var err error
	switch w >> 1 & 0x7f {
	case errSendBytes:
		err = &collectives.PeerError{Rank: peer, Cause: fmt.Errorf(
			"gpu backend: rank %d's Send to rank %d has %d bytes, rank %d's matching Recv from rank %d has %d: %w",
			be.rank, peer, mine, peer, be.rank, theirs, collectives.ErrInvalidCount)}
	case errRecvBytes:
		err = &collectives.PeerError{Rank: peer, Cause: fmt.Errorf(
			"gpu backend: rank %d's Recv from rank %d has %d bytes, rank %d's matching Send to rank %d has %d: %w",
			be.rank, peer, mine, peer, be.rank, theirs, collectives.ErrInvalidCount)}
	case errSendTimeout, errRecvTimeout:
		what, dir := "Send", "to"
		if w>>1&0x7f == errRecvTimeout {
			what, dir = "Recv", "from"
		}
		err = &collectives.PeerError{Rank: peer, Cause: fmt.Errorf(
			"gpu backend: rank %d's %s %s rank %d (its %s number %d %s it) waited %v for rank %d, past the timeout of %v: %w",
			be.rank, what, dir, peer, what, mine, dir, time.Duration(theirs).Round(time.Millisecond), peer, be.p2pTimeout,
			collectives.ErrTimeout)}
	case errCall:
		err = fmt.Errorf("gpu backend: rank %d's call %d met rank %d in its call %d (a rank skipped or added a call, or made one of count 0 that the other did not): %w",
			be.rank, mine, peer, theirs, collectives.ErrCallMismatch)
	default:
		err = fmt.Errorf("gpu backend: a kernel recorded error word %#x with rank %d (%d, %d)", w, peer, mine, theirs)
	}
	be.Abort(err)
	return be.abortErr()
}

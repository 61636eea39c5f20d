package gpu

import "github.com/goccl/goccl/internal/cuda"

// GPU timestamps for the copy-engine calls (ce.go, celand.go,
// cereduce.go). A copy engine has no clock to read, so the call's Stamp
// is written by a stamp launched on the user's stream: one before the
// call's first operation there (its start, once the stream reaches the
// call) and one after its last (its end: every copy-engine call ends on
// the user's stream, with its copies and the peers' flags joined into
// it). Only where the recorder keeps a table and the call has a number
// (stampTable.slot is 0 otherwise): with the recorder off nothing is
// launched and the path costs one comparison.
//
// ceStampLaunch enqueues the stamp (goccl_stamp, stamps.go); a failed
// stamp leaves the call without GPU timestamps and the call goes on (the
// record is for people, the copies are the job).

// Which of a call's times a stamp stores.
const (
	ceStampStart = stampStart // Stamp.start
	ceStampEnd   = stampEnd   // Stamp.end, then the call number
)

// ceStampLaunch enqueues on stream s a store of the device clock into the
// Stamp of call seq at device address slot: its start (ceStampStart), or
// its end and then the call number (ceStampEnd), as CallTimes reads a
// Stamp only once it holds its call's number. Tests replace it.
var ceStampLaunch = func(be *Backend, s cuda.Stream, seq, slot uint64, which int) error {
	return be.stampOnStream(s, slot, uint32(which))
}

// ceStamp stamps call seq's start or end on s where the recorder wants
// it; be.mu is held (stampTable.slot).
func (be *Backend) ceStamp(s cuda.Stream, seq uint64, which int) {
	slot := be.stamps.slot(seq)
	if slot == 0 {
		return
	}
	if err := ceStampLaunch(be, s, seq, slot, which); err != nil {
		be.log.Debug("goccl: gpu backend: copy-engine timestamp not enqueued", "rank", be.rank, "call", seq, "which", which, "err", err)
	}
}

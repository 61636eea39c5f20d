package gpu

import (
	"encoding/binary"

	"github.com/goccl/goccl/collectives"
)

// Workspace and launch constants shared with kernels/common.cuh.
const (
	maxRanks = 8 // kMaxRanks
	// maxBlocks (kMaxBlocks) bounds a launch's grid: the signal area has a
	// barrier slot per (block, rank) and an epoch per block. The staging has
	// slots for the communicator's grid (tuning.grid, Params.blockSlots).
	maxBlocks = 512
	// maxThreads (kThreads) bounds a block: the kernels' launch bound.
	maxThreads = 512
	epochOff   = maxBlocks * maxRanks * 4
	// signalSize: barrier slots and epochs, the copy-engine flags (ce.go)
	// and the LL kernel's epochs, padded.
	signalSize = 128 << 10
	llEpochOff = 96 << 10 // kLLEpochOffset: [llMaxBlocks] u32
)

// The signal area's users do not overlap (a negative array length fails
// the build): barrier slots and epochs, copy-engine flags, LL epochs.
var (
	_ [llEpochOff - (ceFlagOff + ceFlagBytes + ceCountBytes)]struct{}
	_ [signalSize - (llEpochOff + 4*llMaxBlocks)]struct{}
)

// Offsets of struct goccl::Params (kernels/common.cuh).
const (
	offSend        = 0
	offRecv        = 8
	offCount       = 16
	offAbort       = 24
	offSignals     = 32
	offPeerSignals = 40
	offPeerStaging = offPeerSignals + 8*maxRanks // 104
	offBlockSlots  = offPeerStaging + 8*maxRanks // 168
	offShareBytes  = 172
	offSeq         = 176
	offStamp       = 184 // reserved[0]: the call's Stamp (stamps.go)
	offScalar      = 192 // reserved[1]: PreMulSum's scalar, or its address
	offSlotBytes   = 232
	offRank        = 240
	offNRanks      = 244
	offRoot        = 248
	offFlags       = 252
	offElemSize    = 256
	offCEChunks    = 260
	offLLOffset    = 264
	offCEChunk     = 272
	offCESeq       = 280
	offCEDepth     = 284
	paramSize      = 288
)

// params is one packed goccl::Params. The communicator-constant part is
// written once at init; each launch rewrites only the per-call fields.
type params [paramSize]byte

func (p *params) u64(off int, v uint64) { binary.LittleEndian.PutUint64(p[off:], v) }
func (p *params) u32(off int, v uint32) { binary.LittleEndian.PutUint32(p[off:], v) }

// layout is where the staged kernels find their slots: slots per (half,
// source rank), bytes per slot, the multiple each block's share of a round
// is cut to, and where the LL lines start in each staging.
type layout struct {
	blockSlots, shareBytes uint32
	slotBytes, llOffset    uint64
}

// setStatic writes the fields that do not change between launches.
func (p *params) setStatic(rank, nranks int, abortFlag, signals uintptr, peerSignals, peerStaging []uintptr, l layout) {
	*p = params{}
	p.u64(offAbort, uint64(abortFlag))
	p.u64(offSignals, uint64(signals))
	for r := 0; r < nranks; r++ {
		p.u64(offPeerSignals+8*r, uint64(peerSignals[r]))
		p.u64(offPeerStaging+8*r, uint64(peerStaging[r]))
	}
	p.u32(offBlockSlots, l.blockSlots)
	p.u32(offShareBytes, l.shareBytes)
	p.u64(offSlotBytes, l.slotBytes)
	p.u64(offLLOffset, l.llOffset)
	p.u32(offRank, uint32(rank))
	p.u32(offNRanks, uint32(nranks))
}

// setCall writes one call's fields; seq is its number (Args.Seq), which
// the kernels compare between ranks (0: not compared).
func (p *params) setCall(send, recv uintptr, count uint64, root int, elemSize int, seq uint64) {
	p.u64(offSeq, seq)
	p.u64(offStamp, 0) // Run sets it for the kernels that time a call
	p.u64(offSend, uint64(send))
	p.u64(offRecv, uint64(recv))
	p.u64(offCount, count)
	p.u32(offRoot, uint32(root))
	p.u32(offFlags, 0)
	p.u32(offElemSize, uint32(elemSize))
}

// Launch flags (Params.flags).
const (
	flagCEDirect     = 2      // kFlagCEDirect: the peer's chunks land in recv itself
	flagScalarDevice = 1 << 8 // kFlagScalarDevice: offScalar holds the scalar's device address
)

// setScalar writes a PreMulSum's scalar: its raw bits, or the address the
// kernel reads it from when it runs. Call after setCall.
func (p *params) setScalar(s collectives.Scalar) {
	if s.Ptr != 0 {
		p.u64(offScalar, uint64(s.Ptr))
		p.u32(offFlags, binary.LittleEndian.Uint32(p[offFlags:])|flagScalarDevice)
		return
	}
	p.u64(offScalar, s.Bits)
}

// setCE writes the copy-engine reduction's fields (cereduce.cu): chunks
// per launch, elements per chunk, chunk 0's flag value, staging depth, and
// the direct mode's flag. Call after setCall.
func (p *params) setCE(chunks uint32, chunk uint64, seq, depth uint32, direct bool) {
	if direct {
		p.u32(offFlags, flagCEDirect)
	}
	p.u32(offCEChunks, chunks)
	p.u64(offCEChunk, chunk)
	p.u32(offCESeq, seq)
	p.u32(offCEDepth, depth)
}

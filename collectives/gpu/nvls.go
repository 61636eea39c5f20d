package gpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport/nvls"
)

// NVLS selection and dispatch: AllReduce and ReduceScatter through the
// multimem kernels of kernels/nvls.cu on a multicast team built by
// transport/nvls.
//
// Safety (DESIGN §8): nothing here calls a cuMulticast* function itself,
// and nvls.Setup, which does, runs only when nvls.Agree found the gate open
// (GOCCL_NVLS_ENABLE=1 and no opt-out) on every rank, at least
// nvls.MinRanks ranks, and multicast, VMM and POSIX-fd handles on every
// device. Below nvls.MinRanks nothing is even probed.
//
// The team buffer, on every rank:
//
//	[0, FlagBytes)                 barrier flags (multimem.red through the multicast address)
//	[FlagBytes, 2*FlagBytes)       this rank's barrier epochs (never written through multicast)
//	[nvlsDataOff, Size)            data area
//
// Flags and epochs are zeroed on every rank before the init barrier, so
// before any peer's first arrival. Every launch of a call uses the same grid
// on every rank (computed from the call's sizes alone), so each block's
// epoch advances alike everywhere; the epochs live on the device, so the
// path also works under CUDA-graph capture.
//
// A call (each chunk of at most the data area):
//
//	AllReduce:     copy send -> own data area; kernel (barrier, ld_reduce of
//	               this rank's share, multimem.st to all, barrier); copy the
//	               data area -> recv
//	ReduceScatter: copy each rank's block of send -> own data area at
//	               r*stride; kernel (barrier, ld_reduce of block `rank`
//	               straight into recv, barrier)
//
// The kernel's leading barrier says every rank's input is in place and every
// rank has copied out its previous result; the trailing one says every
// rank's stores have landed and nobody still reads. So a rank may overwrite
// its own data area as soon as its stream passed the previous kernel.
const (
	// nvlsRegionBytes is the team buffer each rank binds (Setup rounds it
	// up to the granularities); larger calls go through it in chunks.
	nvlsRegionBytes = 32 << 20
	nvlsEpochsOff   = nvls.FlagBytes
	nvlsDataOff     = 4 << 10
	// nvlsMinBytes is the call size (Count elements) from which NVLS is
	// chosen unless forced: below it the one-shot kernel's single launch
	// and no copies win.
	nvlsMinBytes = 256 << 10
)

// Flags and epochs fit in the header (a negative array length fails the
// build).
var _ [nvlsDataOff - 2*nvls.FlagBytes]struct{}

// nvlsKind is a kernel family of nvls.cu that the backend launches.
type nvlsKind int

const (
	nvlsAllReduce nvlsKind = iota
	nvlsReduceScatter
	numNVLSKinds
)

var nvlsStems = [numNVLSKinds]string{"allreduce", "reducescatter"}

// nvlsReduces reports whether multimem reduces t with op (the kernels
// nvls.cu exports): sum for f32, f16, bf16 and the 32/64-bit integers; min
// and max for the integers.
func nvlsReduces(t collectives.DataType, op collectives.Op) bool {
	switch t {
	case collectives.Float32, collectives.Float16, collectives.BFloat16:
		return op == collectives.Sum
	case collectives.Int32, collectives.Uint32, collectives.Int64, collectives.Uint64:
		return op == collectives.Sum || op == collectives.Min || op == collectives.Max
	}
	return false
}

func nvlsKernelName(k nvlsKind, t collectives.DataType, op collectives.Op) string {
	return "goccl_nvls_" + nvlsStems[k] + "_" + typeNames[t] + "_" + opNames[op]
}

// nvlsState is the backend's NVLS path; ok and everything below it are
// fixed at New (read without a lock afterwards), kp and buf are guarded by
// Backend.mu.
type nvlsState struct {
	ok     bool
	reason string
	region *nvls.Region

	fns       [numNVLSKinds][numTypes][numOps]cuda.Function // 0: no kernel
	mcData    uint64                                        // multicast address of the data area
	ucData    uint64                                        // this rank's unicast address of it
	dataBytes uint64                                        // data area, a multiple of 16

	kp  nvls.KernelParams
	buf *[nvlsParamBytes]byte // its own allocation, handed to C: kp, then the StampTail
	// The running call's Stamp and number (runNVLS), which its first
	// launch claims and its last ends.
	stampSlot, stampSeq uint64

	warned atomic.Bool // forced NVLS met a call it cannot take
}

// NVLS reports whether this communicator runs AllReduce and ReduceScatter
// through NVLS where they suit it, and why (or why not).
func (be *Backend) NVLS() (on bool, reason string) { return be.nv.ok, be.nv.reason }

// setupNVLS decides, with every rank, whether to use NVLS, and builds the
// team when it does (collective; New calls it on every rank at the same
// point). Only a broken bootstrap makes it fail: an NVLS that cannot be
// set up on some rank turns it off on all of them, and New goes on.
func (be *Backend) setupNVLS(ctx context.Context) error {
	nv := &be.nv
	defer func() {
		be.log.Info("goccl: gpu backend: nvls decision", "rank", be.rank, "nvls", nv.ok, "reason", nv.reason)
		if be.forced == collectives.NVLS && !nv.ok {
			be.log.Warn("goccl: gpu backend: GOCCL_ALGO=nvls but NVLS is off; using the other kernels", "rank", be.rank, "reason", nv.reason)
		}
	}()
	if be.nranks < nvls.MinRanks {
		nv.reason = fmt.Sprintf("%d ranks, NVLS needs at least %d", be.nranks, nvls.MinRanks)
		return nil
	}
	// Every rank probes and agrees, whatever its own gate says, so that
	// the bootstrap sees the same sequence of calls on every rank.
	facts, err := nvls.Probe(be.drv, be.dev, nil)
	if err != nil {
		be.log.Warn("goccl: gpu backend: nvls probe failed; counting this device as without multicast", "rank", be.rank, "err", err)
		facts.Multicast = false
	}
	ok, why, err := nvls.Agree(ctx, be.boot, facts)
	if err != nil {
		return fmt.Errorf("gpu backend: %w", err)
	}
	if !ok {
		nv.reason = why
		return nil
	}

	region, err := nvls.Setup(ctx, be.boot, nvls.Config{Driver: be.drv, Ctx: be.ctx, Device: be.dev, Size: nvlsRegionBytes})
	if err != nil {
		rank, step := be.rank, nvls.Step("unknown")
		var se *nvls.StepError
		if errors.As(err, &se) {
			rank, step = se.Rank, se.Step
		}
		be.log.Warn("goccl: gpu backend: nvls setup failed; every rank continues without NVLS",
			"rank", be.rank, "failed_rank", rank, "step", string(step), "err", err)
		nv.reason = fmt.Sprintf("setup failed on rank %d at %s", rank, step)
		return nil
	}

	// The team exists on every rank. Each now readies its part; again all
	// ranks keep it or all close it.
	step, lerr := be.prepareNVLS(region)
	fail, err := be.agreeStatus(ctx, step, lerr)
	if err != nil {
		nv.fns = [numNVLSKinds][numTypes][numOps]cuda.Function{}
		cerr := region.Close(ctx)
		return errors.Join(fmt.Errorf("gpu backend: nvls: %w", err), cerr)
	}
	if fail != nil {
		nv.fns = [numNVLSKinds][numTypes][numOps]cuda.Function{}
		be.log.Warn("goccl: gpu backend: nvls team not usable; every rank continues without NVLS",
			"rank", be.rank, "failed_rank", fail.rank, "step", fail.step, "err", fail.text)
		if cerr := region.Close(ctx); cerr != nil {
			be.log.Warn("goccl: gpu backend: nvls teardown after a failed start", "rank", be.rank, "err", cerr)
		}
		nv.reason = fmt.Sprintf("setup failed on rank %d at %s", fail.rank, fail.step)
		return nil
	}
	nv.region, nv.ok = region, true
	nv.reason = fmt.Sprintf("multicast team of %d ranks, %d-byte buffer", be.nranks, region.Size)
	return nil
}

// prepareNVLS resolves the NVLS kernels, lays out the team buffer and
// zeroes this rank's barrier flags and epochs. It returns the failing
// step's name with the error.
func (be *Backend) prepareNVLS(g *nvls.Region) (string, error) {
	nv := &be.nv
	if g.Size < nvlsDataOff+16*uint64(be.nranks) {
		return "layout", fmt.Errorf("team buffer of %d bytes is too small", g.Size)
	}
	for k := nvlsKind(0); k < numNVLSKinds; k++ {
		for t := range numTypes {
			for op := range numOps {
				dt, o := collectives.DataType(t), collectives.Op(op)
				if !nvlsReduces(dt, o) {
					continue
				}
				name := nvlsKernelName(k, dt, o)
				fn, err := be.drv.ModuleGetFunction(be.ctx, be.module, name)
				if err != nil {
					return "kernel lookup", fmt.Errorf("kernel %s: %w", name, err)
				}
				nv.fns[k][t][op] = fn
			}
		}
	}
	mc, uc := uint64(g.Multicast), uint64(g.Unicast)
	nv.mcData, nv.ucData = mc+nvlsDataOff, uc+nvlsDataOff
	nv.dataBytes = (g.Size - nvlsDataOff) &^ 15
	nv.buf = new([nvlsParamBytes]byte)
	nv.kp = nvls.KernelParams{
		MCFlags: mc, UCFlags: uc, Epochs: uc + nvlsEpochsOff, AbortFlag: uint64(be.abortDev),
		Rank: int32(be.rank), NRanks: int32(be.nranks),
	}
	if err := be.drv.MemsetD32Async(be.ctx, g.Unicast, 0, nvlsDataOff/4, 0); err != nil {
		return "clear barrier flags", err
	}
	if err := be.drv.CtxSynchronize(be.ctx); err != nil {
		return "clear barrier flags", err
	}
	return "", nil
}

// peerFailure is the first rank's failure reported by agreeStatus.
type peerFailure struct {
	rank       int
	step, text string
}

// agreeStatus allgathers each rank's outcome of a local step so that every
// rank takes the same branch: nil when all succeeded, else the first
// failing rank's report. err is a bootstrap failure.
func (be *Backend) agreeStatus(ctx context.Context, step string, lerr error) (*peerFailure, error) {
	msg := []byte{0}
	if lerr != nil {
		msg = append(append(append([]byte{1}, step...), 0), lerr.Error()...)
	}
	all, err := be.boot.AllGather(ctx, msg)
	if err != nil {
		return nil, err
	}
	for r, m := range all {
		if len(m) == 0 {
			return &peerFailure{rank: r, step: "bootstrap exchange", text: "empty status"}, nil
		}
		if m[0] == 0 {
			continue
		}
		f := &peerFailure{rank: r, step: string(m[1:])}
		for i, c := range m[1:] {
			if c == 0 {
				f.step, f.text = string(m[1:1+i]), string(m[2+i:])
				break
			}
		}
		return f, nil
	}
	return nil, nil
}

// pickNVLS returns the NVLS kernel for a call, or 0 when the call takes
// the other paths: NVLS off, a collective, type or op multimem does not
// reduce, a size below nvlsMinBytes (unless forced), or another algorithm
// forced. Every input is the same on every rank. be.mu is held.
func (be *Backend) pickNVLS(a *collectives.Args, bytes int64) cuda.Function {
	if !be.nv.ok {
		return 0
	}
	var k nvlsKind
	switch a.Coll {
	case collectives.AllReduce:
		k = nvlsAllReduce
	case collectives.ReduceScatter:
		k = nvlsReduceScatter
	default:
		return 0
	}
	forced := be.forced == collectives.NVLS
	if !forced && (be.forced != "" || bytes < nvlsMinBytes) {
		return 0
	}
	fn := be.nv.fns[k][a.Type][a.Op]
	if fn == 0 && forced && !be.nv.warned.Swap(true) {
		be.log.Warn("goccl: gpu backend: GOCCL_ALGO=nvls: multimem cannot reduce this type and op; using the other kernels",
			"rank", be.rank, "collective", a.Coll.String(), "type", a.Type.String(), "op", a.Op.String())
	}
	return fn
}

// runNVLS enqueues one NVLS call (be.mu held). A failure part way leaves
// this rank's epochs behind its peers' (and peers waiting for it), so it
// aborts the communicator.
func (be *Backend) runNVLS(a *collectives.Args, fn cuda.Function, bytes uint64) error {
	be.nv.stampSlot, be.nv.stampSeq = be.stamps.slot(a.Seq), a.Seq
	var err error
	if a.Coll == collectives.AllReduce {
		err = be.nvlsAllReduce(a, fn, bytes)
	} else {
		err = be.nvlsReduceScatter(a, fn, bytes)
	}
	if err != nil {
		be.Abort(fmt.Errorf("gpu backend: nvls %s not enqueued: %w", a.Coll, err))
		return be.abortErr()
	}
	return nil
}

func (be *Backend) nvlsAllReduce(a *collectives.Args, fn cuda.Function, bytes uint64) error {
	nv, s := &be.nv, cuda.Stream(a.Stream)
	n := uint64(be.nranks)
	for off := uint64(0); off < bytes; off += nv.dataBytes {
		c := min(nv.dataBytes, bytes-off)
		if err := be.drv.MemcpyAsync(be.ctx, cuda.DevicePtr(nv.ucData), cuda.DevicePtr(a.Send+uintptr(off)), c, s); err != nil {
			return fmt.Errorf("copy in: %w", err)
		}
		nv.kp.MC, nv.kp.Src, nv.kp.Dst, nv.kp.Bytes, nv.kp.Stride = nv.mcData, 0, 0, c, 0
		if err := be.nvlsLaunch(fn, (c+n-1)/n, s, off == 0, off+c == bytes); err != nil {
			return err
		}
		if err := be.drv.MemcpyAsync(be.ctx, cuda.DevicePtr(a.Recv+uintptr(off)), cuda.DevicePtr(nv.ucData), c, s); err != nil {
			return fmt.Errorf("copy out: %w", err)
		}
	}
	return nil
}

// nvlsReduceScatter: bytes is each rank's output; rank r's block of send
// starts at r*bytes.
func (be *Backend) nvlsReduceScatter(a *collectives.Args, fn cuda.Function, bytes uint64) error {
	nv, s := &be.nv, cuda.Stream(a.Stream)
	n := uint64(be.nranks)
	chunk := (nv.dataBytes / n) &^ 15
	for off := uint64(0); off < bytes; off += chunk {
		c := min(chunk, bytes-off)
		stride := (c + 15) &^ 15
		if c == bytes && stride == bytes {
			// The blocks lie in send as in the data area: one copy.
			if err := be.drv.MemcpyAsync(be.ctx, cuda.DevicePtr(nv.ucData), cuda.DevicePtr(a.Send), n*bytes, s); err != nil {
				return fmt.Errorf("copy in: %w", err)
			}
		} else {
			for r := range n {
				src := a.Send + uintptr(r*bytes+off)
				if err := be.drv.MemcpyAsync(be.ctx, cuda.DevicePtr(nv.ucData+r*stride), cuda.DevicePtr(src), c, s); err != nil {
					return fmt.Errorf("copy in block %d: %w", r, err)
				}
			}
		}
		nv.kp.MC, nv.kp.Src, nv.kp.Dst, nv.kp.Bytes, nv.kp.Stride = nv.mcData, 0, uint64(a.Recv)+off, c, stride
		if err := be.nvlsLaunch(fn, c, s, off == 0, off+c == bytes); err != nil {
			return err
		}
	}
	return nil
}

// The NVLS kernels' launch shape: a block per nvlsBlockBytes of what each
// rank reduces, at most nvlsMaxGrid (never measured: NVLS cannot run on the
// machines goccl is tuned on, DESIGN §8).
const (
	nvlsBlockBytes = 32 << 10
	nvlsMaxGrid    = 64
)

// The reducing NVLS kernels' second parameter, kernels/nvls.cu's
// StampTail, at nvls.KernelParamsSize: the call's timestamps.
const (
	nvlsTailSlot    = nvls.KernelParamsSize
	nvlsTailSeq     = nvlsTailSlot + 8
	nvlsTailCounter = nvlsTailSlot + 16
	nvlsTailFlags   = nvlsTailSlot + 24
	nvlsParamBytes  = nvlsTailSlot + 32

	nvlsStampClaim = 1
	nvlsStampStart = 2
	nvlsStampEnd   = 4
)

// nvlsLaunch launches fn with nv.kp on s; first and last say whether it
// is the call's first and last launch, which time the call.
func (be *Backend) nvlsLaunch(fn cuda.Function, perRank uint64, s cuda.Stream, first, last bool) error {
	nv := &be.nv
	grid := clampGrid(int64(perRank), nvlsBlockBytes, min(nvlsMaxGrid, be.tune.grid, nvls.KernelMaxBlocks))
	nv.kp.Put(nv.buf[:])
	flags := uint32(0)
	if first {
		flags |= nvlsStampClaim | nvlsStampStart
	}
	if last {
		flags |= nvlsStampEnd
	}
	binary.LittleEndian.PutUint64(nv.buf[nvlsTailSlot:], nv.stampSlot)
	binary.LittleEndian.PutUint64(nv.buf[nvlsTailSeq:], nv.stampSeq)
	binary.LittleEndian.PutUint64(nv.buf[nvlsTailCounter:], binary.LittleEndian.Uint64(be.prm[offSignals:])+stampCountOff)
	binary.LittleEndian.PutUint32(nv.buf[nvlsTailFlags:], flags)
	cfg := cuda.LaunchConfig{
		Grid:   cuda.Dim3{X: uint32(grid), Y: 1, Z: 1},
		Block:  cuda.Dim3{X: nvls.KernelThreads, Y: 1, Z: 1},
		Stream: s,
	}
	if err := be.drv.LaunchKernel(be.ctx, fn, cfg, nv.buf[:]); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	return nil
}

// closeNVLS tears the team down (collective; release calls it on every
// rank after this rank's work is done, before the workspace goes).
func (be *Backend) closeNVLS(ctx context.Context) error {
	nv := &be.nv
	if nv.region == nil {
		return nil
	}
	g := nv.region
	nv.region, nv.ok = nil, false
	if err := g.Close(ctx); err != nil {
		return fmt.Errorf("gpu backend: close nvls team: %w", err)
	}
	return nil
}

package collectives

import (
	"fmt"
	"slices"
)

// Algorithm names an algorithm family; GOCCL_ALGO takes these names.
type Algorithm string

const (
	// OneShot: every rank reads every peer's whole input and reduces.
	OneShot Algorithm = "oneshot"
	// TwoShot: reduce-scatter then all-gather, chunked through staging.
	TwoShot Algorithm = "twoshot"
	// CopyEngine: cuMemcpyAsync on peer addresses moves the data (Broadcast,
	// AllGather into registered receive buffers: no kernel; AllReduce into
	// registered buffers and ReduceScatter: a kernel reduces what lands).
	CopyEngine Algorithm = "ce"
	// LL: the low-latency AllReduce for small messages: data and flag
	// travel together in each 16-byte line, so there is no barrier.
	LL Algorithm = "ll"
	// NVLS: NVSwitch multicast (multimem) kernels for AllReduce and
	// ReduceScatter, where the GPU backend set up an NVLS team (gated:
	// transport/nvls); anywhere else it chooses as if nothing were forced.
	NVLS Algorithm = "nvls"
)

// Algorithms lists every name GOCCL_ALGO takes.
func Algorithms() []Algorithm { return []Algorithm{OneShot, TwoShot, LL, CopyEngine, NVLS} }

// ParseAlgorithm accepts the names of Algorithms; "" means choose by size.
func ParseAlgorithm(s string) (Algorithm, error) {
	if a := Algorithm(s); a == "" || slices.Contains(Algorithms(), a) {
		return a, nil
	}
	return "", fmt.Errorf("%w: GOCCL_ALGO=%q (want oneshot, twoshot, ll, ce or nvls)", ErrInvalidArgument, s)
}

// Thresholds are the sizes, in bytes of each rank's Count (Args.Count
// times the element size), at which the choice changes. DefaultThresholds
// holds the values measured on the GPU machine (docs/perf.md); the GPU
// backend's GOCCL_TUNE overrides them for tuning runs. Every rank must use
// the same Thresholds, so that every rank makes the same choice.
type Thresholds struct {
	// TwoShot: AllReduce at more than two ranks from here uses two-shot
	// (one-shot sends (n-1) times the message from every rank, two-shot
	// 2(n-1)/n of it, at the price of a second barrier).
	TwoShot int64
	// TwoShotPair: the same at two ranks, where both move the same bytes
	// but two-shot reduces while it pushes the result, which pays from
	// about 16 MiB.
	TwoShotPair int64
	// LL: AllReduce up to here (inclusive) uses the low-latency kernel;
	// backends cap it at what their kernel holds.
	LL [NumCollectives]int64
	// CopyEngine: from here the copy engines carry the call where they can
	// (Choose's ce): Broadcast and AllGather copy straight into the peers'
	// registered buffers; AllReduce and ReduceScatter copy each rank's
	// pieces into their owners' registered receive buffers (2 ranks, both
	// buffers registered, out of place; elsewhere into staging, but only
	// where forced or given a threshold explicitly), a kernel reduces them
	// as they land, and AllReduce copies the reduced pieces into the
	// peers' registered buffers. Below it the stream memory operations
	// that order the copies cost more than a kernel's whole run.
	CopyEngine [NumCollectives]int64
}

// never is a threshold no size reaches (the path is taken only when forced).
const never = int64(1) << 62

// DefaultThresholds: see Thresholds.
var DefaultThresholds = Thresholds{
	TwoShot:     256 << 10,
	TwoShotPair: 16 << 20,
	LL:          [NumCollectives]int64{AllReduce: 512 << 10},
	// The copy engines from where they pass the kernels on 2x H200
	// (docs/perf.md), in bytes of each rank's Count, which for a
	// ReduceScatter is its output, half of nccl-tests' size at 2 ranks:
	// the reductions in direct mode (the only one the thresholds take by
	// default; AllReduce level at 128 MiB and ahead from 256;
	// ReduceScatter behind at an output of 128 MiB, 342
	// against 352 GB/s, ahead from 256 MiB, 364 against 357), Broadcast
	// through its landing area (360 against 356 GB/s at 32
	// MiB, 377 against 362 at 64; behind at 16), AllGather from an input
	// of 64 MiB, nccl-tests' 128 MiB at 2 ranks (at an input
	// of 32 MiB the kernels gave 325-330 against 314-321).
	CopyEngine: [NumCollectives]int64{Broadcast: 32 << 20, AllGather: 64 << 20, AllReduce: 128 << 20, Reduce: never, ReduceScatter: 256 << 20},
}

// Choose picks the algorithm for one call from the collective, the bytes of
// each rank's Count, the rank count, and whether the copy-engine path may
// serve the call (ce, alike on every rank; a caller that then finds the
// path cannot take it, e.g. an unregistered receive buffer, asks again with
// ce false); forced (GOCCL_ALGO, "" for none) wins where the collective has
// that algorithm, and otherwise the choice is by size. It is pure, so every
// rank makes the same choice.
//   - Copy engines where ce allows, from CopyEngine[c] (or at any size when
//     forced to); the reductions need two ranks or more.
//   - AllReduce: low-latency up to LL (and, at more than two ranks, below
//     TwoShot); two-shot from TwoShot at more than two ranks and from
//     TwoShotPair at two; one-shot otherwise (and always at one rank).
//   - Everything else: one-shot (push through staging).
//
// NVLS is not chosen here: the GPU backend takes it before asking, where
// its team exists; a forced NVLS that did not apply chooses by size.
func (th *Thresholds) Choose(c Collective, bytes int64, nranks int, forced Algorithm, ce bool) Algorithm {
	if !c.Valid() {
		return OneShot
	}
	switch {
	case ce && c != Reduce && (nranks > 1 || !c.Reduces()) &&
		(forced == CopyEngine || (forced == "" && bytes >= th.CopyEngine[c])):
		return CopyEngine
	case forced == OneShot, forced == TwoShot && c == AllReduce, forced == LL && c == AllReduce:
		return forced
	case c == AllReduce && bytes <= th.LL[c] && (nranks <= 2 || bytes < th.TwoShot):
		return LL
	case c == AllReduce && nranks > 2 && bytes >= th.TwoShot,
		c == AllReduce && nranks == 2 && bytes >= th.TwoShotPair:
		return TwoShot
	}
	return OneShot
}

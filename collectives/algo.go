package collectives

import "fmt"

// Algorithm names an algorithm family; GOCCL_ALGO takes these names.
type Algorithm string

const (
	// OneShot: every rank reads every peer's whole input and reduces.
	OneShot Algorithm = "oneshot"
	// TwoShot: reduce-scatter then all-gather, chunked through staging.
	TwoShot Algorithm = "twoshot"
	// CopyEngine: cuMemcpyAsync on peer addresses (Broadcast, AllGather
	// into registered receive buffers), no kernel.
	CopyEngine Algorithm = "ce"
	// NVLS: NVSwitch multicast (multimem) kernels for AllReduce and
	// ReduceScatter, where the GPU backend set up an NVLS team (gated:
	// transport/nvls); anywhere else it chooses as if nothing were forced.
	NVLS Algorithm = "nvls"
)

// ParseAlgorithm accepts the names above; "" means choose by size.
func ParseAlgorithm(s string) (Algorithm, error) {
	switch a := Algorithm(s); a {
	case "", OneShot, TwoShot, CopyEngine, NVLS:
		return a, nil
	}
	return "", fmt.Errorf("%w: GOCCL_ALGO=%q (want oneshot, twoshot, ce or nvls)", ErrInvalidArgument, s)
}

// twoShotMinBytes is the AllReduce size from which two-shot beats one-shot
// at more than two ranks: one-shot sends (n-1) times the message from every
// rank, two-shot 2(n-1)/n of it at the price of a second barrier.
const twoShotMinBytes = 256 << 10

// ChooseAlgorithm picks the algorithm for one call from the collective, the
// bytes of each rank's input, and the rank count; forced (GOCCL_ALGO, ""
// for none) wins where the collective has that algorithm. It is pure, so
// every rank makes the same choice.
//   - AllReduce: one-shot at 1-2 ranks (it moves the fewest bytes there) and
//     below 256 KiB; two-shot above that.
//   - Every other collective: one-shot (push through staging), the only
//     kernel family it has.
//
// NVLS is not chosen here: the GPU backend takes it before asking, where
// its team exists; a forced NVLS that did not apply chooses by size.
func ChooseAlgorithm(c Collective, bytes int64, nranks int, forced Algorithm) Algorithm {
	if forced == OneShot || (forced == TwoShot && c == AllReduce) {
		return forced
	}
	if c == AllReduce && nranks > 2 && bytes >= twoShotMinBytes {
		return TwoShot
	}
	return OneShot
}

// CopyEngineMinBytes is the size (each rank's input) from which Broadcast
// and AllGather into registered buffers use the copy engines: below it the
// stream memory operations that order a copy-engine call cost more than a
// kernel's whole run.
const CopyEngineMinBytes = 1 << 20

// Choose extends ChooseAlgorithm with the copy-engine path: Broadcast and
// AllGather whose receive buffer is registered (on every rank, same offset:
// see collectives/gpu) use CopyEngine from CopyEngineMinBytes, or at any
// size when forced to; any other forced algorithm keeps kernels.
// registered must be computed the same way on every rank, so that every
// rank takes the same path.
func Choose(c Collective, bytes int64, nranks int, forced Algorithm, registered bool) Algorithm {
	if registered && (c == Broadcast || c == AllGather) &&
		(forced == CopyEngine || (forced == "" && bytes >= CopyEngineMinBytes)) {
		return CopyEngine
	}
	return ChooseAlgorithm(c, bytes, nranks, forced)
}

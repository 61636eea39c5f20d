package collectives

import "fmt"

// Algorithm names an algorithm family; GOCCL_ALGO takes these names.
type Algorithm string

const (
	// OneShot: every rank reads every peer's whole input and reduces.
	OneShot Algorithm = "oneshot"
	// TwoShot: reduce-scatter then all-gather, chunked through staging.
	TwoShot Algorithm = "twoshot"
	// CopyEngine: cuMemcpyAsync on peer addresses (Broadcast, AllGather).
	CopyEngine Algorithm = "ce"
)

// ParseAlgorithm accepts the names above; "" means choose by size.
func ParseAlgorithm(s string) (Algorithm, error) {
	switch a := Algorithm(s); a {
	case "", OneShot, TwoShot, CopyEngine:
		return a, nil
	}
	return "", fmt.Errorf("%w: GOCCL_ALGO=%q (want oneshot, twoshot or ce)", ErrInvalidArgument, s)
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
func ChooseAlgorithm(c Collective, bytes int64, nranks int, forced Algorithm) Algorithm {
	if forced == OneShot || (forced == TwoShot && c == AllReduce) {
		return forced
	}
	if c == AllReduce && nranks > 2 && bytes >= twoShotMinBytes {
		return TwoShot
	}
	return OneShot
}

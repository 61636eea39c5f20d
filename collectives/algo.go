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

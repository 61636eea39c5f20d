package uva

import (
	"context"

	"github.com/goccl/goccl/transport"
)

// ErrPeerFailed is transport's (see transport.Agree).
var ErrPeerFailed = transport.ErrPeerFailed

// StepError is transport's (see transport.Agree).
type StepError = transport.StepError

func stepErr(rank int, step string, peer int, err error) *StepError {
	return &StepError{Transport: "uva", Rank: rank, Step: step, Peer: peer, Err: err}
}

func agree(ctx context.Context, b transport.Bootstrap, local *StepError, payload []byte) ([][]byte, error) {
	return transport.Agree(ctx, b, "uva", local, payload)
}

package ipc

import (
	"errors"
	"fmt"
)

// ErrPeerFailed is wrapped by the error of every rank whose own steps
// succeeded when a peer's did not; all ranks then undo the operation
// together.
var ErrPeerFailed = errors.New("ipc: a peer rank failed")

// StepError says which step failed, on which rank, and for which peer. On
// the rank where it failed, Err is the driver's (or bootstrap's) error; on
// the other ranks Err wraps ErrPeerFailed and carries the failing rank's
// message.
type StepError struct {
	Rank int    // the rank where the step failed
	Step string // e.g. "cuMemAlloc"
	Peer int    // the peer the step concerned, or -1
	Err  error
}

func (e *StepError) Error() string {
	if e.Peer >= 0 {
		return fmt.Sprintf("ipc: rank %d: %s (peer %d): %v", e.Rank, e.Step, e.Peer, e.Err)
	}
	return fmt.Sprintf("ipc: rank %d: %s: %v", e.Rank, e.Step, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

func stepErr(rank int, step string, peer int, err error) *StepError {
	return &StepError{Rank: rank, Step: step, Peer: peer, Err: err}
}

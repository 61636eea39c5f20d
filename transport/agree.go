package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrPeerFailed is wrapped by the error of every rank whose own steps
// succeeded when a peer's did not; all ranks then undo the operation
// together.
var ErrPeerFailed = errors.New("transport: a peer rank failed")

// StepError says which step of a transport failed, on which rank, and for
// which peer. On the rank where it failed, Err is the driver's (or
// bootstrap's) error; on the other ranks Err wraps ErrPeerFailed and
// carries the failing rank's message.
type StepError struct {
	Transport string // "uva", "ipc", "vmm"
	Rank      int    // the rank where the step failed
	Step      string // e.g. "cuMemAlloc"
	Peer      int    // the peer the step concerned, or -1
	Err       error
}

// Error names the transport, rank, step and (when there is one) peer.
func (e *StepError) Error() string {
	if e.Peer >= 0 {
		return fmt.Sprintf("%s: rank %d: %s (peer %d): %v", e.Transport, e.Rank, e.Step, e.Peer, e.Err)
	}
	return fmt.Sprintf("%s: rank %d: %s: %v", e.Transport, e.Rank, e.Step, e.Err)
}

// Unwrap gives Err.
func (e *StepError) Unwrap() error { return e.Err }

// Agree is the collective status check after each step that may fail on
// some ranks only: every rank contributes its outcome (and on success a
// payload) and every rank reaches the same verdict, so that all undo
// together and none waits for a peer that gave up.
//
// Wire form: byte 0 is 0 (ok), followed by the payload; or 1 (failed),
// followed by the peer as a little-endian int32, the step, a NUL byte and
// the error text.
//
// It returns every rank's payload on success. Otherwise it returns the
// local error when this rank failed, else a StepError for the first failing
// rank wrapping ErrPeerFailed.
func Agree(ctx context.Context, b Bootstrap, name string, local *StepError, payload []byte) ([][]byte, error) {
	var msg []byte
	if local == nil {
		msg = append([]byte{0}, payload...)
	} else {
		msg = binary.LittleEndian.AppendUint32([]byte{1}, uint32(int32(local.Peer)))
		msg = append(msg, local.Step...)
		msg = append(msg, 0)
		msg = append(msg, local.Err.Error()...)
	}
	all, err := b.AllGather(ctx, msg)
	if local != nil {
		return nil, local
	}
	fail := func(peer int, err error) error {
		return &StepError{Transport: name, Rank: b.Rank(), Step: "bootstrap allgather", Peer: peer, Err: err}
	}
	if err != nil {
		return nil, fail(-1, err)
	}
	if len(all) != b.Size() {
		return nil, fail(-1, fmt.Errorf("%d contributions for %d ranks", len(all), b.Size()))
	}
	out := make([][]byte, len(all))
	for r, m := range all {
		switch {
		case len(m) == 0:
			return nil, fail(r, fmt.Errorf("empty status from rank %d", r))
		case m[0] == 0:
			out[r] = m[1:]
		default:
			return nil, remoteStepError(name, r, m[1:])
		}
	}
	return out, nil
}

// remoteStepError rebuilds rank r's failure from its status message.
func remoteStepError(name string, r int, m []byte) *StepError {
	peer := -1
	if len(m) >= 4 {
		peer = int(int32(binary.LittleEndian.Uint32(m)))
		m = m[4:]
	}
	step, text := string(m), ""
	for i, c := range m {
		if c == 0 {
			step, text = string(m[:i]), string(m[i+1:])
			break
		}
	}
	return &StepError{Transport: name, Rank: r, Step: step, Peer: peer, Err: fmt.Errorf("%w: %s", ErrPeerFailed, text)}
}

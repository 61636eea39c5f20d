package ipc

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/goccl/goccl/transport"
)

// agree is the collective status check after each step that may fail on
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
func agree(ctx context.Context, b transport.Bootstrap, local *StepError, payload []byte) ([][]byte, error) {
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
	if err != nil {
		return nil, stepErr(b.Rank(), "bootstrap allgather", -1, err)
	}
	if len(all) != b.Size() {
		return nil, stepErr(b.Rank(), "bootstrap allgather", -1,
			fmt.Errorf("%d contributions for %d ranks", len(all), b.Size()))
	}
	out := make([][]byte, len(all))
	for r, m := range all {
		switch {
		case len(m) == 0:
			return nil, stepErr(b.Rank(), "bootstrap allgather", r, fmt.Errorf("empty status from rank %d", r))
		case m[0] == 0:
			out[r] = m[1:]
		default:
			return nil, remoteError(r, m[1:])
		}
	}
	return out, nil
}

// remoteError rebuilds rank r's failure from its status message.
func remoteError(r int, m []byte) *StepError {
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
	return stepErr(r, step, peer, fmt.Errorf("%w: %s", ErrPeerFailed, text))
}

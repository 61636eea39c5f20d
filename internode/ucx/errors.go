package ucx

import (
	"errors"
	"fmt"
	"time"
)

// The package's errors and the wait policy: plain Go, the same in builds
// with and without cgo.

// ErrUnavailable is wrapped by the error of Load when no usable libucp
// was found.
var ErrUnavailable = errors.New("ucx: libucp not available")

// ErrPeer is wrapped by the error of an operation whose peer's endpoint
// failed (the peer died, or the link to it went down).
var ErrPeer = errors.New("ucx: peer unreachable")

// ErrSizeMismatch is wrapped when a message's size is not its receive's.
var ErrSizeMismatch = errors.New("ucx: message size differs from its receive's")

// ErrTimeout is wrapped when a wait outlasts WaitPolicy.Timeout.
var ErrTimeout = errors.New("ucx: timed out")

// ErrPeerClosed is wrapped when a wait's peer closed before sending.
var ErrPeerClosed = errors.New("ucx: peer closed")

// PeerError names the rank an operation failed with.
type PeerError struct {
	Rank  int
	Cause error
}

// Error gives the rank and the cause.
func (e *PeerError) Error() string { return fmt.Sprintf("ucx: rank %d: %v", e.Rank, e.Cause) }

// Unwrap gives the cause.
func (e *PeerError) Unwrap() error { return e.Cause }

// WaitPolicy says when a wait gives up besides completion or a failed
// endpoint.
type WaitPolicy struct {
	// Check is called every few polls; its error ends the wait (an
	// abort, a cancelled context).
	Check func() error
	// Timeout bounds the whole wait; zero: none.
	Timeout time.Duration
	// Closed reports whether a peer has closed its communicator; a wait
	// on it then ends after Grace, to let data already sent arrive.
	Closed func(rank int) bool
	Grace  time.Duration
}

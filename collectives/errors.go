package collectives

import (
	"errors"
	"strconv"
)

// Sentinel errors; every error goccl returns for bad arguments wraps one of
// these (test with errors.Is) together with ErrInvalidArgument.
var (
	ErrInvalidArgument   = errors.New("goccl: invalid argument")
	ErrUnknownDataType   = wrapInvalid("unknown datatype")
	ErrUnknownOp         = wrapInvalid("unknown reduction op")
	ErrUnknownCollective = wrapInvalid("unknown collective")
	ErrInvalidCount      = wrapInvalid("invalid count")
	ErrInvalidRoot       = wrapInvalid("invalid root")
	ErrNilPointer        = wrapInvalid("nil buffer")
	ErrMisaligned        = wrapInvalid("misaligned buffer")
	ErrInvalidPeer       = wrapInvalid("invalid peer")

	// ErrAborted is returned by every call on a communicator after Abort,
	// wrapped with the reason (see PeerError).
	ErrAborted = errors.New("goccl: communicator aborted")
	// ErrClosed is returned by calls on a closed communicator.
	ErrClosed = errors.New("goccl: communicator closed")
	// ErrTimeout is returned when a peer does not arrive in time.
	ErrTimeout = errors.New("goccl: timed out waiting for peer")
	// ErrNotSupported is returned for a call the backend cannot make.
	ErrNotSupported = errors.New("goccl: not supported by this backend")
	// ErrCallMismatch is wrapped by the error of ranks that met in calls of
	// different numbers or kinds (a rank skipped or added a call).
	ErrCallMismatch = errors.New("goccl: ranks are in different calls")
	// ErrPeerClosed is wrapped by the error of a rank that waits for a
	// peer that has closed its communicator: the peer made fewer calls.
	ErrPeerClosed = errors.New("goccl: peer closed its communicator")
)

type invalidArg struct{ msg string }

func (e *invalidArg) Error() string { return "goccl: " + e.msg }
func (e *invalidArg) Unwrap() error { return ErrInvalidArgument }
func wrapInvalid(msg string) error  { return &invalidArg{msg} }

// PeerError says which rank failed and why; it wraps the cause and
// ErrAborted when the failure aborted the communicator.
type PeerError struct {
	Rank  int
	Cause error
}

func (e *PeerError) Error() string {
	return "goccl: rank " + strconv.Itoa(e.Rank) + " failed: " + e.Cause.Error()
}
func (e *PeerError) Unwrap() error { return e.Cause }

package collectives

import (
	"errors"
	"strconv"
)

// Sentinel errors; every error goccl returns for bad arguments wraps one of
// these (test with errors.Is) together with ErrInvalidArgument. They say
// only what they are ("invalid peer"): the error a communicator's call
// returns starts with "goccl: rank N: " once, which the comm package adds,
// so that no text in the chain repeats it.
var (
	ErrInvalidArgument   = errors.New("invalid argument")      // wrapped by every bad-argument error
	ErrUnknownDataType   = wrapInvalid("unknown datatype")     // a DataType outside the enum
	ErrUnknownOp         = wrapInvalid("unknown reduction op") // an Op outside the enum
	ErrUnknownCollective = wrapInvalid("unknown collective")   // a Collective outside the enum
	ErrInvalidCount      = wrapInvalid("invalid count")        // a negative count, or one whose bytes overflow
	ErrInvalidRoot       = wrapInvalid("invalid root")         // a root outside [0, nranks)
	ErrNilPointer        = wrapInvalid("nil buffer")           // a zero address for a buffer the call reads or writes
	ErrMisaligned        = wrapInvalid("misaligned buffer")    // a buffer not aligned to its element size
	ErrInvalidPeer       = wrapInvalid("invalid peer")         // a peer outside [0, nranks)

	// ErrAborted is returned by every call on a communicator after Abort,
	// wrapped with the reason (see PeerError).
	ErrAborted = errors.New("communicator aborted")
	// ErrClosed is returned by calls on a closed communicator.
	ErrClosed = errors.New("communicator closed")
	// ErrTimeout is returned when a peer does not arrive in time.
	ErrTimeout = errors.New("timed out waiting for peer")
	// ErrNotSupported is returned for a call the backend cannot make.
	ErrNotSupported = errors.New("not supported by this backend")
	// ErrCallMismatch is wrapped by the error of ranks that met in calls of
	// different numbers or kinds (a rank skipped or added a call).
	ErrCallMismatch = errors.New("ranks are in different calls")
	// ErrPeerClosed is wrapped by the error of a rank that waits for a
	// peer that has closed its communicator: the peer made fewer calls.
	ErrPeerClosed = errors.New("peer closed its communicator")
)

type invalidArg struct{ msg string }

func (e *invalidArg) Error() string { return e.msg }
func (e *invalidArg) Unwrap() error { return ErrInvalidArgument }
func wrapInvalid(msg string) error  { return &invalidArg{msg} }

// PeerError says which rank failed and why; it wraps the cause and
// ErrAborted when the failure aborted the communicator.
type PeerError struct {
	Rank  int
	Cause error
}

// Error gives the failed rank and the cause.
func (e *PeerError) Error() string {
	return "rank " + strconv.Itoa(e.Rank) + " failed: " + e.Cause.Error()
}

// Unwrap gives the cause.
func (e *PeerError) Unwrap() error { return e.Cause }

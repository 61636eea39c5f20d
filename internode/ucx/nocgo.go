//go:build !cgo

package ucx

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/transport"
)

// Without cgo libucp cannot be called: Load fails as it does where UCX is
// missing, and New fails on every rank, so a job across nodes stops with
// that error while a job on one node (which never loads UCX) runs.

// errNoCgo is what Load returns in a build without cgo.
var errNoCgo = fmt.Errorf("%w: built with CGO_ENABLED=0: UCX needs cgo", ErrUnavailable)

// Load reports that this build cannot load libucp: the error wraps
// ErrUnavailable.
func Load() error { return errNoCgo }

// Version is "": no library is ever loaded in this build.
func Version() string { return "" }

// Worker is never made in this build; its methods fail or do nothing.
type Worker struct{ rank, n int }

// Op is a posted send or receive; none is ever posted in this build.
type Op struct{ Peer int }

// New fails: this build has no UCX. It still takes part in the address
// exchange with its error, as a rank without libucp does, so that ranks
// built with cgo fail naming this one instead of waiting for it.
func New(ctx context.Context, b transport.Bootstrap, loadErr error) (*Worker, error) {
	err := loadErr
	if err == nil {
		err = errNoCgo
	}
	if _, gerr := b.AllGather(ctx, append([]byte{1}, err.Error()...)); gerr != nil {
		return nil, fmt.Errorf("%w (exchanging worker addresses: %w)", err, gerr)
	}
	return nil, err
}

// Failed reports nothing: there are no endpoints.
func (wk *Worker) Failed(int) error { return nil }

// Rank is this rank's number in the bootstrap.
func (wk *Worker) Rank() int { return wk.rank }

// Size is the bootstrap's number of ranks.
func (wk *Worker) Size() int { return wk.n }

// Send fails: this build has no UCX.
func (wk *Worker) Send(peer int, _ uint64, _ uintptr, _ int) (Op, error) {
	return Op{}, &PeerError{Rank: peer, Cause: errNoCgo}
}

// Recv fails: this build has no UCX.
func (wk *Worker) Recv(peer int, _ uint64, _ uintptr, _ int) (Op, error) {
	return Op{}, &PeerError{Rank: peer, Cause: errNoCgo}
}

// Progress moves nothing.
func (wk *Worker) Progress() bool { return false }

// Wait has nothing to wait for (no op is ever posted).
func (wk *Worker) Wait([]Op, WaitPolicy) error { return nil }

// Close does nothing.
func (wk *Worker) Close() {}

// Cancel does nothing.
func (wk *Worker) Cancel([]Op) {}

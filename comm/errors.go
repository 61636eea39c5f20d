package comm

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// ErrMismatch is wrapped by errors that say ranks of one job disagree
// (nranks, protocol version, duplicate rank numbers, and with GOCCL_CHECK
// the arguments of a collective). It wraps collectives.ErrInvalidArgument.
var ErrMismatch = fmt.Errorf("%w: ranks disagree", collectives.ErrInvalidArgument)

// ErrNotSupported is returned by Register and Alloc when the backend cannot
// register memory (the host backend).
var ErrNotSupported = collectives.ErrNotSupported

// ErrSpansNodes is returned by init when the ranks are on more than one
// machine and the backend (a custom one) reaches only the ranks of one
// node; the host and GPU backends span nodes.
var ErrSpansNodes = errors.New("ranks on more than one node")

// ErrNoDriver is wrapped by init's error when the GPU backend was asked
// for and no CUDA driver loads: none is installed, or the program was
// built with CGO_ENABLED=0, which has no way to call it.
var ErrNoDriver = cuda.ErrNoDriver

// Errors of the collectives package re-exported so that users import only
// comm.
var (
	ErrInvalidArgument = collectives.ErrInvalidArgument // see collectives.ErrInvalidArgument
	ErrAborted         = collectives.ErrAborted         // see collectives.ErrAborted
	ErrClosed          = collectives.ErrClosed          // see collectives.ErrClosed
	ErrTimeout         = collectives.ErrTimeout         // see collectives.ErrTimeout
	ErrInvalidPeer     = collectives.ErrInvalidPeer     // see collectives.ErrInvalidPeer
	ErrCallMismatch    = collectives.ErrCallMismatch    // see collectives.ErrCallMismatch
	ErrPeerClosed      = collectives.ErrPeerClosed      // see collectives.ErrPeerClosed
)

// PeerError says which rank failed and why.
type PeerError = collectives.PeerError

// apiPrefix begins every error a communicator's call returns, once: the
// sentinels and the errors of the layers below say only what they are.
const apiPrefix = "goccl: "

// apiErr gives err the "goccl: rank N: " that every error a
// communicator's call returns starts with (see rankErr).
func (c *Comm) apiErr(err error) error { return rankErr(c.rank, err) }

// rankErr gives err "goccl: rank N: ". An error that starts with "goccl: "
// already (built at the API's edge, or returned by another call on the
// way) keeps what it has; the caller's own context error is returned as it
// is, as Go's blocking calls do.
func rankErr(rank int, err error) error {
	if keepsText(err) {
		return err
	}
	return fmt.Errorf("goccl: rank %d: %w", rank, err)
}

// libErr gives "goccl: " to an error of a function that has no rank (the
// unique id, the environment, InitAll's arguments).
func libErr(err error) error {
	if keepsText(err) {
		return err
	}
	return fmt.Errorf("goccl: %w", err)
}

func keepsText(err error) bool {
	return err == nil || err == context.Canceled || err == context.DeadlineExceeded || strings.HasPrefix(err.Error(), apiPrefix)
}

// apiReg gives the errors of a registration's Close the API's prefix too.
func (c *Comm) apiReg(r Registration) Registration {
	if r == nil {
		return nil
	}
	return apiRegistration{r, c}
}

type apiRegistration struct {
	Registration
	c *Comm
}

func (r apiRegistration) Close(ctx context.Context) error {
	return r.c.apiErr(r.Registration.Close(ctx))
}

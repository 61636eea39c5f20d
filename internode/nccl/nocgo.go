//go:build !cgo

package nccl

import "fmt"

// Without cgo libnccl.so.2 cannot be called: Load fails as it does where
// NCCL is missing, and the GPU backend across nodes stops with that error.

// errNoCgo is what Load returns in a build without cgo.
var errNoCgo = fmt.Errorf("%w: built with CGO_ENABLED=0: NCCL needs cgo", ErrUnavailable)

// Load reports that this build cannot load NCCL: the error wraps
// ErrUnavailable.
func Load() (*Library, error) { return nil, errNoCgo }

// GetUniqueID fails: this build has no NCCL.
func (l *Library) GetUniqueID() (UniqueID, error) { return UniqueID{}, errNoCgo }

// InitRank fails: this build has no NCCL.
func (l *Library) InitRank(uintptr, int, int, UniqueID, string) (*Comm, error) {
	return nil, errNoCgo
}

// GroupStart fails: this build has no NCCL.
func (l *Library) GroupStart() error { return errNoCgo }

// GroupEnd fails: this build has no NCCL.
func (l *Library) GroupEnd(uintptr) error { return errNoCgo }

// Comm is never made in this build; its calls fail.
type Comm struct{ nranks, rank int }

// Size is the communicator's number of ranks.
func (c *Comm) Size() int { return c.nranks }

// Rank is this rank's number in the communicator.
func (c *Comm) Rank() int { return c.rank }

// AllReduce fails: this build has no NCCL.
func (c *Comm) AllReduce(_, _ uintptr, _ int, _ DataType, _ Op, _ uintptr) error { return errNoCgo }

// ReduceScatter fails: this build has no NCCL.
func (c *Comm) ReduceScatter(_, _ uintptr, _ int, _ DataType, _ Op, _ uintptr) error {
	return errNoCgo
}

// AllGather fails: this build has no NCCL.
func (c *Comm) AllGather(_, _ uintptr, _ int, _ DataType, _ uintptr) error { return errNoCgo }

// Broadcast fails: this build has no NCCL.
func (c *Comm) Broadcast(_, _ uintptr, _ int, _ DataType, _ int, _ uintptr) error { return errNoCgo }

// Reduce fails: this build has no NCCL.
func (c *Comm) Reduce(_, _ uintptr, _ int, _ DataType, _ Op, _ int, _ uintptr) error {
	return errNoCgo
}

// Send fails: this build has no NCCL.
func (c *Comm) Send(uintptr, int, DataType, int, uintptr) error { return errNoCgo }

// Recv fails: this build has no NCCL.
func (c *Comm) Recv(uintptr, int, DataType, int, uintptr) error { return errNoCgo }

// CreatePreMulSum fails: this build has no NCCL.
func (c *Comm) CreatePreMulSum(uint64, uintptr, DataType) (Op, error) { return 0, errNoCgo }

// DestroyOp fails: this build has no NCCL.
func (c *Comm) DestroyOp(Op) error { return errNoCgo }

// AsyncError is nil: there is no communicator.
func (c *Comm) AsyncError() error { return nil }

// Abort does nothing: there is no communicator.
func (c *Comm) Abort() error { return nil }

// Destroy does nothing: there is no communicator.
func (c *Comm) Destroy() error { return nil }

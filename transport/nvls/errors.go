package nvls

import (
	"errors"
	"fmt"
)

// Step names one step of the NVLS lifecycle; errors carry it so that a
// failure says exactly where it happened.
type Step string

// The steps of Setup, in order, then those of teardown.
const (
	StepConfig         Step = "config"
	StepGate           Step = "gate"
	StepMCGranularity  Step = "MulticastGetGranularity"
	StepVMMGranularity Step = "MemGetAllocationGranularity"
	StepAgreeSize      Step = "agree on size"
	StepCreate         Step = "MulticastCreate"
	StepExport         Step = "MemExportToFD"
	StepSendFD         Step = "SendFDs"
	StepRecvFD         Step = "RecvFDs"
	StepImport         Step = "MemImportFromFD"
	StepAddDevice      Step = "MulticastAddDevice"
	StepMemCreate      Step = "MemCreate"
	StepBind           Step = "MulticastBindMem"
	StepReserveMC      Step = "MemAddressReserve(multicast)"
	StepMapMC          Step = "MemMap(multicast)"
	StepAccessMC       Step = "MemSetAccess(multicast)"
	StepReserveUC      Step = "MemAddressReserve(unicast)"
	StepMapUC          Step = "MemMap(unicast)"
	StepAccessUC       Step = "MemSetAccess(unicast)"
	StepExchange       Step = "bootstrap exchange"
	StepCloseBarrier   Step = "close barrier"
	StepUnmapUC        Step = "MemUnmap(unicast)"
	StepFreeUC         Step = "MemAddressFree(unicast)"
	StepUnmapMC        Step = "MemUnmap(multicast)"
	StepFreeMC         Step = "MemAddressFree(multicast)"
	StepUnbind         Step = "MulticastUnbind"
	StepReleaseMem     Step = "MemRelease(memory)"
	StepReleaseMC      Step = "MemRelease(multicast)"
	StepCloseFD        Step = "close fd"
)

var (
	// ErrGateClosed is returned (wrapped) when the NVLS gate is closed on
	// some rank: nothing multicast was called on any rank.
	ErrGateClosed = errors.New("nvls: gate closed")
	// ErrPeerFailed is wrapped by the error of every rank whose own steps
	// succeeded but a peer's did not; all ranks then tear down together.
	ErrPeerFailed = errors.New("nvls: a peer rank failed")
	// ErrConfig is wrapped by errors about bad Config values or ranks that
	// disagree on them.
	ErrConfig = errors.New("nvls: bad configuration")
)

// StepError says which step failed on which rank. On the rank where it
// failed, Err is the driver's (or bootstrap's) error; on the other ranks Err
// wraps ErrPeerFailed and holds the failing rank's message.
type StepError struct {
	Rank int
	Step Step
	Err  error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("nvls: rank %d: %s: %v", e.Rank, e.Step, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

func stepErr(rank int, step Step, err error) *StepError {
	return &StepError{Rank: rank, Step: step, Err: err}
}

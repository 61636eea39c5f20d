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
	StepConfig         Step = "config"                       // checking Config
	StepGate           Step = "gate"                         // the NVLS gate; closed, nothing multicast is called
	StepMCGranularity  Step = "MulticastGetGranularity"      // the multicast object's granularity
	StepVMMGranularity Step = "MemGetAllocationGranularity"  // the physical memory's granularity
	StepAgreeSize      Step = "agree on size"                // the ranks agree on one size and alignment
	StepCreate         Step = "MulticastCreate"              // rank 0 creates the multicast object
	StepExport         Step = "MemExportToFD"                // rank 0 exports it as an fd
	StepSendFD         Step = "SendFDs"                      // rank 0 sends the fd to every other rank
	StepRecvFD         Step = "RecvFDs"                      // another rank receives rank 0's fd
	StepImport         Step = "MemImportFromFD"              // another rank imports the multicast object
	StepAddDevice      Step = "MulticastAddDevice"           // each rank adds its device
	StepMemCreate      Step = "MemCreate"                    // each rank allocates its physical memory
	StepBind           Step = "MulticastBindMem"             // each rank binds it to the multicast object
	StepReserveMC      Step = "MemAddressReserve(multicast)" // the multicast mapping's address range
	StepMapMC          Step = "MemMap(multicast)"            // mapping the multicast object
	StepAccessMC       Step = "MemSetAccess(multicast)"      // access to the multicast mapping
	StepReserveUC      Step = "MemAddressReserve(unicast)"   // the unicast mapping's address range
	StepMapUC          Step = "MemMap(unicast)"              // mapping the rank's own memory
	StepAccessUC       Step = "MemSetAccess(unicast)"        // access to the unicast mapping
	StepExchange       Step = "bootstrap exchange"           // the allgather of every rank's outcome
	StepCloseBarrier   Step = "close barrier"                // Close's barrier: no rank unbinds while a peer may reach it

	// Teardown, in this order.
	StepUnmapUC    Step = "MemUnmap(unicast)"         // unmapping the unicast view
	StepFreeUC     Step = "MemAddressFree(unicast)"   // freeing the unicast view's address range
	StepUnmapMC    Step = "MemUnmap(multicast)"       // unmapping the multicast view
	StepFreeMC     Step = "MemAddressFree(multicast)" // freeing the multicast view's address range
	StepUnbind     Step = "MulticastUnbind"           // unbinding this rank's memory from the multicast object
	StepReleaseMem Step = "MemRelease(memory)"        // releasing this rank's physical memory
	StepReleaseMC  Step = "MemRelease(multicast)"     // releasing the multicast object
	StepCloseFD    Step = "close fd"                  // closing the multicast object's fd
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

// Error names the rank and the step.
func (e *StepError) Error() string {
	return fmt.Sprintf("nvls: rank %d: %s: %v", e.Rank, e.Step, e.Err)
}

// Unwrap gives Err.
func (e *StepError) Unwrap() error { return e.Err }

func stepErr(rank int, step Step, err error) *StepError {
	return &StepError{Rank: rank, Step: step, Err: err}
}

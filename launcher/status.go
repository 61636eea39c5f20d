package launcher

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// Sentinel errors returned by Run (test with errors.Is).
var (
	// ErrConfig: the configuration is invalid; nothing was started.
	ErrConfig = errors.New("invalid launcher configuration")
	// ErrStart: a rank could not be started; those already started were killed.
	ErrStart = errors.New("cannot start rank")
	// ErrRankFailed: a rank exited non-zero or was killed by a signal.
	ErrRankFailed = errors.New("rank failed")
	// ErrTimeout: the job ran past Config.Timeout and was stopped.
	ErrTimeout = errors.New("job timed out")
	// ErrCanceled: the context ended and the job was stopped.
	ErrCanceled = errors.New("job canceled")
)

// Exit codes the launcher uses for failures that are not a rank's own.
const (
	ExitTimeout  = 124 // as timeout(1)
	ExitConfig   = 2   // usage or configuration error
	ExitInternal = 1   // a rank could not be started
)

// RankStatus is how one rank ended.
type RankStatus struct {
	Rank int
	Pid  int
	// Exited is false for a rank that never started or was never reaped.
	Exited bool
	// ExitCode is the process's exit status, -1 when a signal killed it.
	ExitCode int
	// Signal is the signal that killed it, 0 if it exited normally.
	Signal syscall.Signal
	// Stopped is true when the launcher sent it SIGTERM/SIGKILL to tear
	// the job down (not forwarded signals).
	Stopped bool
	// Frozen is true when the rank was stopped by a signal (SIGSTOP,
	// SIGTSTP) or a tracer, not running, when the job failed: its peers
	// gave up on it, and the launcher's SIGTERM could not act on it.
	Frozen bool
	// Duration is the time from start to exit.
	Duration time.Duration
}

// Failed reports whether the rank ended with a non-zero status.
func (s RankStatus) Failed() bool { return s.Exited && (s.Signal != 0 || s.ExitCode != 0) }

// Code is the shell's view of the status: the exit code, or 128+signal.
func (s RankStatus) Code() int {
	if s.Signal != 0 {
		return 128 + int(s.Signal)
	}
	return s.ExitCode
}

// Describe says how the rank ended: "exited with status 3" or "was killed
// by signal 9 (killed)".
func (s RankStatus) Describe() string {
	switch {
	case s.Frozen && s.Exited:
		return fmt.Sprintf("was stopped (not running) when the job failed: its peers gave up on it; killed by signal %d (%v) after the grace", int(s.Signal), s.Signal)
	case s.Frozen:
		return "was stopped (not running) when the job failed: its peers gave up on it"
	case !s.Exited:
		return "did not exit"
	case s.Signal != 0:
		return fmt.Sprintf("was killed by signal %d (%v)", int(s.Signal), s.Signal)
	default:
		return fmt.Sprintf("exited with status %d", s.ExitCode)
	}
}

// RankError names the first rank that failed and how.
type RankError struct {
	Status RankStatus
}

// Error names the rank and how it failed.
func (e *RankError) Error() string {
	return fmt.Sprintf("rank %d %s", e.Status.Rank, e.Status.Describe())
}

// Unwrap makes errors.Is(err, ErrRankFailed) true.
func (e *RankError) Unwrap() error { return ErrRankFailed }

// Result is what Run reports about the job.
type Result struct {
	// ExitCode is what a launcher process should exit with: 0 on success,
	// the first failing rank's Code(), ExitTimeout on timeout.
	ExitCode int
	// FirstFailed is the rank whose failure ended the job, -1 if none.
	FirstFailed int
	// TimedOut is true when Config.Timeout stopped the job.
	TimedOut bool
	// Ranks holds every rank's status, indexed by rank.
	Ranks []RankStatus
	// Port is the rendezvous port given to the ranks; Token the job token.
	Port  int
	Token string
	// Summary names, from the ranks' flight records, what the ranks of a
	// failed or stopped job were doing: one line per communicator.
	Summary []string
}

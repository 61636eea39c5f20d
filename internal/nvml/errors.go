package nvml

import (
	"errors"
	"fmt"
)

// Return is nvmlReturn_t.
type Return int32

// NVML result codes goccl tells apart.
const (
	Success               Return = 0
	ReturnUninitialized   Return = 1
	ReturnInvalidArg      Return = 2
	ReturnNotSupported    Return = 3
	ReturnNoPermission    Return = 4
	ReturnNotFound        Return = 6
	ReturnDriverNotLoaded Return = 9
	ReturnLibNotFound     Return = 12
	ReturnFuncNotFound    Return = 13
	ReturnGPULost         Return = 15
	ReturnUnknown         Return = 999
)

// Sentinels for errors.Is. An *Error matches the sentinel of its code;
// ReturnFuncNotFound (the library lacks the entry point) also matches
// ErrNotSupported, since to a caller both mean "this driver cannot say".
var (
	// ErrNoLibrary: libnvidia-ml.so.1 could not be loaded.
	ErrNoLibrary       = errors.New("nvml: libnvidia-ml.so.1 not available")
	ErrNotSupported    = errors.New("nvml: not supported")
	ErrUninitialized   = errors.New("nvml: not initialized")
	ErrInvalidArgument = errors.New("nvml: invalid argument")
	ErrNoPermission    = errors.New("nvml: no permission")
	ErrNotFound        = errors.New("nvml: not found")
	ErrDriverNotLoaded = errors.New("nvml: NVIDIA driver not loaded")
	ErrGPULost         = errors.New("nvml: GPU is lost")
)

// Error is a failed NVML call: the entry point, the code and NVML's own
// text for it (nvmlErrorString).
type Error struct {
	Func string
	Code Return
	Text string
}

func (e *Error) Error() string {
	return fmt.Sprintf("nvml: %s: %s (%d)", e.Func, e.Text, int32(e.Code))
}

// Is matches the sentinel of e's code.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotSupported:
		return e.Code == ReturnNotSupported || e.Code == ReturnFuncNotFound
	case ErrUninitialized:
		return e.Code == ReturnUninitialized
	case ErrInvalidArgument:
		return e.Code == ReturnInvalidArg
	case ErrNoPermission:
		return e.Code == ReturnNoPermission
	case ErrNotFound:
		return e.Code == ReturnNotFound
	case ErrDriverNotLoaded:
		return e.Code == ReturnDriverNotLoaded
	case ErrNoLibrary:
		return e.Code == ReturnLibNotFound
	case ErrGPULost:
		return e.Code == ReturnGPULost
	}
	return false
}

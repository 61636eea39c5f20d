package nvml

import (
	"errors"
	"fmt"
)

// Return is nvmlReturn_t.
type Return int32

// NVML result codes goccl tells apart.
const (
	Success               Return = 0   // NVML_SUCCESS
	ReturnUninitialized   Return = 1   // NVML_ERROR_UNINITIALIZED
	ReturnInvalidArg      Return = 2   // NVML_ERROR_INVALID_ARGUMENT
	ReturnNotSupported    Return = 3   // NVML_ERROR_NOT_SUPPORTED
	ReturnNoPermission    Return = 4   // NVML_ERROR_NO_PERMISSION
	ReturnNotFound        Return = 6   // NVML_ERROR_NOT_FOUND
	ReturnDriverNotLoaded Return = 9   // NVML_ERROR_DRIVER_NOT_LOADED
	ReturnLibNotFound     Return = 12  // NVML_ERROR_LIBRARY_NOT_FOUND
	ReturnFuncNotFound    Return = 13  // NVML_ERROR_FUNCTION_NOT_FOUND
	ReturnGPULost         Return = 15  // NVML_ERROR_GPU_IS_LOST
	ReturnUnknown         Return = 999 // NVML_ERROR_UNKNOWN
)

// Sentinels for errors.Is. An *Error matches the sentinel of its code;
// ReturnFuncNotFound (the library lacks the entry point) also matches
// ErrNotSupported, since to a caller both mean "this driver cannot say".
var (
	// ErrNoLibrary: libnvidia-ml.so.1 could not be loaded.
	ErrNoLibrary       = errors.New("nvml: libnvidia-ml.so.1 not available")
	ErrNotSupported    = errors.New("nvml: not supported")            // code ReturnNotSupported or ReturnFuncNotFound
	ErrUninitialized   = errors.New("nvml: not initialized")          // code ReturnUninitialized
	ErrInvalidArgument = errors.New("nvml: invalid argument")         // code ReturnInvalidArg
	ErrNoPermission    = errors.New("nvml: no permission")            // code ReturnNoPermission
	ErrNotFound        = errors.New("nvml: not found")                // code ReturnNotFound
	ErrDriverNotLoaded = errors.New("nvml: NVIDIA driver not loaded") // code ReturnDriverNotLoaded
	ErrGPULost         = errors.New("nvml: GPU is lost")              // code ReturnGPULost
)

// Error is a failed NVML call: the entry point, the code and NVML's own
// text for it (nvmlErrorString).
type Error struct {
	Func string
	Code Return
	Text string
}

// Error gives "nvml: Func: text (code)".
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

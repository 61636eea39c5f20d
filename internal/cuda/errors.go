package cuda

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrNoDriver is wrapped by Load's error when libcuda.so.1 cannot be
// loaded: the machine has no NVIDIA driver (or no GPU stack at all).
var ErrNoDriver = errors.New("no CUDA driver found")

// ErrNotSupported is wrapped by errors from operations this driver or
// device cannot do: an optional entry point the driver lacks, or a CUDA
// call that answered CUDA_ERROR_NOT_SUPPORTED.
var ErrNotSupported = errors.New("cuda: not supported")

// Result is a CUresult. It is itself an error, so that
// errors.Is(err, cuda.ErrorOutOfMemory) works on any error this package
// returns.
type Result int32

// The CUresult codes goccl meets; values are the driver's (cuda.h).
const (
	Success                        Result = 0   // CUDA_SUCCESS
	ErrorInvalidValue              Result = 1   // CUDA_ERROR_INVALID_VALUE
	ErrorOutOfMemory               Result = 2   // CUDA_ERROR_OUT_OF_MEMORY
	ErrorNotInitialized            Result = 3   // CUDA_ERROR_NOT_INITIALIZED
	ErrorDeinitialized             Result = 4   // CUDA_ERROR_DEINITIALIZED
	ErrorStubLibrary               Result = 34  // CUDA_ERROR_STUB_LIBRARY
	ErrorDeviceUnavailable         Result = 46  // CUDA_ERROR_DEVICE_UNAVAILABLE
	ErrorNoDevice                  Result = 100 // CUDA_ERROR_NO_DEVICE
	ErrorInvalidDevice             Result = 101 // CUDA_ERROR_INVALID_DEVICE
	ErrorInvalidImage              Result = 200 // CUDA_ERROR_INVALID_IMAGE
	ErrorInvalidContext            Result = 201 // CUDA_ERROR_INVALID_CONTEXT
	ErrorMapFailed                 Result = 205 // CUDA_ERROR_MAP_FAILED
	ErrorUnmapFailed               Result = 206 // CUDA_ERROR_UNMAP_FAILED
	ErrorAlreadyMapped             Result = 208 // CUDA_ERROR_ALREADY_MAPPED
	ErrorNoBinaryForGPU            Result = 209 // CUDA_ERROR_NO_BINARY_FOR_GPU
	ErrorNotMapped                 Result = 211 // CUDA_ERROR_NOT_MAPPED
	ErrorECCUncorrectable          Result = 214 // CUDA_ERROR_ECC_UNCORRECTABLE
	ErrorPeerAccessUnsupported     Result = 217 // CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
	ErrorInvalidPTX                Result = 218 // CUDA_ERROR_INVALID_PTX
	ErrorNVLinkUncorrectable       Result = 220 // CUDA_ERROR_NVLINK_UNCORRECTABLE
	ErrorUnsupportedPTXVersion     Result = 222 // CUDA_ERROR_UNSUPPORTED_PTX_VERSION
	ErrorInvalidSource             Result = 300 // CUDA_ERROR_INVALID_SOURCE
	ErrorFileNotFound              Result = 301 // CUDA_ERROR_FILE_NOT_FOUND
	ErrorOperatingSystem           Result = 304 // CUDA_ERROR_OPERATING_SYSTEM
	ErrorInvalidHandle             Result = 400 // CUDA_ERROR_INVALID_HANDLE
	ErrorIllegalState              Result = 401 // CUDA_ERROR_ILLEGAL_STATE
	ErrorNotFound                  Result = 500 // CUDA_ERROR_NOT_FOUND
	ErrorNotReady                  Result = 600 // CUDA_ERROR_NOT_READY
	ErrorIllegalAddress            Result = 700 // CUDA_ERROR_ILLEGAL_ADDRESS
	ErrorLaunchOutOfResources      Result = 701 // CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
	ErrorLaunchTimeout             Result = 702 // CUDA_ERROR_LAUNCH_TIMEOUT
	ErrorPeerAccessAlreadyEnabled  Result = 704 // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
	ErrorPeerAccessNotEnabled      Result = 705 // CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
	ErrorPrimaryContextActive      Result = 708 // CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE
	ErrorContextIsDestroyed        Result = 709 // CUDA_ERROR_CONTEXT_IS_DESTROYED
	ErrorAssert                    Result = 710 // CUDA_ERROR_ASSERT
	ErrorTooManyPeers              Result = 711 // CUDA_ERROR_TOO_MANY_PEERS
	ErrorHardwareStackError        Result = 714 // CUDA_ERROR_HARDWARE_STACK_ERROR
	ErrorIllegalInstruction        Result = 715 // CUDA_ERROR_ILLEGAL_INSTRUCTION
	ErrorMisalignedAddress         Result = 716 // CUDA_ERROR_MISALIGNED_ADDRESS
	ErrorInvalidAddressSpace       Result = 717 // CUDA_ERROR_INVALID_ADDRESS_SPACE
	ErrorInvalidPC                 Result = 718 // CUDA_ERROR_INVALID_PC
	ErrorLaunchFailed              Result = 719 // CUDA_ERROR_LAUNCH_FAILED
	ErrorCooperativeLaunchTooLarge Result = 720 // CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
	ErrorNotPermitted              Result = 800 // CUDA_ERROR_NOT_PERMITTED
	ErrorNotSupported              Result = 801 // CUDA_ERROR_NOT_SUPPORTED
	ErrorSystemNotReady            Result = 802 // CUDA_ERROR_SYSTEM_NOT_READY
	ErrorSystemDriverMismatch      Result = 803 // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
	ErrorCompatNotSupported        Result = 804 // CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
	ErrorStreamCaptureUnsupported  Result = 900 // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	ErrorStreamCaptureInvalidated  Result = 901 // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
	ErrorStreamCaptureMerge        Result = 902 // CUDA_ERROR_STREAM_CAPTURE_MERGE
	ErrorStreamCaptureUnmatched    Result = 903 // CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
	ErrorStreamCaptureUnjoined     Result = 904 // CUDA_ERROR_STREAM_CAPTURE_UNJOINED
	ErrorStreamCaptureIsolation    Result = 905 // CUDA_ERROR_STREAM_CAPTURE_ISOLATION
	ErrorStreamCaptureImplicit     Result = 906 // CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
	ErrorCapturedEvent             Result = 907 // CUDA_ERROR_CAPTURED_EVENT
	ErrorStreamCaptureWrongThread  Result = 908 // CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
	ErrorTimeout                   Result = 909 // CUDA_ERROR_TIMEOUT
	ErrorGraphExecUpdateFailure    Result = 910 // CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
	ErrorUnknown                   Result = 999 // CUDA_ERROR_UNKNOWN
)

// resultNames holds the cuda.h names, used when the driver cannot be asked
// (no driver, or a code it does not know).
var resultNames = map[Result]string{
	Success:                        "CUDA_SUCCESS",
	ErrorInvalidValue:              "CUDA_ERROR_INVALID_VALUE",
	ErrorOutOfMemory:               "CUDA_ERROR_OUT_OF_MEMORY",
	ErrorNotInitialized:            "CUDA_ERROR_NOT_INITIALIZED",
	ErrorDeinitialized:             "CUDA_ERROR_DEINITIALIZED",
	ErrorStubLibrary:               "CUDA_ERROR_STUB_LIBRARY",
	ErrorDeviceUnavailable:         "CUDA_ERROR_DEVICE_UNAVAILABLE",
	ErrorNoDevice:                  "CUDA_ERROR_NO_DEVICE",
	ErrorInvalidDevice:             "CUDA_ERROR_INVALID_DEVICE",
	ErrorInvalidImage:              "CUDA_ERROR_INVALID_IMAGE",
	ErrorInvalidContext:            "CUDA_ERROR_INVALID_CONTEXT",
	ErrorMapFailed:                 "CUDA_ERROR_MAP_FAILED",
	ErrorUnmapFailed:               "CUDA_ERROR_UNMAP_FAILED",
	ErrorAlreadyMapped:             "CUDA_ERROR_ALREADY_MAPPED",
	ErrorNoBinaryForGPU:            "CUDA_ERROR_NO_BINARY_FOR_GPU",
	ErrorNotMapped:                 "CUDA_ERROR_NOT_MAPPED",
	ErrorECCUncorrectable:          "CUDA_ERROR_ECC_UNCORRECTABLE",
	ErrorPeerAccessUnsupported:     "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
	ErrorInvalidPTX:                "CUDA_ERROR_INVALID_PTX",
	ErrorNVLinkUncorrectable:       "CUDA_ERROR_NVLINK_UNCORRECTABLE",
	ErrorUnsupportedPTXVersion:     "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	ErrorInvalidSource:             "CUDA_ERROR_INVALID_SOURCE",
	ErrorFileNotFound:              "CUDA_ERROR_FILE_NOT_FOUND",
	ErrorOperatingSystem:           "CUDA_ERROR_OPERATING_SYSTEM",
	ErrorInvalidHandle:             "CUDA_ERROR_INVALID_HANDLE",
	ErrorIllegalState:              "CUDA_ERROR_ILLEGAL_STATE",
	ErrorNotFound:                  "CUDA_ERROR_NOT_FOUND",
	ErrorNotReady:                  "CUDA_ERROR_NOT_READY",
	ErrorIllegalAddress:            "CUDA_ERROR_ILLEGAL_ADDRESS",
	ErrorLaunchOutOfResources:      "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	ErrorLaunchTimeout:             "CUDA_ERROR_LAUNCH_TIMEOUT",
	ErrorPeerAccessAlreadyEnabled:  "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
	ErrorPeerAccessNotEnabled:      "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
	ErrorPrimaryContextActive:      "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
	ErrorContextIsDestroyed:        "CUDA_ERROR_CONTEXT_IS_DESTROYED",
	ErrorAssert:                    "CUDA_ERROR_ASSERT",
	ErrorTooManyPeers:              "CUDA_ERROR_TOO_MANY_PEERS",
	ErrorHardwareStackError:        "CUDA_ERROR_HARDWARE_STACK_ERROR",
	ErrorIllegalInstruction:        "CUDA_ERROR_ILLEGAL_INSTRUCTION",
	ErrorMisalignedAddress:         "CUDA_ERROR_MISALIGNED_ADDRESS",
	ErrorInvalidAddressSpace:       "CUDA_ERROR_INVALID_ADDRESS_SPACE",
	ErrorInvalidPC:                 "CUDA_ERROR_INVALID_PC",
	ErrorLaunchFailed:              "CUDA_ERROR_LAUNCH_FAILED",
	ErrorCooperativeLaunchTooLarge: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
	ErrorNotPermitted:              "CUDA_ERROR_NOT_PERMITTED",
	ErrorNotSupported:              "CUDA_ERROR_NOT_SUPPORTED",
	ErrorSystemNotReady:            "CUDA_ERROR_SYSTEM_NOT_READY",
	ErrorSystemDriverMismatch:      "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	ErrorCompatNotSupported:        "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	ErrorStreamCaptureUnsupported:  "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	ErrorStreamCaptureInvalidated:  "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	ErrorStreamCaptureMerge:        "CUDA_ERROR_STREAM_CAPTURE_MERGE",
	ErrorStreamCaptureUnmatched:    "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
	ErrorStreamCaptureUnjoined:     "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
	ErrorStreamCaptureIsolation:    "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
	ErrorStreamCaptureImplicit:     "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
	ErrorCapturedEvent:             "CUDA_ERROR_CAPTURED_EVENT",
	ErrorStreamCaptureWrongThread:  "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
	ErrorTimeout:                   "CUDA_ERROR_TIMEOUT",
	ErrorGraphExecUpdateFailure:    "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
	ErrorUnknown:                   "CUDA_ERROR_UNKNOWN",
}

// Name is the cuda.h name of r, or "CUDA_ERROR_<n>" for codes this
// package does not list.
func (r Result) Name() string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return "CUDA_ERROR_" + strconv.Itoa(int(r))
}

// Error makes Result an error: "CUDA_ERROR_OUT_OF_MEMORY (2)".
func (r Result) Error() string { return r.Name() + " (" + strconv.Itoa(int(r)) + ")" }

// Error is a failed driver call: which operation, its CUresult, and the
// driver's own name and description of it (cuGetErrorName/String).
type Error struct {
	Op   string // the driver entry point, e.g. "cuMemAlloc"
	Code Result
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Text string // e.g. "out of memory"
}

// Error gives "cuda: op: NAME (code)" and the driver's description.
func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s: %s (%d)", e.Op, e.Name, int32(e.Code))
	if e.Text != "" {
		s += ": " + e.Text
	}
	return s
}

// Unwrap exposes the Result, so errors.Is(err, cuda.ErrorOutOfMemory) holds.
func (e *Error) Unwrap() error { return e.Code }

// Is makes a CUDA_ERROR_NOT_SUPPORTED answer match ErrNotSupported too, so
// callers test one sentinel for "this machine cannot".
func (e *Error) Is(target error) bool {
	return target == ErrNotSupported && e.Code == ErrorNotSupported
}

// errorStrings asks the driver for a code's name and description; ok is
// false when it cannot (no driver, unknown code).
type errorStrings func(Result) (name, text string, ok bool)

// newError builds the *Error for op's failure with code, naming it through
// lookup when it answers and through resultNames otherwise.
func newError(op string, code Result, lookup errorStrings) *Error {
	e := &Error{Op: op, Code: code}
	if lookup != nil {
		if name, text, ok := lookup(code); ok {
			e.Name, e.Text = name, text
		}
	}
	if e.Name == "" {
		e.Name = code.Name()
	}
	return e
}

// unresolvedError is returned by an operation whose optional entry point
// the loaded driver lacks.
func unresolvedError(symbol string) error {
	return fmt.Errorf("cuda: %s is not in this driver (too old?): %w", symbol, ErrNotSupported)
}

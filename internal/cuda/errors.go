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
	Success                        Result = 0
	ErrorInvalidValue              Result = 1
	ErrorOutOfMemory               Result = 2
	ErrorNotInitialized            Result = 3
	ErrorDeinitialized             Result = 4
	ErrorStubLibrary               Result = 34
	ErrorDeviceUnavailable         Result = 46
	ErrorNoDevice                  Result = 100
	ErrorInvalidDevice             Result = 101
	ErrorInvalidImage              Result = 200
	ErrorInvalidContext            Result = 201
	ErrorMapFailed                 Result = 205
	ErrorUnmapFailed               Result = 206
	ErrorAlreadyMapped             Result = 208
	ErrorNoBinaryForGPU            Result = 209
	ErrorNotMapped                 Result = 211
	ErrorECCUncorrectable          Result = 214
	ErrorPeerAccessUnsupported     Result = 217
	ErrorInvalidPTX                Result = 218
	ErrorNVLinkUncorrectable       Result = 220
	ErrorUnsupportedPTXVersion     Result = 222
	ErrorInvalidSource             Result = 300
	ErrorFileNotFound              Result = 301
	ErrorOperatingSystem           Result = 304
	ErrorInvalidHandle             Result = 400
	ErrorIllegalState              Result = 401
	ErrorNotFound                  Result = 500
	ErrorNotReady                  Result = 600
	ErrorIllegalAddress            Result = 700
	ErrorLaunchOutOfResources      Result = 701
	ErrorLaunchTimeout             Result = 702
	ErrorPeerAccessAlreadyEnabled  Result = 704
	ErrorPeerAccessNotEnabled      Result = 705
	ErrorPrimaryContextActive      Result = 708
	ErrorContextIsDestroyed        Result = 709
	ErrorAssert                    Result = 710
	ErrorTooManyPeers              Result = 711
	ErrorHardwareStackError        Result = 714
	ErrorIllegalInstruction        Result = 715
	ErrorMisalignedAddress         Result = 716
	ErrorInvalidAddressSpace       Result = 717
	ErrorInvalidPC                 Result = 718
	ErrorLaunchFailed              Result = 719
	ErrorCooperativeLaunchTooLarge Result = 720
	ErrorNotPermitted              Result = 800
	ErrorNotSupported              Result = 801
	ErrorSystemNotReady            Result = 802
	ErrorSystemDriverMismatch      Result = 803
	ErrorCompatNotSupported        Result = 804
	ErrorStreamCaptureUnsupported  Result = 900
	ErrorStreamCaptureInvalidated  Result = 901
	ErrorStreamCaptureMerge        Result = 902
	ErrorStreamCaptureUnmatched    Result = 903
	ErrorStreamCaptureUnjoined     Result = 904
	ErrorStreamCaptureIsolation    Result = 905
	ErrorStreamCaptureImplicit     Result = 906
	ErrorCapturedEvent             Result = 907
	ErrorStreamCaptureWrongThread  Result = 908
	ErrorTimeout                   Result = 909
	ErrorGraphExecUpdateFailure    Result = 910
	ErrorUnknown                   Result = 999
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

//go:build cgo

package main

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"unsafe"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/internal/cuda"
)

// NCCL's result codes (ncclResult_t).
const (
	ncclSuccess            C.int = 0
	ncclUnhandledCudaError C.int = 1
	ncclSystemError        C.int = 2
	ncclInternalError      C.int = 3
	ncclInvalidArgument    C.int = 4
	ncclInvalidUsage       C.int = 5
	ncclRemoteError        C.int = 6
	ncclInProgress         C.int = 7
)

// libName prefixes every last-error text: the library and the API it
// speaks, so that a user who reads one knows which NCCL answered.
var libName = C.GOCCL_LIB_NAME + " " + C.GOCCL_LIB_VERSION + " (" + C.GOCCL_API_NAME + ")"

// errUsage is wrapped by this layer's errors for misuse (NCCL's
// ncclInvalidUsage): a call the library does not offer, a destroyed or
// failed communicator.
var errUsage = errors.New("invalid usage")

// resultOf gives the NCCL code of err, following NCCL's meanings.
func resultOf(err error) C.int {
	var cerr *cuda.Error
	var pe *comm.PeerError
	var errno syscall.Errno
	var nerr net.Error
	switch {
	case err == nil:
		return ncclSuccess
	case errors.Is(err, comm.ErrAborted), errors.Is(err, comm.ErrTimeout), errors.As(err, &pe):
		// A peer died, aborted or never answered: the failure is remote.
		return ncclRemoteError
	case errors.Is(err, comm.ErrInvalidArgument):
		return ncclInvalidArgument
	case errors.Is(err, errUsage), errors.Is(err, comm.ErrNotSupported), errors.Is(err, comm.ErrClosed),
		errors.Is(err, comm.ErrCallMismatch):
		return ncclInvalidUsage
	case errors.As(err, &cerr):
		return ncclUnhandledCudaError
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &errno), errors.As(err, &nerr),
		errors.Is(err, os.ErrDeadlineExceeded):
		return ncclSystemError
	}
	return ncclInternalError
}

// fail records err as the last error of the calling thread, logs it when
// the user asked for logs, and returns its code.
func fail(fn string, err error) C.int {
	code := resultOf(err)
	text := libName + ": " + fn + ": " + err.Error()
	cs := C.CString(text)
	C.goccl_set_last_error(cs)
	C.free(unsafe.Pointer(cs))
	if logErrors {
		logger.Warn("goccl: "+fn+" failed", "code", int(code), "err", err)
	}
	return code
}

func invalidArg(fn, format string, args ...any) C.int {
	return fail(fn, fmt.Errorf("%w: "+format, append([]any{comm.ErrInvalidArgument}, args...)...))
}

// logger reports what the library does under GOCCL_DEBUG=INFO (the
// communicators log through goccl's own settings); errors are logged only
// when GOCCL_DEBUG is set, since NCCL's callers expect a quiet library by
// default and read ncclGetLastError.
var (
	logger    *slog.Logger
	logErrors bool
)

func init() {
	lvl := slog.LevelWarn
	switch v := strings.ToUpper(os.Getenv("GOCCL_DEBUG")); v {
	case "INFO":
		lvl = slog.LevelInfo
	case "TRACE", "DEBUG":
		lvl = comm.LevelTrace
	}
	logErrors = os.Getenv("GOCCL_DEBUG") != ""
	logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl, ReplaceAttr: comm.NameTraceLevel}))
	// The library is the only Go in its process: what goccl's packages log
	// through slog's default logger follows GOCCL_DEBUG too, so that a
	// program gets no INFO lines it did not ask for.
	slog.SetDefault(logger)
}

package nccl

import (
	"errors"
	"fmt"
)

// The package's errors, settings and value types: plain Go, the same in
// builds with and without cgo.

// ErrUnavailable is wrapped by the error of Load when no usable
// libnccl.so.2 was found.
var ErrUnavailable = errors.New("nccl: libnccl.so.2 not available")

// ErrNotSupported is wrapped by the error of a call the loaded library
// lacks.
var ErrNotSupported = errors.New("nccl: not supported by the library")

// ErrRemote is wrapped by the errors of NCCL's ncclRemoteError: a peer
// process exited or the network failed.
var ErrRemote = errors.New("nccl: remote process exited or network error")

// EnvPath names the library (or its directory) to load.
const EnvPath = "GOCCL_NCCL_PATH"

// MinVersion is the oldest release accepted (NCCL's version code,
// major*10000 + minor*100 + patch): 2.19.
const MinVersion = 21900

// UniqueIDBytes is the size of NCCL's ncclUniqueId.
const UniqueIDBytes = 128

// UniqueID names one communicator being made; rank 0 of it makes one and
// sends it to the others.
type UniqueID [UniqueIDBytes]byte

// DataType and Op take NCCL's enum values (ncclDataType_t, ncclRedOp_t),
// which goccl's collectives.DataType and collectives.Op share.
type (
	DataType int32
	Op       int32
)

// resultRemote is ncclRemoteError.
const resultRemote = 6

// Error is a failed NCCL call: its name, NCCL's result code and text, and
// NCCL's last error message where it keeps one.
type Error struct {
	Call   string
	Result int
	Text   string
	Detail string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("nccl: %s: %s (ncclResult_t %d)", e.Call, e.Text, e.Result)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is lets errors.Is(err, ErrRemote) match.
func (e *Error) Is(target error) bool { return target == ErrRemote && e.Result == resultRemote }

// Library is the loaded libnccl.so.2. Only one is loaded per process.
type Library struct {
	path    string
	version int
}

// Path is the file loaded; Version NCCL's release ("2.28.9").
func (l *Library) Path() string { return l.path }

// Version is the loaded release, as "2.28.9".
func (l *Library) Version() string { return versionString(l.version) }

func versionString(code int) string {
	return fmt.Sprintf("%d.%d.%d", code/10000, code/100%100, code%100)
}

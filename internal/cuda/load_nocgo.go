//go:build !cgo

package cuda

import "fmt"

// Without cgo there is no way to call into libcuda.so.1: Load fails, the
// way it does where no driver is installed, so that callers (the GPU
// backend, the topology probe) take their usual no-GPU path.

// errNoCgo is what Load returns in a build without cgo.
var errNoCgo = fmt.Errorf("%w (built with CGO_ENABLED=0: the GPU backend needs cgo)", ErrNoDriver)

// Load reports that this build cannot reach the CUDA driver: the error
// wraps ErrNoDriver.
func Load() (Driver, error) { return nil, errNoCgo }

// Resolved answers false: no driver is ever loaded in this build.
func Resolved(string) bool { return false }

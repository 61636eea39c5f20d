//go:build !cgo

package nvml

import "fmt"

// Without cgo libnvidia-ml.so.1 cannot be called: Open fails as it does
// where the library is missing, and topology falls back to what the CUDA
// driver and /sys report.

// OpenPath reports that this build cannot load NVML: the error wraps
// ErrNoLibrary and names path.
func OpenPath(path string) (Lib, error) {
	return nil, fmt.Errorf("%w: %s: built with CGO_ENABLED=0: NVML needs cgo", ErrNoLibrary, path)
}

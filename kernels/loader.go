package kernels

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
)

// embedded is the committed fatbin built by build.sh (`make kernels`).
//
//go:embed goccl.fatbin
var embedded []byte

// EnvFatbin names a fatbin file that replaces the embedded one, so that one
// run on a GPU machine can compile the kernels and test them.
const EnvFatbin = "GOCCL_FATBIN"

// ErrNoFatbin says that neither the embedded fatbin nor GOCCL_FATBIN holds
// kernels.
var ErrNoFatbin = errors.New("kernels: no fatbin (run `make kernels` on a machine with nvcc, or set GOCCL_FATBIN)")

// Image returns the fatbin to hand to cuModuleLoadData: the file named by
// GOCCL_FATBIN when set, else the embedded one. The returned slice must not
// be modified.
func Image() ([]byte, error) {
	if path := os.Getenv(EnvFatbin); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("kernels: %s=%s: %w", EnvFatbin, path, err)
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("kernels: %s=%s is empty: %w", EnvFatbin, path, ErrNoFatbin)
		}
		return b, nil
	}
	if len(embedded) == 0 {
		return nil, ErrNoFatbin
	}
	return embedded, nil
}

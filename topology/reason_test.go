package topology

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/goccl/goccl/internal/cuda"
)

func TestNoDriverReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w (libcuda.so.1: libcuda.so.1: cannot open shared object file: No such file or directory)", cuda.ErrNoDriver),
			"no CUDA driver found: libcuda.so.1: cannot open shared object file: No such file or directory"},
		{fmt.Errorf("%w: libcuda.so.1: cannot open shared object file", cuda.ErrNoDriver),
			"no CUDA driver found: libcuda.so.1: cannot open shared object file"},
		{fmt.Errorf("cuda: %w", cuda.ErrNoDriver), "no CUDA driver found"},
		// A build without cgo (internal/cuda/load_nocgo.go).
		{fmt.Errorf("%w (built with CGO_ENABLED=0: the GPU backend needs cgo)", cuda.ErrNoDriver),
			"no CUDA driver found: built with CGO_ENABLED=0: the GPU backend needs cgo"},
		{errors.New("cuInit: CUDA_ERROR_NO_DEVICE"), "CUDA driver unusable: cuInit: CUDA_ERROR_NO_DEVICE"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, noDriverReason(tt.err))
	}
}

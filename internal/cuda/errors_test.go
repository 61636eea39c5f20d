package cuda

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestResultError(t *testing.T) {
	tests := []struct {
		r    Result
		want string
	}{
		{ErrorOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY (2)"},
		{ErrorPeerAccessAlreadyEnabled, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED (704)"},
		{ErrorStreamCaptureUnsupported, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900)"},
		{Result(12345), "CUDA_ERROR_12345 (12345)"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.r.Error())
		})
	}
}

func TestResultValues(t *testing.T) {
	// Spot checks against cuda.h (CUDA 12.x), the values most code branches on.
	tests := []struct {
		r    Result
		want int32
	}{
		{ErrorInvalidValue, 1}, {ErrorOutOfMemory, 2}, {ErrorNotInitialized, 3},
		{ErrorDeinitialized, 4}, {ErrorNoDevice, 100}, {ErrorInvalidDevice, 101},
		{ErrorInvalidContext, 201}, {ErrorAlreadyMapped, 208}, {ErrorNotReady, 600},
		{ErrorIllegalAddress, 700}, {ErrorPeerAccessAlreadyEnabled, 704},
		{ErrorLaunchFailed, 719}, {ErrorNotSupported, 801}, {ErrorStreamCaptureUnsupported, 900},
		{ErrorUnknown, 999},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, int32(tc.r), tc.r.Name())
	}
}

func TestNewErrorFormatting(t *testing.T) {
	fake := func(r Result) (string, string, bool) {
		if r == ErrorOutOfMemory {
			return "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", true
		}
		return "", "", false
	}
	tests := []struct {
		name     string
		code     Result
		lookup   errorStrings
		wantMsg  string
		wantName string
	}{
		{"driver names it", ErrorOutOfMemory, fake,
			"cuda: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory", "CUDA_ERROR_OUT_OF_MEMORY"},
		{"driver does not know it", ErrorIllegalAddress, fake,
			"cuda: cuMemAlloc: CUDA_ERROR_ILLEGAL_ADDRESS (700)", "CUDA_ERROR_ILLEGAL_ADDRESS"},
		{"no driver to ask", Result(4242), nil,
			"cuda: cuMemAlloc: CUDA_ERROR_4242 (4242)", "CUDA_ERROR_4242"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newError("cuMemAlloc", tc.code, tc.lookup)
			assert.Equal(t, tc.wantMsg, e.Error())
			assert.Equal(t, tc.wantName, e.Name)
			assert.Equal(t, tc.code, e.Code)
		})
	}
}

func TestErrorIs(t *testing.T) {
	oom := fmt.Errorf("alloc workspace: %w", newError("cuMemAlloc", ErrorOutOfMemory, nil))
	assert.ErrorIs(t, oom, ErrorOutOfMemory)
	assert.NotErrorIs(t, oom, ErrorInvalidValue)
	assert.NotErrorIs(t, oom, ErrNotSupported)
	var ce *Error
	assert.True(t, errors.As(oom, &ce))
	assert.Equal(t, "cuMemAlloc", ce.Op)

	ns := newError("cuMemCreate", ErrorNotSupported, nil)
	assert.ErrorIs(t, ns, ErrorNotSupported)
	assert.ErrorIs(t, ns, ErrNotSupported, "CUDA_ERROR_NOT_SUPPORTED must match the package sentinel")

	un := unresolvedError("cuMulticastCreate")
	assert.ErrorIs(t, un, ErrNotSupported)
	assert.Contains(t, un.Error(), "cuMulticastCreate")
}

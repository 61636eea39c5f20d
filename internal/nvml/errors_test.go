package nvml

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestErrorIs(t *testing.T) {
	sentinels := []error{ErrNotSupported, ErrUninitialized, ErrInvalidArgument, ErrNoPermission,
		ErrNotFound, ErrDriverNotLoaded, ErrNoLibrary, ErrGPULost}
	tests := []struct {
		code Return
		want error // the one sentinel it must match; nil: none
	}{
		{ReturnUninitialized, ErrUninitialized},
		{ReturnInvalidArg, ErrInvalidArgument},
		{ReturnNotSupported, ErrNotSupported},
		{ReturnFuncNotFound, ErrNotSupported},
		{ReturnNoPermission, ErrNoPermission},
		{ReturnNotFound, ErrNotFound},
		{ReturnDriverNotLoaded, ErrDriverNotLoaded},
		{ReturnLibNotFound, ErrNoLibrary},
		{ReturnGPULost, ErrGPULost},
		{ReturnUnknown, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.code), func(t *testing.T) {
			err := fmt.Errorf("wrapped: %w", &Error{Func: "nvmlX", Code: tt.code, Text: "text"})
			for _, s := range sentinels {
				assert.Equal(t, s == tt.want, errors.Is(err, s), "errors.Is(code %d, %v)", tt.code, s)
			}
			var e *Error
			assert.True(t, errors.As(err, &e))
			assert.Equal(t, tt.code, e.Code)
			assert.Contains(t, err.Error(), "nvmlX")
		})
	}
}

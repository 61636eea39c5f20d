//go:build cgo

package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadMissingLibrary(t *testing.T) {
	const bogus = "libgoccl-no-such-cuda.so.1"
	drv, err := load(bogus)
	require.Error(t, err)
	assert.Nil(t, drv)
	assert.ErrorIs(t, err, ErrNoDriver)
	msg := err.Error()
	assert.True(t, strings.HasPrefix(msg, "no CUDA driver found ("+bogus+": "), "message %q", msg)
	// The dlerror text is carried, so the user sees why.
	assert.Contains(t, msg, "cannot open shared object file")
	assert.Equal(t, 1, strings.Count(msg, bogus), "the library is named once: %q", msg)
	// Not a CUDA result: the driver was never reached.
	var ce *Error
	assert.False(t, errors.As(err, &ce))
}

func TestLoadIsSingleton(t *testing.T) {
	d1, err1 := Load()
	d2, err2 := Load()
	assert.Equal(t, d1, d2)
	assert.Equal(t, err1, err2)
	if err1 != nil {
		// Either no library, or cuInit refused: both are errors callers can classify.
		var ce *Error
		assert.True(t, errors.Is(err1, ErrNoDriver) || errors.As(err1, &ce), "unclassified Load error: %v", err1)
		assert.False(t, Resolved("cuMemAlloc_v2"), "symbols must not be resolved after a failed load")
	}
}

func TestLayoutMatchesCudaH(t *testing.T) {
	// Offsets of CUmemAllocationProp, CUmemAccessDesc and CUmulticastObjectProp
	// as cuda.h declares them on LP64 (int, int, {int,int}, void*, {u8,u8,u16,u8[4]}).
	want := map[string]int{
		"allocProp.size":                 32,
		"allocProp.type":                 0,
		"allocProp.requestedHandleTypes": 4,
		"allocProp.location.type":        8,
		"allocProp.location.id":          12,
		"allocProp.win32HandleMetaData":  16,
		"allocProp.compressionType":      24,
		"allocProp.gpuDirectRDMACapable": 25,
		"allocProp.usage":                26,
		"allocProp.reserved":             28,
		"accessDesc.size":                12,
		"accessDesc.flags":               8,
		"mcProp.size":                    32,
		"mcProp.numDevices":              0,
		"mcProp.size_":                   8,
		"mcProp.handleTypes":             16,
		"mcProp.flags":                   24,
	}
	assert.Equal(t, want, layout())
}

func TestAllocPropBytes(t *testing.T) {
	tests := []struct {
		name string
		prop AllocProp
		want []byte
	}{
		{"device 0, posix fd", AllocProp{Device: 0, HandleTypes: HandlePosixFD}, []byte{
			1, 0, 0, 0, // type = CU_MEM_ALLOCATION_TYPE_PINNED
			1, 0, 0, 0, // requestedHandleTypes = POSIX_FILE_DESCRIPTOR
			1, 0, 0, 0, // location.type = CU_MEM_LOCATION_TYPE_DEVICE
			0, 0, 0, 0, // location.id
			0, 0, 0, 0, 0, 0, 0, 0, // win32HandleMetaData
			0, 0, 0, 0, 0, 0, 0, 0, // allocFlags
		}},
		{"device 3, posix fd|fabric", AllocProp{Device: 3, HandleTypes: HandlePosixFD | HandleFabric}, []byte{
			1, 0, 0, 0,
			9, 0, 0, 0,
			1, 0, 0, 0,
			3, 0, 0, 0,
			0, 0, 0, 0, 0, 0, 0, 0,
			0, 0, 0, 0, 0, 0, 0, 0,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, allocPropBytes(&tc.prop))
		})
	}
}

func TestMulticastPropBytes(t *testing.T) {
	got := mcPropBytes(&MulticastProp{NumDevices: 2, Size: 0x1_0020_0000, HandleTypes: HandlePosixFD})
	want := []byte{
		2, 0, 0, 0, 0, 0, 0, 0, // numDevices + padding
		0, 0, 0x20, 0, 1, 0, 0, 0, // size
		1, 0, 0, 0, 0, 0, 0, 0, // handleTypes
		0, 0, 0, 0, 0, 0, 0, 0, // flags
	}
	assert.Equal(t, want, got)
}

package cudatest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/internal/cuda"
)

// The fake must refuse what CUDA refuses, or transport tests prove nothing.

func TestFakeIPCRules(t *testing.T) {
	f := New()
	p, err := f.MemAlloc(Ctx(0), 1<<20)
	require.NoError(t, err)
	_, err = f.IpcGetMemHandle(Ctx(0), p+16)
	assert.ErrorIs(t, err, cuda.ErrorInvalidValue, "handle of a non-base pointer")
	h, err := f.IpcGetMemHandle(Ctx(0), p)
	require.NoError(t, err)
	_, err = f.IpcOpenMemHandle(Ctx(0), h)
	assert.ErrorIs(t, err, cuda.ErrorInvalidContext, "opening one's own allocation")
	q, err := f.IpcOpenMemHandle(Ctx(1), h)
	require.NoError(t, err)
	_, err = f.IpcOpenMemHandle(Ctx(1), h)
	assert.ErrorIs(t, err, cuda.ErrorAlreadyMapped, "opening twice in one process")
	loc, ok := f.Target(Ctx(1), q+8)
	require.True(t, ok)
	assert.Equal(t, Location{Owner: Ctx(0), Obj: loc.Obj, Off: 8}, loc)
	require.NoError(t, f.MemFree(Ctx(0), p))
	assert.Len(t, f.Violations(), 1, "freeing memory a peer still has open")
	require.NoError(t, f.IpcCloseMemHandle(Ctx(1), q))
	assert.Equal(t, Outstanding{}, f.Outstanding())
}

func TestFakeVMMRules(t *testing.T) {
	f := New()
	prop := &cuda.AllocProp{Device: 0, HandleTypes: cuda.HandlePosixFD}
	_, err := f.MemCreate(Ctx(0), 3<<20, prop)
	assert.ErrorIs(t, err, cuda.ErrorInvalidValue, "size not a multiple of the granularity")
	h, err := f.MemCreate(Ctx(0), 2<<20, prop)
	require.NoError(t, err)
	fd, err := f.MemExportToFD(Ctx(0), h)
	require.NoError(t, err)
	h1, err := f.MemImportFromFD(Ctx(1), fd)
	require.NoError(t, err)
	require.NoError(t, unix.Close(fd))
	va, err := f.MemAddressReserve(Ctx(1), 2<<20, 2<<20)
	require.NoError(t, err)
	assert.Error(t, f.MemSetAccess(Ctx(1), va, 2<<20, []cuda.Device{1}), "access before map")
	require.NoError(t, f.MemMap(Ctx(1), va, 2<<20, h1))
	require.NoError(t, f.MemSetAccess(Ctx(1), va, 2<<20, []cuda.Device{1}))
	assert.Error(t, f.MemAddressFree(Ctx(1), va, 2<<20), "freeing a mapped range")
	require.NoError(t, f.MemRelease(Ctx(0), h))
	assert.Len(t, f.Violations(), 1, "exporter releasing while a peer maps it")
	require.NoError(t, f.MemUnmap(Ctx(1), va, 2<<20))
	require.NoError(t, f.MemAddressFree(Ctx(1), va, 2<<20))
	require.NoError(t, f.MemRelease(Ctx(1), h1))
	assert.Equal(t, Outstanding{}, f.Outstanding())
}

package membuf

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestHostAdopt: memory mapped elsewhere, adopted, is read and written in
// place through the space, bounds checked as the space's own.
func TestHostAdopt(t *testing.T) {
	m, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_SHARED)
	require.NoError(t, err)
	defer func() { require.NoError(t, unix.Munmap(m)) }()
	h := NewHost()
	ptr := uintptr(unsafe.Pointer(&m[0]))
	b := h.Adopt(ptr+16, 100)
	assert.Equal(t, ptr+16, b.Ptr)
	require.NoError(t, h.Fill(b, 0, 100, 0x5A))
	require.NoError(t, h.CopyIn(b, 98, []byte{7, 8}))
	assert.Equal(t, byte(0x5A), m[16])
	assert.Equal(t, []byte{7, 8, 0}, m[114:117])
	out := make([]byte, 3)
	require.NoError(t, h.CopyOut(out, b, 97))
	assert.Equal(t, []byte{0x5A, 7, 8}, out)
	assert.ErrorIs(t, h.CopyIn(b, 99, []byte{1, 2}), ErrRange)
	assert.Zero(t, h.Adopt(0, 8).Ptr)
	assert.Zero(t, h.Adopt(ptr, 0).Size)
}

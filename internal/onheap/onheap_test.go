package onheap

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

func TestAddr(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    []int32
	}{
		{"empty", nil},
		{"one", []int32{7}},
		{"many", make([]int32, 1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Addr(tc.s)
			if len(tc.s) == 0 {
				assert.Zero(t, got)
				return
			}
			assert.Equal(t, uintptr(unsafe.Pointer(&tc.s[0])), got)
			assert.Equal(t, &tc.s[0], &Slice(tc.s)[0], "Slice returns the same slice")
		})
	}
}

// The point of the package: a small make whose address leaves only
// through Addr is allocated (on the heap), where one that does not escape
// would cost no allocation at all.
func TestAddrKeepsASmallMakeOnTheHeap(t *testing.T) {
	var p uintptr
	allocs := testing.AllocsPerRun(100, func() {
		b := make([]int64, 2)
		p = Addr(b)
	})
	assert.Equal(t, 1.0, allocs)
	assert.NotZero(t, p)
	stack := testing.AllocsPerRun(100, func() {
		b := make([]int64, 2)
		p = uintptr(unsafe.Pointer(&b[0]))
	})
	assert.Zero(t, stack, "without Addr the make stays on the stack (the test's premise)")
}

package gpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPickTransport(t *testing.T) {
	fact := func(pid byte, vmm byte) []byte { return []byte{pid, 0, 0, 0, vmm} }
	cases := []struct {
		name string
		all  [][]byte
		want string
	}{
		{"one rank", [][]byte{fact(7, 1)}, "uva"},
		{"one process, no vmm", [][]byte{fact(7, 0), fact(7, 0)}, "uva"},
		{"two processes with vmm", [][]byte{fact(7, 1), fact(8, 1)}, "vmm"},
		{"three processes, one GPU without posix fds", [][]byte{fact(7, 1), fact(8, 0), fact(9, 1)}, "ipc"},
		{"mixed placement with vmm", [][]byte{fact(7, 1), fact(7, 1), fact(9, 1)}, "vmm"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pickTransport(tc.all)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := pickTransport([][]byte{fact(7, 1), {1, 2}})
	assert.ErrorContains(t, err, "malformed")
}

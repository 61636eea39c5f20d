package topology

import (
	"io/fs"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fakeNode(env map[string]string, host string, boot string, bootErr error) NodeSource {
	return NodeSource{
		Getenv:   func(k string) string { return env[k] },
		Hostname: func() (string, error) { return host, nil },
		ReadFile: func(string) ([]byte, error) {
			if bootErr != nil {
				return nil, bootErr
			}
			return []byte(boot + "\n"), nil
		},
	}
}

func TestLocalNode(t *testing.T) {
	a, desc, err := LocalNode(fakeNode(nil, "gpu01", "b-1", nil))
	require.NoError(t, err)
	assert.Equal(t, "hostname gpu01, boot id b-1", desc)

	cases := []struct {
		name string
		src  NodeSource
		same bool
	}{
		{"same host, same boot", fakeNode(nil, "gpu01", "b-1", nil), true},
		{"same host, rebooted", fakeNode(nil, "gpu01", "b-2", nil), false},
		{"other host", fakeNode(nil, "gpu02", "b-1", nil), false},
		{"no boot id", fakeNode(nil, "gpu01", "", fs.ErrNotExist), false},
		{"boot id hidden", fakeNode(nil, "gpu01", "", fs.ErrPermission), false},
		{"host id set", fakeNode(map[string]string{"GOCCL_HOSTID": "nodeA"}, "gpu01", "b-1", nil), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, _, err := LocalNode(tc.src)
			require.NoError(t, err)
			assert.Equal(t, tc.same, a == b)
		})
	}
	// Any other failure to read the boot id is an error, not another node.
	_, _, err = LocalNode(fakeNode(nil, "gpu01", "", syscall.EMFILE))
	assert.ErrorIs(t, err, syscall.EMFILE)
	// GOCCL_HOSTID decides alone: two machines given one id are one node.
	x, d, _ := LocalNode(fakeNode(map[string]string{"GOCCL_HOSTID": " nodeA "}, "h1", "b1", nil))
	y, _, _ := LocalNode(fakeNode(map[string]string{"GOCCL_HOSTID": "nodeA"}, "h2", "b2", nil))
	assert.Equal(t, x, y)
	assert.Equal(t, "GOCCL_HOSTID=nodeA", d)
	assert.Len(t, x.String(), 16)
}

func TestNodes(t *testing.T) {
	var a, b, c NodeID
	a[0], b[0], c[0] = 1, 2, 3
	cases := []struct {
		ids  []NodeID
		want [][]int
	}{
		{[]NodeID{a}, [][]int{{0}}},
		{[]NodeID{a, a, a, a}, [][]int{{0, 1, 2, 3}}},
		{[]NodeID{a, b, a, b}, [][]int{{0, 2}, {1, 3}}},
		{[]NodeID{c, a, b, c}, [][]int{{0, 3}, {1}, {2}}},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, Nodes(tc.ids))
	}
}

func TestLayout(t *testing.T) {
	cases := []struct {
		keys            []string
		members         [][]int
		nodeOf, localOf []int
	}{
		{[]string{"a"}, [][]int{{0}}, []int{0}, []int{0}},
		{[]string{"a", "a", "b", "b"}, [][]int{{0, 1}, {2, 3}}, []int{0, 0, 1, 1}, []int{0, 1, 0, 1}},
		{[]string{"b", "a", "b", "a", "b"}, [][]int{{0, 2, 4}, {1, 3}}, []int{0, 1, 0, 1, 0}, []int{0, 0, 1, 1, 2}},
	}
	for _, tc := range cases {
		members, nodeOf, localOf := Layout(tc.keys)
		assert.Equal(t, tc.members, members, "%v", tc.keys)
		assert.Equal(t, tc.nodeOf, nodeOf, "%v", tc.keys)
		assert.Equal(t, tc.localOf, localOf, "%v", tc.keys)
		for r := range tc.keys {
			assert.Equal(t, r, members[nodeOf[r]][localOf[r]], "%v: rank %d", tc.keys, r)
		}
	}
}

package costmodel

import (
	"math/bits"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkTree asserts parent describes one binary tree over n ranks and
// returns its depth in edges, walked independently of inOrderTree.
func checkTree(t *testing.T, parent []int) int {
	t.Helper()
	n := len(parent)
	roots, children := 0, make([]int, n)
	for r, p := range parent {
		if p < 0 {
			roots++
			continue
		}
		require.Less(t, p, n)
		require.NotEqual(t, r, p)
		children[p]++
	}
	require.Equal(t, 1, roots, "one root")
	depth := 0
	for r := range n {
		d := 0
		for at := r; parent[at] >= 0; at = parent[at] {
			d++
			require.LessOrEqual(t, d, n, "rank %d: a cycle", r)
		}
		depth = max(depth, d)
	}
	for r, c := range children {
		assert.LessOrEqual(t, c, 2, "rank %d", r)
	}
	return depth
}

func TestDoubleTree(t *testing.T) {
	for n := 2; n <= 300; n++ {
		dt := doubleTree(n)
		d0 := checkTree(t, dt.parent[0])
		d1 := checkTree(t, dt.parent[1])
		assert.Equal(t, max(d0, d1), dt.depth, "n=%d", n)
		// near log2 n: no deeper than the bits of n
		assert.LessOrEqual(t, dt.depth, bits.Len(uint(n)), "n=%d", n)
		// at most 3 edges in one tree and 1 or 3 in the other
		assert.GreaterOrEqual(t, dt.maxEdges, 2, "n=%d", n)
		assert.LessOrEqual(t, dt.maxEdges, 4, "n=%d", n)
		// in order: every rank lies on the same side of each ancestor as
		// the ancestor's child it descends from
		for x := range n {
			for c, a := x, dt.parent[0][x]; a >= 0; c, a = a, dt.parent[0][a] {
				assert.Equal(t, c < a, x < a, "n=%d rank %d under %d", n, x, a)
			}
		}
		// the first tree's leaves are the even ranks, interior in the second
		for r := 0; r < n-1; r += 2 {
			assert.True(t, isLeaf(dt.parent[0], r), "n=%d rank %d", n, r)
			if n%2 == 0 {
				assert.False(t, isLeaf(dt.parent[1], r), "n=%d rank %d", n, r)
			}
		}
	}
	// Hand-built small cases: positions 1..n, root at the highest power of two.
	assert.Equal(t, dtree{parent: [2][]int{{1, -1}, {-1, 0}}, maxEdges: 2, depth: 1}, doubleTree(2))
	p, d := inOrderTree(4)
	assert.Equal(t, []int{1, 3, 1, -1}, p)
	assert.Equal(t, 2, d)
	p, d = inOrderTree(7)
	assert.Equal(t, []int{1, 3, 1, -1, 5, 3, 5}, p)
	assert.Equal(t, 2, d)
	assert.Equal(t, 4, doubleTree(64).maxEdges)
}

func isLeaf(parent []int, r int) bool {
	for _, p := range parent {
		if p == r {
			return false
		}
	}
	return true
}

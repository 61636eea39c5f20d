package costmodel

import "math/bits"

// dtree is a double binary tree over n ranks: two binary trees, each
// carrying half of the data, so that a rank that is interior (up to three
// edges) in one is mostly a leaf (one edge) in the other.
type dtree struct {
	parent   [2][]int // -1 at a root
	maxEdges int      // the most edges any rank has, both trees together
	depth    int      // edges on the longest root-to-leaf path of either tree
}

// doubleTree builds the first tree over ranks in order (inOrderTree) and
// the second as the first with every rank moved up by one (rank r takes
// the place of rank r+1 mod n), so that the first tree's leaves, the even
// ranks, are interior in the second.
func doubleTree(n int) dtree {
	var t dtree
	var d0 int
	t.parent[0], d0 = inOrderTree(n)
	t.parent[1] = make([]int, n)
	for r := range n {
		p := t.parent[0][(r+1)%n]
		if p >= 0 {
			p = (p - 1 + n) % n
		}
		t.parent[1][r] = p
	}
	t.depth = d0 // the second tree is the first relabelled
	edges := make([]int, n)
	for _, par := range t.parent {
		for r, p := range par {
			if p >= 0 {
				edges[r]++
				edges[p]++
			}
		}
	}
	for _, e := range edges {
		t.maxEdges = max(t.maxEdges, e)
	}
	return t
}

// inOrderTree is a binary tree whose in-order walk visits ranks 0..n-1:
// the root of every range of ranks is the one whose 1-based position has
// the most trailing zeros (unique in a range: between two multiples of
// 2^k lies a multiple of 2^(k+1)), which keeps the depth near log2 n. It
// returns each rank's parent (-1 at the root) and the depth in edges.
func inOrderTree(n int) ([]int, int) {
	parent := make([]int, n)
	var build func(lo, hi, up int) int
	build = func(lo, hi, up int) int {
		if lo > hi {
			return -1
		}
		root, best := lo, -1
		for r := lo; r <= hi; r++ {
			if z := bits.TrailingZeros(uint(r + 1)); z > best {
				root, best = r, z
			}
		}
		parent[root] = up
		return 1 + max(build(lo, root-1, root), build(root+1, hi, root))
	}
	return parent, build(0, n-1, -1)
}
